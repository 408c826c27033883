"""Decoding JSON text from agents: orjson, and the standard library for the one thing
orjson refuses that JSON's grammar allows.

RFC 8259 §8.2 lets a string hold a ``\\uD800``–``\\uDFFF`` escape without its pair.
JavaScript writes one when it cuts a string in the middle of an emoji (a tool output
truncated by length, ``JSON.stringify`` of the rest), so Claude Code's transcripts and
hook payloads can carry them. orjson rejects such text ("no low surrogate in string");
:func:`loads` then reads it with :mod:`json` and puts U+FFFD (the replacement
character) in place of each unpaired surrogate, which no UTF-8 text can hold. An
event whose raw record is the source line itself (transcript and stream lines) keeps
the escape there as written; one whose raw record is the decoded value (a hook
payload) holds U+FFFD there too.

Every other failure is orjson's, unchanged: what the fallback would accept beyond
orjson (``NaN``, ``Infinity``) is refused, and when the fallback fails too, orjson's
error is raised.

orjson reads arrays and objects nested up to 1,024 levels deep but writes at most 254
(an event holds its payload a level or two further down), and the privacy walk
recurses once per level: :func:`loads` refuses a value nested deeper than
:data:`MAX_DEPTH` (:class:`TooDeep`, a ``JSONDecodeError``), so every reader that keeps
text that is not JSON as rejected input (a hook body, a transcript or rollout line, a
``run``'s stream line) keeps that one too, with the reason, instead of failing when it
is recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_DEPTH = 200
"""Deepest nesting of arrays and objects in a value the ledger records as a fact."""


class TooDeep(orjson.JSONDecodeError):
    """JSON text whose arrays and objects nest deeper than :data:`MAX_DEPTH`."""

    def __init__(self) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} arrays and objects", "", 0)

    def __str__(self) -> str:
        return self.msg


def loads(data: bytes | bytearray | memoryview | str, max_depth: int | None = MAX_DEPTH) -> Any:
    """The JSON value of ``data`` (UTF-8 bytes or text).

    ``max_depth``: None for a whole document whose reader checks its records itself
    (:func:`too_deep`) once it knows it will record them (walking a large document's
    every container costs milliseconds).

    Raises:
        orjson.JSONDecodeError: ``data`` is not JSON text (a ``ValueError``): orjson's
            error, also when the fallback for unpaired surrogates fails; or
            :class:`TooDeep` (a subclass) when it nests deeper than ``max_depth``.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if "surrogate" not in str(e):
            raise
        try:
            text = data if isinstance(data, str) else bytes(data).decode("utf-8")
            value = _scrub(json.loads(text, parse_constant=_refuse_constant))
        except (ValueError, RecursionError):
            raise e from None
    if max_depth is not None and _brackets(data) > max_depth and too_deep(value, max_depth):
        raise TooDeep()  # (fewer brackets cannot nest that deep)
    return value


def _brackets(data: bytes | bytearray | memoryview | str) -> int:
    """How many ``[`` and ``{`` ``data`` holds (in strings too): at least its depth."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    if isinstance(data, memoryview):
        data = data.tobytes()
    return data.count(b"[") + data.count(b"{")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _scrub(value: Any) -> Any:
    """``value`` with every unpaired surrogate in its strings (keys too) as U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


_ORJSON_DEPTH = 254
"""The deepest nesting orjson writes (it raises "Recursion limit reached" past it)."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (a decoded JSON value) nests arrays and objects more than
    ``limit`` levels deep; a scalar is 0 levels. Asked of orjson (in C): ``value``
    inside ``254 - limit`` more lists is written unless it is deeper than ``limit``;
    else, or when orjson cannot write it for another reason, level by level."""
    if 0 <= limit < _ORJSON_DEPTH:
        wrapped = value
        for _ in range(_ORJSON_DEPTH - limit):
            wrapped = [wrapped]
        try:
            orjson.dumps(wrapped)
            return False
        except TypeError as e:
            if str(e) == "Recursion limit reached":
                return True
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        inner = []
        for v in level:
            for c in v.values() if isinstance(v, dict) else v:
                if isinstance(c, dict | list):
                    inner.append(c)
        level = inner
    return False
