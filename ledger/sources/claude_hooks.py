"""Claude Code hook payloads (stdin JSON, one object per hook call) -> observations.

Format source: ``shared/research/FORMATS.md`` A1 (typed definitions in
``claude-agent-sdk-python`` ``types.py``; code.claude.com/docs/en/hooks) and the real
payloads in ``tests/fixtures/*hook-logs``. Common fields: ``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``; ``agent_id``/``agent_type`` when the
hook fires inside a subagent (the fact then belongs to the child session).

Keys: tool calls use ``tool:{tool_use_id}:{start|end}`` (the transcript's keys, so a
later import does not count them twice); everything else uses the capture key the
hook client assigned once (``hook:{capture_key}``). Payloads without ``tool_use_id``
(2025 builds) are paired Pre->Post by tool name and input inside the aggregate
(``extra["pair"]``, a call hash), which meets them with the transcript's copy of the
call on ``call:{hash}:{n}`` (``Session._same_call``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.observation import Observation, SessionRef, call_hash
from ledger.privacy import strip_private
from ledger.sources.claude_common import (
    AGENT,
    child_ref,
    classify_hook_prompt,
    subagent_link,
    text_hash,
    tool_error_text,
)
from ledger.sources.jsonl import int_or_none

SOURCE_FORMAT = "claude-code.hook"
PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    SOURCE_FORMAT: frozenset(
        {
            "Started",
            "PromptSubmitted",
            "ToolCallStarted",
            "ToolCallCompleted",
            "NotificationReceived",
            "PermissionRequested",
            "TurnEnded",
            "Compacted",
            "SubagentLinked",
            "LinkedToParent",
            "SubagentStopped",
            "Ended",
            "RecordObserved",
            "UnknownHookEvent",
        }
    )
}

HOOK_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Notification",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "SessionEnd",
    "PermissionRequest",
)
"""Every ``hook_event_name`` of FORMATS.md A1, in the docs' order (``install-hooks`` writes
them in this order)."""
KNOWN_HOOKS = frozenset(HOOK_EVENTS)


class HookPayloadError(ValueError):
    """The payload cannot be attributed to a session (not an object, no session_id, …)."""


def parse_hook(
    payload: Any, capture_key: str, captured_at: datetime, *, raw: bytes | None = None
) -> list[Observation]:
    """Turn one hook payload into observations.

    Args:
        payload: the decoded stdin JSON of the hook call.
        capture_key: idempotency key assigned once at capture (kept through retries).
        captured_at: capture time (the hook's ``occurred_at``; payloads carry no clock).
        raw: the body ``payload`` was decoded from, when known: privacy then walks the
            payload only if the bytes may hold something to redact, trying only the
            secret rules whose literals occur (:func:`ledger.privacy.strip_private`).

    Raises:
        HookPayloadError: not a JSON object, or ``session_id``/``hook_event_name``
            missing or not strings.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError(f"hook payload is a JSON {type(payload).__name__}, not an object")
    sid = payload.get("session_id")
    name = payload.get("hook_event_name")
    if not isinstance(sid, str) or not sid:
        raise HookPayloadError("hook payload has no session_id")
    if not isinstance(name, str) or not name:
        raise HookPayloadError("hook payload has no hook_event_name")
    payload, redactions = strip_private(payload, raw=raw)
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    agent_id = payload.get("agent_id")
    agent_type = payload.get("agent_type") if isinstance(payload.get("agent_type"), str) else None
    parent = SessionRef(AGENT, sid, None, None, cwd)
    in_subagent = isinstance(agent_id, str) and agent_id and name not in ("SubagentStop", "SubagentStart")
    ref = child_ref(sid, agent_id, agent_type, cwd) if in_subagent else parent
    common: dict[str, Any] = {
        "source_format": SOURCE_FORMAT,
        "occurred_at": captured_at,
        "record_key": f"hook:{capture_key}",
    }
    key = f"hook:{capture_key}"
    facts = _facts(name, payload, ref, parent, key, common)
    facts[0].raw = payload
    facts[0].redactions = tuple(redactions)
    return facts


def _facts(
    name: str,
    p: dict[str, Any],
    ref: SessionRef,
    parent: SessionRef,
    key: str,
    common: dict[str, Any],
) -> list[Observation]:
    def obs(kind: str, data: dict[str, Any], k: str = key, session: SessionRef = ref) -> Observation:
        return Observation(session, kind, k, data, **common)

    def s(field: str) -> str | None:
        v = p.get(field)
        return v if isinstance(v, str) else None

    if name == "SessionStart":
        return [
            obs("Started", {"source": s("source"), "model": s("model"), "permission_mode": s("permission_mode")})
        ]
    if name == "UserPromptSubmit":
        prompt = p.get("prompt") if isinstance(p.get("prompt"), str) else ""
        kind, text = classify_hook_prompt(prompt)
        o = obs("PromptSubmitted", {"text": text, "prompt_id": s("prompt_id"), "prompt_kind": kind})
        o.extra["hook_prompt_hash"] = text_hash(text)
        return [o]
    if name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        return _tool(name, p, ref, key, common)
    if name == "Notification":
        return [
            obs(
                "NotificationReceived",
                {"message": s("message"), "notification_type": s("notification_type"), "title": s("title")},
            )
        ]
    if name == "Stop":
        return [obs("TurnEnded", {"reason": "stop_hook", "last_assistant_message": s("last_assistant_message")})]
    if name in ("SubagentStart", "SubagentStop"):
        agent_id = s("agent_id")
        agent_type = s("agent_type")
        if not agent_id:
            return [obs("SubagentStopped" if name == "SubagentStop" else "RecordObserved",
                        {"last_assistant_message": s("last_assistant_message")} if name == "SubagentStop"
                        else {"record_type": "hook:SubagentStart"})]
        child = child_ref(parent.external_id, agent_id, agent_type, parent.cwd)
        link = subagent_link(parent, agent_id, agent_type, None, common)
        if name == "SubagentStart":
            return [*link, obs("Started", {"source": "subagent"}, f"{key}:child", child)]
        stopped = obs(
            "SubagentStopped",
            {
                "child_id": child.id,
                "agent_id": agent_id,
                "agent_type": agent_type or None,
                "last_assistant_message": s("last_assistant_message"),
            },
            session=parent,
        )
        ended = obs("Ended", {"reason": "subagent_stop"}, f"{key}:child", child)
        return [stopped, *link, ended]
    if name == "PreCompact":
        return [obs("Compacted", {"trigger": s("trigger"), "summary": s("custom_instructions")})]
    if name == "SessionEnd":
        return [obs("Ended", {"reason": s("reason")})]
    if name == "PermissionRequest":
        return [
            obs(
                "PermissionRequested",
                {
                    "tool_name": s("tool_name"),
                    "tool_input": p.get("tool_input"),
                    "suggestions": p.get("permission_suggestions"),
                },
            )
        ]
    return [obs("UnknownHookEvent", {"hook_event_name": name})]


def _tool(
    name: str, p: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
) -> list[Observation]:
    tool_name = p.get("tool_name") if isinstance(p.get("tool_name"), str) else "(unknown)"
    tool_input = p.get("tool_input")
    tool_use_id = p.get("tool_use_id") if isinstance(p.get("tool_use_id"), str) else None
    if name == "PreToolUse":
        data: dict[str, Any] = {"tool_use_id": tool_use_id, "tool_name": tool_name, "tool_input": tool_input}
        o = Observation(ref, "ToolCallStarted", f"tool:{tool_use_id}:start" if tool_use_id else key, data, **common)
        if not tool_use_id:
            o.extra["pair"] = call_hash(tool_name, tool_input)
        return [o]
    response = p.get("tool_response")
    failed = name == "PostToolUseFailure"
    error = p.get("error") if failed else None
    data = {
        "tool_use_id": tool_use_id,
        "tool_name": tool_name,
        "output": response,
        "is_error": failed,
        "error": error if isinstance(error, str) else (tool_error_text(error) if failed else None),
        "duration_ms": int_or_none(p.get("duration_ms")),
        "interrupted": p.get("is_interrupt") is True
        or (isinstance(response, dict) and response.get("interrupted") is True),
    }
    o = Observation(ref, "ToolCallCompleted", f"tool:{tool_use_id}:end" if tool_use_id else key, data, **common)
    o.extra["tool_input"] = tool_input  # for a start the stream never saw (Session.observe)
    facts = [o]
    if not tool_use_id:
        o.extra["pair"] = call_hash(tool_name, tool_input)
    elif tool_name in ("Task", "Agent") and isinstance(response, dict):
        agent_id = response.get("agentId")
        if isinstance(agent_id, str) and agent_id:
            facts.extend(subagent_link(ref, agent_id, None, tool_use_id, common))
    return facts
