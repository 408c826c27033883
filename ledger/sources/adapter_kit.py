"""Small helpers shared by the Gemini CLI, Cursor and OpenClaw source modules.

* :class:`LineKeys` gives records without ids a stable idempotency key: the sha256 of
  the record's bytes plus its occurrence number among identical records of the file,
  so re-importing a file (or a grown copy of it) yields the same keys.
* :func:`hook_envelope` validates the session id and event name of a hook payload and
  raises :class:`HookPayloadError` (the error ``ledger.ingest`` turns into a rejected
  input) when the payload cannot be attributed.
* :func:`prompt_kind` tells a slash command from a typed prompt.
* :func:`text_parts` reads the texts of a message's content (a string, or Anthropic
  content blocks of type ``text``), as Claude Code and Cursor write it.
* :class:`PromptCounter` / :class:`CallCounter` give a file's prompts and id-less tool
  calls the alias keys hook facts of the same session get in the aggregate, so a fact
  seen by a hook and by a file import is one fact.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ledger.observation import MAX_COUNT, call_hash
from ledger.sources.claude_common import parse_time, text_hash
from ledger.sources.claude_hooks import HookPayloadError

__all__ = [
    "CallCounter",
    "HookPayloadError",
    "LineKeys",
    "PromptCounter",
    "as_int",
    "as_str",
    "call_hash",
    "hook_envelope",
    "parse_time",
    "prompt_kind",
    "text_hash",
]

_COMMAND = re.compile(r"/[A-Za-z][A-Za-z0-9_:.\-]{0,127}(\s|$)")


class LineKeys:
    """``line:{sha256[:32]}:{n}`` for the n-th (1-based) occurrence of identical bytes."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def key(self, data: bytes) -> str:
        digest = hashlib.sha256(data.strip()).hexdigest()[:32]
        n = self.counts.get(digest, 0) + 1
        self.counts[digest] = n
        return f"line:{digest}:{n}"


class PromptCounter:
    """Alias keys ``prompt:{text hash}:{n}`` shared with hook prompts of the same session
    (the aggregate counts hook prompts the same way), so a prompt seen by a hook and by
    a transcript import is one fact."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def alias(self, session: str, text: str) -> str:
        h = text_hash(text)
        n = self.counts.get((session, h), 0) + 1
        self.counts[(session, h)] = n
        return f"prompt:{h}:{n}"


class CallCounter:
    """Alias keys ``call:{call hash}:{n}`` for a file's tool calls (the n-th call of the
    same tool and input in the file, per session ``scope``; its completion
    ``call:{call hash}:{n}:end``). The aggregate gives hook tool calls that carry no id
    the file shares the same aliases, counting hook calls the same way
    (:meth:`ledger.session.Session.live_alias`), so a call seen by a hook and by a file
    import is one call. Cursor files store the alias (their calls have no id); files
    whose calls have ids hand it over in ``Observation.extra["call_alias"]`` only."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.of_call: dict[str, str] = {}
        """A call id -> its alias (:meth:`end`)."""

    def alias(
        self, tool_name: str, tool_input: Any, scope: str = "", call_id: str | None = None
    ) -> str:
        """The next alias of this tool and input in ``scope``; a ``call_id`` given again
        (the same call repeated in the file) keeps its first alias."""
        if call_id is not None and call_id in self.of_call:
            return self.of_call[call_id]
        h = call_hash(tool_name, tool_input)
        n = self.counts.get((scope, h), 0) + 1
        self.counts[(scope, h)] = n
        alias = f"call:{h}:{n}"
        if call_id is not None:
            self.of_call[call_id] = alias
        return alias

    def end(self, call_id: str) -> str | None:
        """The completion's alias of the call ``call_id`` given to :meth:`alias`."""
        start = self.of_call.get(call_id)
        return None if start is None else f"{start}:end"


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_COUNT <= value <= MAX_COUNT else None
    if isinstance(value, float) and value.is_integer() and -MAX_COUNT <= value <= MAX_COUNT:
        return int(value)
    return None


def prompt_kind(text: str) -> str:
    """``command`` for ``/name args`` input, else ``human``."""
    return "command" if _COMMAND.match(text.strip()) else "human"


def hook_envelope(payload: Any, id_fields: tuple[str, ...], name_field: str) -> tuple[str, str]:
    """``(session id, event name)`` of a hook payload.

    Raises:
        HookPayloadError: not a JSON object, or no non-empty string in any of
            ``id_fields`` / in ``name_field``.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError(f"hook payload is a JSON {type(payload).__name__}, not an object")
    sid = next(
        (payload[f] for f in id_fields if isinstance(payload.get(f), str) and payload[f]), None
    )
    if sid is None:
        raise HookPayloadError(f"hook payload has no {' or '.join(id_fields)}")
    name = payload.get(name_field)
    if not isinstance(name, str) or not name:
        raise HookPayloadError(f"hook payload has no {name_field}")
    return sid, name


def text_parts(content: Any) -> list[str]:
    """The texts of message ``content``: ``[content]`` for a string, the ``text`` of each
    ``{"type": "text", "text": str}`` block of a list, else ``[]``."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
    return []
