"""OpenClaw session transcripts (JSONL) -> observations.

Format source: ``shared/research/FORMATS.md`` A9/B and the samples in
``tests/fixtures/agent-sessions-schema-drift/openclaw_session_*.jsonl`` (jazzyalex/
agent-sessions, sanitised from real OpenClaw sessions). Every line is
``{type, id, parentId, timestamp, ...}``:

* ``session`` (first line): ``{id, version, cwd}``; ``id`` is the session (the
  ``sessionId`` OpenClaw plugin hooks carry); a file without it uses its file name;
* ``message``: ``message.role`` ``user`` -> ``PromptSubmitted``; ``assistant`` ->
  ``AssistantReplied`` plus ``ToolCallStarted`` per ``toolCall{id, name, arguments}``
  block and ``UsageRecorded`` from ``message.usage{input, output, cacheRead,
  cacheWrite}`` when present (OpenClaw's ``input`` already excludes cache reads, so
  the fields map one to one) and ``CostReported`` (scope ``message``) from
  ``usage.cost.total`` when it is above 0 (OpenClaw's own USD estimate, often 0);
  ``toolResult{toolCallId, toolName, content, isError}`` ->
  ``ToolCallCompleted``; any other role is kept as ``RecordObserved``;
* ``compaction{summary, tokensBefore}`` -> ``Compacted``;
* anything else (``model_change``, ``thinking_level_change``, ``custom``,
  ``custom_message``, unknown types) -> ``RecordObserved`` with the raw line.

Keys: ``rec:{id}`` for records with an id (ids are unique within a session file),
else ``line:{sha256}:{n}``; tool calls ``tool:{toolCallId}:start|end``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import MAX_COUNT, Observation, Rejected, SessionRef, json_hash
from ledger.privacy import may_hold_private, strip_private
from ledger.sources.adapter_kit import (
    CallCounter,
    LineKeys,
    PromptCounter,
    as_int,
    as_str,
    parse_time,
    prompt_kind,
)
from ledger.sources.jsonl import unreadable

AGENT = "openclaw"
SOURCE_FORMAT = "openclaw.transcript"


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "openclaw.transcript": frozenset(
        {
            "AssistantReplied",
            "Compacted",
            "CostReported",
            "PromptSubmitted",
            "RecordObserved",
            "ToolCallCompleted",
            "ToolCallStarted",
            "UsageRecorded",
        }
    ),
}

def parse_records(
    lines: Iterable[bytes], source: str, fallback_id: str
) -> Iterator[Observation | Rejected]:
    """Parse session lines; ``fallback_id`` (file name stem) names a file without header."""
    ref = SessionRef(AGENT, fallback_id)
    keys = LineKeys()
    prompts = PromptCounter()
    calls = CallCounter()  # aliases handed over, never stored (Session._same_call)
    seen_ids: set[str] = set()
    last_prompt: str | None = None
    version: str | None = None
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
            rtype = as_str(rec.get("type")) or "(none)"
            rid = as_str(rec.get("id"))
            if rtype == "session" and rid and lineno == 1:
                ref = SessionRef(AGENT, rid, cwd=as_str(rec.get("cwd")))
                version = str(rec["version"]) if isinstance(rec.get("version"), int | str) else None
            if rid and rid not in seen_ids:
                seen_ids.add(rid)
                key = f"rec:{rid}"
            else:
                key = keys.key(line)
            common: dict[str, Any] = {
                "source_format": SOURCE_FORMAT,
                "source_version": version,
                "record_key": key,
                "occurred_at": parse_time(rec.get("timestamp")),
                "after_prompt": last_prompt,
            }

            def obs(
                kind: str,
                data: dict[str, Any],
                k: str = key,
                common: dict[str, Any] = common,
                ref: SessionRef = ref,
            ) -> Observation:
                return Observation(ref, kind, k, data, **common)

            facts: list[Observation] = []
            message = rec.get("message") if isinstance(rec.get("message"), dict) else None
            if rtype == "message" and message is not None:
                role = as_str(message.get("role"))
                if role == "user":
                    text = _text(message.get("content"))
                    if text.strip():
                        kind = prompt_kind(text)
                        p = obs("PromptSubmitted", {"text": text, "prompt_kind": kind})
                        p.after_prompt = None
                        p.alias_keys = (prompts.alias(ref.external_id, text),)
                        facts.append(p)
                        if kind == "human":  # the alias: also the hook's copy of the prompt
                            last_prompt = p.alias_keys[0]
                elif role == "assistant":
                    facts.extend(_assistant(message, key, obs, calls))
                elif role == "toolResult":
                    tid = as_str(message.get("toolCallId")) or key
                    is_error = message.get("isError") is True
                    content = message.get("content")
                    done = obs(
                        "ToolCallCompleted",
                        {
                            "tool_use_id": tid,
                            "tool_name": as_str(message.get("toolName")),
                            "output": content,
                            "is_error": is_error,
                            "error": _text(content) if is_error else None,
                        },
                        f"tool:{tid}:end",
                    )
                    alias = calls.end(tid)
                    if alias is not None:
                        done.extra["call_alias"] = alias
                    facts.append(done)
                if not facts:
                    facts.append(obs("RecordObserved", {"record_type": f"message:{role}"}))
            elif rtype == "compaction":
                facts.append(
                    obs(
                        "Compacted",
                        {
                            "summary": as_str(rec.get("summary")),
                            "pre_tokens": as_int(rec.get("tokensBefore")),
                        },
                    )
                )
            else:
                facts.append(obs("RecordObserved", {"record_type": rtype}))
            facts[0].raw = rec
            facts[0].redactions = tuple(redactions)
        except Exception as e:
            yield unreadable(e, line, source, f"line {lineno}", AGENT, SOURCE_FORMAT)
            continue
        yield from facts


def _assistant(message: dict[str, Any], key: str, obs: Any, calls: CallCounter) -> list[Observation]:
    content = message.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    model = as_str(message.get("model"))
    facts = [
        obs(
            "AssistantReplied",
            {
                "message_id": key,
                "model": model,
                "text": _text(content),
                "stop_reason": as_str(message.get("stopReason")),
                "has_thinking": any(b.get("type") == "thinking" for b in blocks),
            },
        )
    ]
    for i, b in enumerate(blocks):
        if b.get("type") != "toolCall":
            continue
        tid = as_str(b.get("id")) or f"{key}#{i}"
        name = as_str(b.get("name")) or "(unknown)"
        start = obs(
            "ToolCallStarted",
            {
                "tool_use_id": tid,
                "tool_name": name,
                "tool_input": b.get("arguments"),
                "message_id": key,
            },
            f"tool:{tid}:start",
        )
        start.extra["call_alias"] = calls.alias(name, b.get("arguments"), call_id=tid)
        facts.append(start)
    usage = message.get("usage")
    if isinstance(usage, dict):
        tokens = usage_from_openclaw(usage)
        facts.append(
            obs(
                "UsageRecorded",
                {"message_id": key, "model": model, **tokens},
                f"usage:{key}:{json_hash(tokens)}",
            )
        )
        cost = usage.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        if (
            isinstance(total, int | float)
            and not isinstance(total, bool)
            and 0 < total <= MAX_COUNT
        ):
            facts.append(
                obs("CostReported", {"cost_usd": float(total), "scope": "message"}, f"cost:{key}")
            )
    return facts


def usage_from_openclaw(usage: dict[str, Any]) -> dict[str, int]:
    """OpenClaw ``{input, output, cacheRead, cacheWrite, total}`` -> token fields (counts).

    OpenClaw (pi-ai ``Usage``) counts ``input`` without cache reads and writes and
    ``total = input + output + cacheRead + cacheWrite``: the Anthropic convention as is.
    """
    return {
        "input_tokens": as_int(usage.get("input")) or 0,
        "output_tokens": as_int(usage.get("output")) or 0,
        "cache_creation_input_tokens": as_int(usage.get("cacheWrite")) or 0,
        "cache_read_input_tokens": as_int(usage.get("cacheRead")) or 0,
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""
