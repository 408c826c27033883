"""Shared line handling for the JSONL stream sources (stream-json, Codex exec, rollouts).

One line of input is decoded into a JSON object (privacy applied) or a
:class:`~ledger.observation.Rejected` with the reason; nothing is dropped. Keys for
records without an id of their own are built from the line's bytes (see
:class:`LineKeys`), so a re-import of the same bytes gives the same keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import MAX_COUNT, Observation, Rejected
from ledger.privacy import may_hold_private, strip_private


@dataclass
class Decoded:
    """A decoded line: ``record`` (a dict) and the privacy ``redactions`` applied."""

    record: dict[str, Any]
    redactions: tuple[dict[str, Any], ...] = ()


def decode(
    line: bytes, source: str, location: str, agent: str, source_format: str
) -> Decoded | Rejected:
    """Decode one JSONL line; a line that is not UTF-8 JSON or not an object is rejected."""
    try:
        rec = jsontext.loads(line)
    except orjson.JSONDecodeError as e:
        reason = f"not valid JSON: {e}"
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            reason = "not valid UTF-8"
        return Rejected(source, location, reason, bytes(line), agent, source_format)
    if not isinstance(rec, dict):
        reason = f"record is a JSON {type(rec).__name__}, not an object"
        return Rejected(source, location, reason, bytes(line), agent, source_format)
    redactions: list[dict[str, Any]] = []
    if may_hold_private(line):
        rec, redactions = strip_private(rec)
    return Decoded(rec, tuple(redactions))


def line_hash(line: bytes) -> str:
    """32 hex chars of sha256 over the line without surrounding whitespace."""
    return hashlib.sha256(line.strip()).hexdigest()[:32]


@dataclass
class LineKeys:
    """Keys for records without ids: ``line:{sha256 of the line}:{n}``, where ``n`` counts
    identical lines earlier in the same stream (1-based), so a repeated record is a new
    fact and a re-import of the same bytes repeats the same keys."""

    seen: dict[str, int] = field(default_factory=dict)

    def key(self, line: bytes) -> str:
        h = line_hash(line)
        n = self.seen.get(h, 0) + 1
        self.seen[h] = n
        return f"line:{h}:{n}"


@dataclass
class PrefixChain:
    """A running sha256 over every line of one stream. ``feed(line)`` returns 16 hex chars
    naming the stream up to and including that line: equal for the same bytes (runner and
    import agree), different for two processes as soon as their output differs."""

    _h: Any = field(default_factory=hashlib.sha256)

    def feed(self, line: bytes) -> str:
        self._h.update(line.strip())
        self._h.update(b"\n")
        return self._h.copy().hexdigest()[:16]


def numbered_lines(lines: Iterable[bytes], first: int = 1) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` of the lines that are not blank, numbered from ``first``
    (blank lines count)."""
    for number, line in enumerate(lines, start=first):
        if line.strip():
            yield number, line


def guarded(
    facts: Callable[[], Iterable[Observation | Rejected]],
    line: bytes,
    source: str,
    location: str,
    agent: str,
    source_format: str,
) -> list[Observation | Rejected]:
    """The facts ``facts()`` reads from one record, or, when the parser raises on it (a
    shape it does not expect), that record kept as rejected input with the reason, so
    the rest of its file is still read. A record gives all its facts or none."""
    try:
        return list(facts())
    except Exception as e:
        return [unreadable(e, line, source, location, agent, source_format)]


def unreadable(
    error: Exception, line: bytes, source: str, location: str, agent: str, source_format: str
) -> Rejected:
    """A record its parser raised ``error`` on, as rejected input with the reason."""
    reason = f"the {source_format} parser cannot read this record: {type(error).__name__}: {error}"
    return Rejected(source, location, reason, line, agent, source_format)


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_COUNT <= value <= MAX_COUNT else None
    if isinstance(value, float) and value.is_integer() and -MAX_COUNT <= value <= MAX_COUNT:
        return int(value)
    return None


def json_objects(lines: Iterable[bytes]) -> Iterator[Any]:
    """The values of those ``lines`` that parse as JSON, the others skipped (format
    detection looks at a file's first lines; a broken one decides nothing)."""
    for line in lines:
        try:
            yield jsontext.loads(line)
        except orjson.JSONDecodeError:
            continue
