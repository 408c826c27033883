"""Which of a fixed set of byte literals occur in a text: one pass over it.

:class:`LiteralScanner` answers "which of these ~70 literals occur in these bytes" for
the secret pre-check at capture (:mod:`ledger.secrets`). With the ``ahocorasick-rs``
package importable (and :data:`USE_AUTOMATON` true) it runs one Aho–Corasick automaton
(a DFA in Rust) over the lower-cased text; otherwise it falls back to one
``bytes.__contains__`` scan per literal. Both give the same answer; the automaton reads
the text once instead of once per literal.

Standard library only at import time: ``ahocorasick_rs`` is imported when a scanner is
built (on the first scan), never by the hook client's hot path (which does not scan).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

USE_AUTOMATON = True
"""Use the Aho–Corasick automaton when ``ahocorasick_rs`` imports. Read when a scanner
is built; tests set it to False to exercise the fallback."""


def _automaton(patterns: list[bytes]) -> Any:
    """A ``BytesAhoCorasick`` over ``patterns``, or None without ``ahocorasick_rs``."""
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    return ahocorasick_rs.BytesAhoCorasick(
        patterns, implementation=ahocorasick_rs.Implementation.DFA
    )


class LiteralScanner:
    """Finds which of a fixed set of literals occur in a text.

    Args:
        exact: literals matched case-sensitively in the text.
        folded: literals (given lower-case) matched in the ASCII-lower-cased text.

        use_automaton: run the automaton if ``ahocorasick_rs`` imports (default:
            :data:`USE_AUTOMATON` at construction).

    A literal may be in both sets; :meth:`present` reports each set separately.
    Raises ValueError for an empty literal or a folded one that is not lower-case.
    """

    def __init__(
        self,
        exact: Iterable[bytes],
        folded: Iterable[bytes],
        use_automaton: bool | None = None,
    ) -> None:
        self.exact = tuple(sorted(set(exact)))
        self.folded = tuple(sorted(set(folded)))
        if any(s != s.lower() for s in self.folded) or not all((*self.exact, *self.folded)):
            raise ValueError("folded literals must be lower-case, and no literal empty")
        # one automaton over the lower-cased forms of both sets: pattern i -> the exact
        # literals with that lower-case form (confirmed in the original text) and whether
        # it is a folded literal itself
        self._patterns = sorted({s.lower() for s in self.exact} | set(self.folded))
        folded_set = set(self.folded)
        self._meaning = [
            (tuple(e for e in self.exact if e.lower() == p), p in folded_set)
            for p in self._patterns
        ]
        use = USE_AUTOMATON if use_automaton is None else use_automaton
        self._ac: Any = _automaton(self._patterns) if use else None

    @property
    def uses_automaton(self) -> bool:
        """Whether :meth:`present` runs the automaton."""
        return self._ac is not None

    def present(
        self, raw: bytes, lowered: bytes | None = None
    ) -> tuple[frozenset[bytes], frozenset[bytes]]:
        """(exact literals occurring in ``raw``, folded literals occurring in
        ``raw.lower()``). ``lowered``: ``raw.lower()`` when the caller has it."""
        low = raw.lower() if lowered is None else lowered
        if self._ac is None:
            return (
                frozenset(s for s in self.exact if s in raw),
                frozenset(s for s in self.folded if s in low),
            )
        found = {m[0] for m in self._ac.find_matches_as_indexes(low, overlapping=True)}
        return self._confirm(raw, found)

    def present_many(
        self, raws: Sequence[bytes]
    ) -> list[tuple[frozenset[bytes], frozenset[bytes]]]:
        """:meth:`present` of each text, with one automaton call for all of them.

        Why: the automaton releases the GIL for every call, and getting it back while
        another thread runs Python costs up to the interpreter's switch interval (5 ms):
        a server thread ingesting one hook after another would pay that per record.
        The texts are joined with NUL bytes, which no literal holds, so no match spans
        two texts."""
        if self._ac is None or len(raws) < 2:
            return [self.present(r) for r in raws]
        starts: list[int] = []
        pos = 0
        for r in raws:
            starts.append(pos)
            pos += len(r) + 1
        hits: list[set[int]] = [set() for _ in raws]
        joined = b"\x00".join(raws).lower()
        for i, start, _ in self._ac.find_matches_as_indexes(joined, overlapping=True):
            hits[bisect_right(starts, start) - 1].add(i)
        return [self._confirm(r, h) for r, h in zip(raws, hits, strict=True)]

    def _confirm(self, raw: bytes, found: set[int]) -> tuple[frozenset[bytes], frozenset[bytes]]:
        """The literals of the patterns ``found`` in ``raw.lower()``, exact ones
        confirmed in ``raw`` itself."""
        exact: set[bytes] = set()
        folded: set[bytes] = set()
        meaning = self._meaning
        for i in found:
            candidates, is_folded = meaning[i]
            if is_folded:
                folded.add(self._patterns[i])
            for s in candidates:  # found in the lower-cased text: confirm the case
                if s in raw:
                    exact.add(s)
        return frozenset(exact), frozenset(folded)
