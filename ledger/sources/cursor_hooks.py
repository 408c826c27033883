"""Cursor hook payloads (stdin JSON, one object per hook call) -> observations.

Format source: ``shared/research/FORMATS.md`` A8 and C1/C18/C19 (cursor.com/docs/agent/
hooks; ``entireio/cli`` ``cmd/entire/cli/agent/cursor/AGENT.md`` @126f2ac). No licensed
real payload captures exist; the shapes are the documented ones.

Common fields: ``conversation_id`` (the session; ``session_id`` when absent),
``generation_id``, ``model``, ``hook_event_name`` (camelCase), ``cursor_version``,
``workspace_roots[]`` (the first root is the session's project: Cursor sends no
``cwd``), ``transcript_path`` (null in CLI mode), ``user_email``.

Privacy: ``user_email`` is never copied into a derived fact; the raw payload is kept
as received (after ``<private>`` stripping) like every other source's raw record.

Hooks -> facts:

* sessionStart / sessionEnd -> ``Started`` / ``Ended`` (``reason``, else ``final_status``);
* beforeSubmitPrompt ``{prompt}`` -> ``PromptSubmitted`` (alias shared with the transcript);
* stop ``{status}`` -> ``TurnEnded`` (reason = status);
* preToolUse / postToolUse / postToolUseFailure ``{tool_name, tool_input, tool_use_id,
  tool_output (JSON string), duration (ms)}`` -> ``ToolCallStarted`` /
  ``ToolCallCompleted`` keyed ``tool:{tool_use_id}:start|end`` (the id may hold a
  newline between its two parts: kept verbatim). The transcript's calls carry no id,
  so the aggregate also gives a start the alias ``call:{hash of tool name and
  input}:{n}`` (n-th such hook call of the session; the input in the transcript's key
  spelling, :func:`ledger.sources.cursor_transcript.call_input`) and its completion that alias
  plus ``:end``, the aliases the transcript import computes: one call, not two,
  whichever arrives first (a hook copy of a call the import recorded first is kept as
  a ``RecordObserved`` ``tool call captured again``). A ``postToolUse`` whose
  ``preToolUse`` has not come (none, or a late one) is known by the tool name and
  input it repeats: it meets the transcript's call, or derives the call's start (with
  its input and that alias); the ``preToolUse`` arriving later is the call's late
  start (``LateStartObserved``), not a second call;
* subagentStart / subagentStop ``{subagent_id, subagent_type, task}`` -> child session
  ``{conversation_id}/subagent-{subagent_id}``: ``SubagentLinked`` + child ``Started``
  (+ the task as its prompt) / ``SubagentStopped`` + child ``Ended``;
* afterAgentResponse ``{text}`` -> ``AssistantReplied``; preCompact -> ``Compacted``;
* before/afterShellExecution, before/afterMCPExecution, beforeReadFile, afterFileEdit,
  afterAgentThought, the Tab hooks -> ``RecordObserved`` (raw kept; they fire beside
  preToolUse/postToolUse for the same call, so they are not counted as calls twice);
* anything else -> ``UnknownHookEvent``.

Keys: ``hook:{capture_key}`` except tool calls (above).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import Observation, SessionRef
from ledger.privacy import strip_private
from ledger.sources.adapter_kit import (
    HookPayloadError,
    as_int,
    as_str,
    call_hash,
    hook_envelope,
    prompt_kind,
    text_hash,
)
from ledger.sources.cursor_transcript import call_input

AGENT = "cursor"
SOURCE_FORMAT = "cursor.hook"
_OBSERVED = frozenset(
    {
        "beforeShellExecution",
        "afterShellExecution",
        "beforeMCPExecution",
        "afterMCPExecution",
        "beforeReadFile",
        "afterFileEdit",
        "afterAgentThought",
        "beforeTabFileRead",
        "afterTabFileEdit",
    }
)

__all__ = ["SOURCE_FORMAT", "HookPayloadError", "parse_hook"]


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "cursor.hook": frozenset(
        {
            "AssistantReplied",
            "Compacted",
            "Ended",
            "PromptSubmitted",
            "RecordObserved",
            "Started",
            "SubagentLinked",
            "SubagentStopped",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UnknownHookEvent",
        }
    ),
}

def parse_hook(
    payload: Any, capture_key: str, captured_at: datetime, *, raw: bytes | None = None
) -> list[Observation]:
    """Turn one Cursor hook payload into observations (``occurred_at`` = capture time).

    Raises:
        HookPayloadError: not a JSON object, or no ``conversation_id``/``session_id``,
            or no ``hook_event_name``.
    """
    sid, name = hook_envelope(payload, ("conversation_id", "session_id"), "hook_event_name")
    payload, redactions = strip_private(payload, raw=raw)
    roots = payload.get("workspace_roots")
    project = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], str) else None
    ref = SessionRef(AGENT, sid, cwd=project)
    key = f"hook:{capture_key}"

    def obs(
        kind: str, data: dict[str, Any], k: str = key, session: SessionRef = ref
    ) -> Observation:
        return Observation(
            session,
            kind,
            k,
            data,
            source_format=SOURCE_FORMAT,
            occurred_at=captured_at,
            record_key=key,
            source_version=as_str(payload.get("cursor_version")),
        )

    p = payload
    facts: list[Observation]
    if name == "sessionStart":
        source = "background_agent" if p.get("is_background_agent") is True else "startup"
        facts = [obs("Started", {"source": source, "model": as_str(p.get("model"))})]
    elif name == "sessionEnd":
        facts = [obs("Ended", {"reason": as_str(p.get("reason")) or as_str(p.get("final_status"))})]
    elif name == "beforeSubmitPrompt":
        text = as_str(p.get("prompt")) or ""
        o = obs("PromptSubmitted", {"text": text, "prompt_kind": prompt_kind(text)})
        o.extra["hook_prompt_hash"] = text_hash(text)
        facts = [o]
    elif name == "stop":
        facts = [obs("TurnEnded", {"reason": as_str(p.get("status")) or "stop"})]
    elif name in ("preToolUse", "postToolUse", "postToolUseFailure"):
        facts = [_tool(name, p, obs, key)]
    elif name in ("subagentStart", "subagentStop"):
        facts = _subagent(name, p, ref, obs)
    elif name == "afterAgentResponse":
        facts = [
            obs(
                "AssistantReplied",
                {
                    "message_id": as_str(p.get("generation_id")),
                    "model": as_str(p.get("model")),
                    "text": as_str(p.get("text")) or "",
                },
            )
        ]
    elif name == "preCompact":
        facts = [
            obs(
                "Compacted",
                {
                    "trigger": as_str(p.get("trigger")),
                    "pre_tokens": as_int(p.get("context_tokens")),
                },
            )
        ]
    elif name in _OBSERVED:
        facts = [obs("RecordObserved", {"record_type": f"hook:{name}"})]
    else:
        facts = [obs("UnknownHookEvent", {"hook_event_name": name})]
    facts[0].raw = payload
    facts[0].redactions = tuple(redactions)
    return facts


def _tool(name: str, p: dict[str, Any], obs: Any, key: str) -> Observation:
    tool_name = as_str(p.get("tool_name")) or "(unknown)"
    tool_id = as_str(p.get("tool_use_id"))
    phase = "start" if name == "preToolUse" else "end"
    k = f"tool:{tool_id}:{phase}" if tool_id else key
    if name == "preToolUse":
        o = obs(
            "ToolCallStarted",
            {
                "tool_use_id": tool_id or key,
                "tool_name": tool_name,
                "tool_input": p.get("tool_input"),
            },
            k,
        )
        # The transcript's copy of this call has no id: the aggregate gives this start
        # the alias ``call:{hash}:{n}`` the transcript import gives it (CallCounter).
        o.extra["hook_call_hash"] = call_hash(tool_name, call_input(p.get("tool_input")))
        return o
    failed = name == "postToolUseFailure"
    error = p.get("error_message") if "error_message" in p else p.get("error")
    o = obs(
        "ToolCallCompleted",
        {
            "tool_use_id": tool_id or key,
            "tool_name": tool_name,
            "output": _json_or_text(p.get("tool_output")),
            "is_error": failed,
            "error": (as_str(error) or "failed") if failed else None,
            "duration_ms": as_int(p.get("duration")) or as_int(p.get("duration_ms")),
            "interrupted": p.get("is_interrupt") is True,
        },
        k,
    )
    # The alias of its start, plus ":end"; when its start has not come (yet), the call is
    # known by its tool and input, which postToolUse repeats (Session._call_before_its_start)
    has_input = "tool_input" in p
    o.extra["hook_call_hash"] = (
        call_hash(tool_name, call_input(p["tool_input"])) if has_input else None
    )
    if has_input:
        o.extra["tool_input"] = p["tool_input"]  # for a start never seen (Session._start_unseen_call)
    return o


def _subagent(name: str, p: dict[str, Any], parent: SessionRef, obs: Any) -> list[Observation]:
    agent_id = as_str(p.get("subagent_id"))
    if not agent_id:
        return [obs("RecordObserved", {"record_type": f"hook:{name}"})]
    agent_type = as_str(p.get("subagent_type"))
    child = SessionRef(
        AGENT,
        f"{parent.external_id}/subagent-{agent_id}",
        parent.external_id,
        agent_type,
        parent.cwd,
    )
    if name == "subagentStart":
        link = obs(
            "SubagentLinked",
            {
                "child_id": child.id,
                "child_external_id": child.external_id,
                "agent_id": agent_id,
                "agent_type": agent_type,
            },
            f"subagent:{agent_id}",
        )
        started = obs("Started", {"source": "subagent"}, f"subagent:{agent_id}:start", child)
        task = as_str(p.get("task"))
        facts = [link, started]
        if task:
            facts.append(
                obs(
                    "PromptSubmitted",
                    {"text": task, "prompt_kind": "task"},
                    f"subagent:{agent_id}:task",
                    child,
                )
            )
        return facts
    stopped = obs(
        "SubagentStopped", {"child_id": child.id, "agent_id": agent_id, "agent_type": agent_type}
    )
    ended = obs(
        "Ended",
        {"reason": as_str(p.get("status")) or "subagent_stop"},
        f"subagent:{agent_id}:end",
        child,
    )
    return [stopped, ended]


def _json_or_text(value: Any) -> Any:
    """``tool_output`` is a JSON string: decode it when it is JSON, else keep the text."""
    if isinstance(value, str):
        try:
            return jsontext.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value
