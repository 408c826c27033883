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
from collections.abc import Callable
from typing import Any

from ledger.secrets import RuleSet, redact_field_value, redact_secrets, rules_for

_TAG = re.compile(r"<(/?)private\s{0,16}>", re.IGNORECASE | re.ASCII)
PLACEHOLDER = "[private]"
_TAG_CHAR_ESCAPE = re.compile(r"\\u00(3[cCeE]|2[fF]|7[0246]|6[159]|5[0246]|4[159])")
"""A JSON ``\\uXXXX`` escape of a character a tag is made of: ``<``, ``>``, ``/`` and
the letters of ``private`` in either case (Go's encoder, for one, writes ``<`` as
``\\u003c``)."""


def may_hold_private(raw: bytes) -> bool:
    """Cheap, exact pre-check on JSON text: False only when no string in ``raw`` can
    decode to a tag or a catalogued secret — no ``<private`` or ``</private`` in any
    (ASCII) case, no escape that could spell one, and no literal of any secret rule
    (:func:`ledger.secrets.rules_for`: one pass over ``raw``, remembered for the walk)."""
    found = rules_for(raw)  # every rule, and tags, when an escape could hide a literal
    return found.private or found.fields or bool(found.rules)


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


def decode_tag_escapes(text: str) -> str:
    """``text`` (JSON text, or what may be) with the ``\\uXXXX`` escapes of the
    characters a tag is made of decoded, so ``\\u003cprivate\\u003e`` reads as the
    tag it spells inside a JSON string. The decoded characters need no escape in a JSON
    string, so JSON text stays JSON. An escaped backslash before ``u003c`` is decoded
    too: failing closed, such text may lose more than it should, never keep a span."""
    if "\\u" not in text:
        return text
    return _TAG_CHAR_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def strip_private_json_text(text: str) -> tuple[str, int]:
    """:func:`strip_private_text` of JSON text that could not be parsed (not JSON, too
    deep): tags spelled with escapes count (:func:`decode_tag_escapes`). Returns (text,
    spans removed); ``text`` unchanged when none was."""
    decoded = decode_tag_escapes(text)
    cleaned, n = strip_private_text(decoded)
    return (cleaned, n) if n else (text, 0)


def redact_text(
    text: str, path: str = "$", *, json_text: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """Strip ``<private>`` spans, then redact catalogued secrets, in one string (a hook
    body or a rejected line as text). ``json_text``: ``text`` is JSON text as received
    (e.g. a rejected record), whose tags may be spelled with escapes
    (:func:`strip_private_json_text`). Returns (text, redaction dicts ``{kind, path,
    count}``); kinds are ``private_tag`` and the :func:`ledger.secrets.catalogue` kinds."""
    redactions: list[dict[str, Any]] = []
    strip = strip_private_json_text if json_text else strip_private_text
    return _text(text, path, redactions, strip=strip), redactions


def _text(
    text: str,
    path: str,
    redactions: list[dict[str, Any]],
    rules: RuleSet | None = None,
    strip: Callable[[str], tuple[str, int]] = strip_private_text,
) -> str:
    cleaned = text
    if rules is None or rules.private:
        cleaned, n = strip(text)
        if n:
            redactions.append({"kind": "private_tag", "path": path, "count": n})
    cleaned, counts = redact_secrets(cleaned, rules)
    redactions.extend({"kind": k, "path": path, "count": c} for k, c in counts.items())
    return cleaned


def strip_private(
    value: Any, path: str = "$", raw: bytes | None = None
) -> tuple[Any, list[dict[str, Any]]]:
    """Apply :func:`redact_text` to every string (values and keys) in a JSON value, and
    redact whole a string value whose key names a secret.

    ``raw``: the JSON text ``value`` was decoded from, when the caller has it: the walk
    is skipped when :func:`may_hold_private` says nothing in it can need redacting, and
    else only the secret rules whose literals occur in it are tried
    (:func:`ledger.secrets.rules_for`).
    Returns the cleaned value (a new object only where something changed) and a list of
    redaction dicts ``{"kind": ..., "path": ..., "count": n}``.
    """
    redactions: list[dict[str, Any]] = []
    rules = rules_for(raw, value) if raw is not None else None
    if rules is not None and not (rules.rules or rules.fields or rules.private):
        return value, redactions  # nothing in the text can need redacting
    return _walk(value, path, redactions, rules), redactions


def _walk(
    value: Any, path: str, redactions: list[dict[str, Any]], rules: RuleSet | None
) -> Any:
    if isinstance(value, str):
        return _text(value, path, redactions, rules)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _text(k, f"{path}.<key>", redactions, rules) if isinstance(k, str) else k
            child = f"{path}.{key}"  # the cleaned key: a path never holds what was removed
            v = _walk(v, child, redactions, rules)
            if isinstance(v, str) and isinstance(k, str) and (rules is None or rules.fields):
                v, kind = redact_field_value(k, v)
                if kind:
                    redactions.append({"kind": kind, "path": child, "count": 1})
            out[key] = v
        return out
    if isinstance(value, list):
        return [_walk(v, f"{path}[{i}]", redactions, rules) for i, v in enumerate(value)]
    return value
