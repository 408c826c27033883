"""Cursor agent transcripts -> observations.

Format source: ``shared/research/FORMATS.md`` A8 and C19; samples in
``tests/fixtures/agent-sessions-schema-drift/cursor_transcript_*.jsonl`` (jazzyalex/
agent-sessions, sanitised from real files).

``~/.cursor/projects/<sanitized>/agent-transcripts/<conversation_id>.jsonl``: one line
per message, ``{role, message{content[]}}``, with no uuid and no timestamp. Hence:

* the session is the file name (the ``conversation_id`` Cursor hooks carry too);
* a line's key is ``line:{sha256 of its bytes}:{n}`` (n-th identical line), stable
  when the file is re-imported or has grown;
* ``tool_use`` (drift: ``tool_call``) blocks carry no id: the call id is
  ``{line key}#{block index}``; a ``tool_result`` (drift: ``tool-result``) names its
  call by ``tool_use_id`` when present, else it closes the oldest open call of the
  same tool name in the file. An id-less call has the alias ``call:{hash of tool name
  and input}:{n}`` (n-th such call in the file; its completion the alias plus
  ``:end``), the alias the aggregate gives the hook's copy of the call
  (``preToolUse``/``postToolUse``), so hooks plus an import count it once. The two
  copies spell some input keys differently (the transcript's ``Write`` is
  ``{path, contents}``, the hook's ``{file_path, content}``: entireio/cli
  ``cmd/entire/cli/agent/cursor/AGENT.md``), so the hash is over :func:`call_input`;
* ``user`` text blocks are a prompt (the text inside ``<user_query>`` when present, so
  it equals the hook's ``beforeSubmitPrompt.prompt``); ``assistant``
  text blocks a reply; a line without ``role`` is kept as ``RecordObserved`` (except
  ``{"type": "turn_ended"}``, a ``TurnEnded``). Cursor transcripts carry no token usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import Observation, Rejected, SessionRef
from ledger.privacy import may_hold_private, strip_private
from ledger.sources.adapter_kit import (
    CallCounter,
    LineKeys,
    PromptCounter,
    as_str,
    prompt_kind,
    text_parts,
)
from ledger.sources.jsonl import unreadable

AGENT = "cursor"
SOURCE_FORMAT = "cursor.transcript"
_CALLS = ("tool_use", "tool_call")
_RESULTS = ("tool_result", "tool-result")


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "cursor.transcript": frozenset(
        {
            "AssistantReplied",
            "PromptSubmitted",
            "RecordObserved",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
        }
    ),
}

def parse_records(
    lines: Iterable[bytes], source: str, conversation_id: str
) -> Iterator[Observation | Rejected]:
    """Parse transcript lines of the conversation ``conversation_id`` (file name stem)."""
    ref = SessionRef(AGENT, conversation_id)
    keys = LineKeys()
    prompts = PromptCounter()
    calls = CallCounter()
    open_calls: list[tuple[str, str, str | None]] = []  # (tool_use_id, name, alias), oldest first
    last_prompt: str | None = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = jsontext.loads(line)
        except orjson.JSONDecodeError as e:
            yield Rejected(
                source, f"line {lineno}", f"not valid JSON: {e}", line, AGENT, SOURCE_FORMAT
            )
            continue
        if not isinstance(rec, dict):
            reason = f"record is a JSON {type(rec).__name__}, not an object"
            yield Rejected(source, f"line {lineno}", reason, line, AGENT, SOURCE_FORMAT)
            continue
        try:  # a record the parser raises on is rejected; the rest of the file is read
            redactions: list[dict[str, Any]] = []
            if may_hold_private(line):
                rec, redactions = strip_private(rec, raw=line)
            key = keys.key(line)
            common: dict[str, Any] = {
                "source_format": SOURCE_FORMAT,
                "record_key": key,
                "after_prompt": last_prompt,
            }

            def obs(
                kind: str, data: dict[str, Any], k: str = key, common: dict[str, Any] = common
            ) -> Observation:
                return Observation(ref, kind, k, data, **common)

            role = as_str(rec.get("role"))
            message = rec.get("message") if isinstance(rec.get("message"), dict) else {}
            content = message.get("content")
            blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            texts = text_parts(content)
            facts: list[Observation] = []
            if role == "user":
                text = _unwrap("\n".join(texts))
                if text.strip():
                    kind = prompt_kind(text)
                    p = obs("PromptSubmitted", {"text": text, "prompt_kind": kind})
                    p.after_prompt = None
                    p.alias_keys = (prompts.alias(conversation_id, text),)
                    facts.append(p)
                    if kind == "human":  # the alias: also the hook's copy of the prompt
                        last_prompt = p.alias_keys[0]
                for i, b in enumerate(blocks):
                    if b.get("type") in _RESULTS:
                        facts.append(_result(b, f"{key}#{i}", open_calls, obs))
            elif role == "assistant":
                facts.append(
                    obs(
                        "AssistantReplied",
                        {
                            "message_id": key,
                            "model": as_str(rec.get("model")),
                            "text": "\n".join(texts),
                            "has_thinking": any(b.get("type") == "thinking" for b in blocks),
                        },
                    )
                )
                for i, b in enumerate(blocks):
                    if b.get("type") in _CALLS:
                        tool_id = as_str(b.get("id"))
                        name = as_str(b.get("name")) or "(unknown)"
                        alias = None if tool_id else calls.alias(name, call_input(b.get("input")))
                        tool_id = tool_id or f"{key}#{i}"
                        open_calls.append((tool_id, name, alias))
                        start = obs(
                            "ToolCallStarted",
                            {
                                "tool_use_id": tool_id,
                                "tool_name": name,
                                "tool_input": b.get("input"),
                                "message_id": key,
                            },
                            f"tool:{tool_id}:start",
                        )
                        start.alias_keys = (alias,) if alias else ()
                        facts.append(start)
            elif rec.get("type") == "turn_ended":
                facts.append(obs("TurnEnded", {"reason": as_str(rec.get("status")) or "turn_ended"}))
            if not facts:
                label = f"message:{role}" if role else (as_str(rec.get("type")) or "(none)")
                facts.append(obs("RecordObserved", {"record_type": label}))
            facts[0].raw = rec
            facts[0].redactions = tuple(redactions)
        except Exception as e:
            yield unreadable(e, line, source, f"line {lineno}", AGENT, SOURCE_FORMAT)
            continue
        yield from facts


_HOOK_SPELLING = {"file_path": "path", "content": "contents"}
"""Input keys a Cursor hook spells as Claude Code does -> the transcript's spelling."""


