"""Privacy at the edge: ``<private>…</private>`` content is removed and known secret
shapes (:mod:`ledger.secrets`) are redacted before storage.

Work is linear in the input: one pass of a regex with no nested quantifiers finds the
tags (``<private>`` / ``</private>``, any case), and pairing them is a scan over the
matches. An unclosed ``<private>`` removes everything after it (failing closed). The
removed text is replaced by ``[private]`` and each removal is reported as a
:class:`~ledger.envelope.Redaction` (kind and JSON path, never the content).
Secrets are then replaced by ``[redacted:<kind>]`` (one redaction per kind and path);
a string value under an object key that names a secret (``password``, ``api_key`` …)
is redacted whole. Standard library only (the hook client imports this module).
"""

from __future__ import annotations

import re
from typing import Any

from ledger.secrets import (
    ASCII_ESCAPE,
    Rule,
    candidate_rules,
    redact_field_value,
    redact_secrets,
)

_TAG = re.compile(r"<(/?)private\s{0,16}>", re.IGNORECASE | re.ASCII)
PLACEHOLDER = "[private]"
_FIELD_RULES = frozenset({"secret_field", "gcp_service_account_key_id"})
"""Rules whose literals a record must hold for a key to name a secret
(:func:`ledger.secrets.redact_field_value`)."""


class Scan:
    """What a pre-check of one record's JSON text found: whether a ``<private>`` tag may
    be in it, and which secret rules may match (:func:`ledger.secrets.candidate_rules`).
    False when neither: the record needs no walk at all."""

    __slots__ = ("rules", "tags")

    def __init__(self, tags: bool, rules: tuple[Rule, ...]) -> None:
        self.tags = tags
        self.rules = rules

    def __bool__(self) -> bool:
        return self.tags or bool(self.rules)


def may_hold_private(raw: bytes) -> Scan:
    """Cheap, exact pre-check on JSON text: false only when no string in ``raw`` can
    decode to a tag or a catalogued secret — no ``private`` in any (ASCII) case, no
    ``\\u`` escape that could spell one, and no literal of any secret rule. Pass the
    result to :func:`strip_private` so it tries only the rules that may match."""
    tags = b"private" in raw.lower() or (
        b"\\" in raw and ASCII_ESCAPE.search(raw) is not None
    )
    return Scan(tags, candidate_rules(raw))


def _scan_value(value: Any) -> Scan:
    import json  # only for records that come without their text (hook payloads)

    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return may_hold_private(text)


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


def redact_text(text: str, path: str = "$") -> tuple[str, list[dict[str, Any]]]:
    """Strip ``<private>`` spans, then redact catalogued secrets, in one string (a hook
    body or a rejected line as text). Returns (text, redaction dicts ``{kind, path,
    count}``); kinds are ``private_tag`` and the :func:`ledger.secrets.catalogue` kinds."""
    redactions: list[dict[str, Any]] = []
    return _text(text, path, redactions), redactions


def _text(
    text: str, path: str, redactions: list[dict[str, Any]], rules: tuple[Rule, ...] | None = None
) -> str:
    cleaned, n = strip_private_text(text)
    if n:
        redactions.append({"kind": "private_tag", "path": path, "count": n})
    cleaned, counts = redact_secrets(cleaned, rules)
    redactions.extend({"kind": k, "path": path, "count": c} for k, c in counts.items())
    return cleaned


def strip_private(
    value: Any, path: str = "$", scan: Scan | None = None
) -> tuple[Any, list[dict[str, Any]]]:
    """Apply :func:`redact_text` to every string (values and keys) in a JSON value, and
    redact whole a string value whose key names a secret. ``scan``: the
    :func:`may_hold_private` result of the value's JSON text, when the caller has it
    (else it is computed here); only the secret rules it names are tried.

    Returns the cleaned value (a new object only where something changed) and a list of
    redaction dicts ``{"kind": ..., "path": ..., "count": n}``.
    """
    if scan is None:
        scan = _scan_value(value)
    redactions: list[dict[str, Any]] = []
    if not scan:
        return value, redactions
    fields = any(r.kind in _FIELD_RULES for r in scan.rules)
    return _walk(value, path, redactions, scan.rules, fields), redactions


def _walk(
    value: Any,
    path: str,
    redactions: list[dict[str, Any]],
    rules: tuple[Rule, ...],
    fields: bool,
) -> Any:
    if isinstance(value, str):
        return _text(value, path, redactions, rules)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _text(k, f"{path}.<key>", redactions, rules) if isinstance(k, str) else k
            child = f"{path}.{k}"
            v = _walk(v, child, redactions, rules, fields)
            if fields and isinstance(v, str) and isinstance(k, str):
                v, kind = redact_field_value(k, v)
                if kind:
                    redactions.append({"kind": kind, "path": child, "count": 1})
            out[key] = v
        return out
    if isinstance(value, list):
        return [_walk(v, f"{path}[{i}]", redactions, rules, fields) for i, v in enumerate(value)]
    return value
