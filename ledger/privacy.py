"""Privacy at the edge: ``<private>…</private>`` content is removed before storage.

Work is linear in the input: one pass of a regex with no nested quantifiers finds the
tags (``<private>`` / ``</private>``, any case), and pairing them is a scan over the
matches. An unclosed ``<private>`` removes everything after it (failing closed). The
removed text is replaced by ``[private]`` and each removal is reported as a
:class:`~ledger.envelope.Redaction` (kind and JSON path, never the content).
"""

from __future__ import annotations

import re
from typing import Any

_TAG = re.compile(r"<(/?)private\s{0,16}>", re.IGNORECASE | re.ASCII)
PLACEHOLDER = "[private]"


def may_hold_private(raw: bytes) -> bool:
    """Cheap, exact pre-check on JSON text: False only when no string in ``raw`` can
    decode to a tag — no ``private`` in any (ASCII) case and no ``\\u`` escape that
    could spell one."""
    return b"\\u" in raw or b"private" in raw.lower()


def strip_private_text(text: str) -> tuple[str, int]:
    """Remove ``<private>…</private>`` spans from ``text``; returns (text, spans removed)."""
    if "<" not in text:
        return text, 0
    out: list[str] = []
    pos = 0
    depth = 0
    removed = 0
    for m in _TAG.finditer(text):
        closing = m.group(1) == "/"
        if not closing:
            if depth == 0:
                out.append(text[pos : m.start()])
                removed += 1
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                out.append(PLACEHOLDER)
                pos = m.end()
        # a stray closing tag outside any span is kept as text
    if depth > 0:
        out.append(PLACEHOLDER)
        return "".join(out), removed
    if removed == 0:
        return text, 0
    out.append(text[pos:])
    return "".join(out), removed


def strip_private(value: Any, path: str = "$") -> tuple[Any, list[dict[str, Any]]]:
    """Apply :func:`strip_private_text` to every string (values and keys) in a JSON value.

    Returns the cleaned value (a new object only where something changed) and a list of
    redaction dicts ``{"kind": "private_tag", "path": ..., "count": n}``.
    """
    redactions: list[dict[str, Any]] = []
    return _walk(value, path, redactions), redactions


def _walk(value: Any, path: str, redactions: list[dict[str, Any]]) -> Any:
    if isinstance(value, str):
        cleaned, n = strip_private_text(value)
        if n:
            redactions.append({"kind": "private_tag", "path": path, "count": n})
        return cleaned
    if isinstance(value, dict):
        return {
            _walk(k, f"{path}.<key>", redactions) if isinstance(k, str) else k: _walk(
                v, f"{path}.{k}", redactions
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_walk(v, f"{path}[{i}]", redactions) for i, v in enumerate(value)]
    return value