def call_input(tool_input: Any) -> Any:
    """A Cursor tool call's input as both its copies hash it (the transcript's
    ``tool_use.input`` and the hooks' ``tool_input``, :func:`ledger.observation.call_hash`):
    the transcript's key spelling (``file_path`` -> ``path``, ``content`` -> ``contents``);
    the stored input is the one each copy gave."""
    if not isinstance(tool_input, dict):
        return tool_input
    return {_HOOK_SPELLING.get(k, k): v for k, v in tool_input.items()}


def _unwrap(text: str) -> str:
    """The typed query of a user message: Cursor wraps it in ``<user_query>`` (beside
    context blocks such as attached files); text without the wrapper is kept whole."""
    start = text.find("<user_query>")
    end = text.find("</user_query>", start + 1) if start >= 0 else -1
    return text[start + len("<user_query>") : end].strip() if end >= 0 else text


def _result(
    block: dict[str, Any],
    fallback: str,
    open_calls: list[tuple[str, str, str | None]],
    obs: Any,
) -> Observation:
    name = as_str(block.get("name"))
    tool_id = as_str(block.get("tool_use_id")) or as_str(block.get("id"))
    if tool_id is None:
        match = next((c for c in open_calls if name is None or c[1] == name), None)
        tool_id = match[0] if match else fallback
    alias = next((c[2] for c in open_calls if c[0] == tool_id), None)
    open_calls[:] = [c for c in open_calls if c[0] != tool_id]
    is_error = block.get("is_error") is True
    done = obs(
        "ToolCallCompleted",
        {
            "tool_use_id": tool_id,
            "tool_name": name,
            "output": block.get("content"),
            "is_error": is_error,
        },
        f"tool:{tool_id}:end",
    )
    done.alias_keys = (f"{alias}:end",) if alias else ()
    return done
