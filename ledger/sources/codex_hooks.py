"""Codex command hook payloads (stdin JSON, one object per hook call) -> observations.

Format source: ``shared/research/FORMATS.md`` A6 (``openai/codex``
``codex-rs/hooks/schema/generated/*.command.input.schema.json``). Every payload carries
``session_id`` (the Codex thread id, so hooks, rollouts and ``exec --json`` streams of
one thread land in one session), ``hook_event_name``, ``cwd``, ``model``,
``permission_mode``, ``transcript_path`` (may be null) and, for turn-scoped hooks,
``turn_id``. Codex has no SessionEnd hook (openai/codex#20374): sessions end by the
runner, an idle timeout or never.

Mapping: SessionStart -> ``Started``; UserPromptSubmit -> ``PromptSubmitted``;
PreToolUse/PostToolUse -> ``ToolCallStarted``/``ToolCallCompleted`` keyed by
``tool_use_id`` (failed as the rollout's copy of the call would be:
:func:`ledger.sources.codex_common.call_failure` of ``tool_response``, the output Codex
gives the model) (``tool:{id}:start|end``; Codex uses the model's ``call_id``, the key the
rollout source uses); PermissionRequest -> ``PermissionRequested``; Stop -> ``TurnEnded``;
StopFailure -> ``TurnEnded`` with the error; PreCompact -> ``Compacted``; any other name
-> ``UnknownHookEvent`` with the raw payload. Other keys: ``hook:{capture_key}``.

Subagents (``subagent-start`` / ``subagent-stop.command.input``; openai/codex#22873,
#22882): ``agent_id`` is the subagent's own thread id (its rollout's
``session_meta.id``), ``session_id`` the thread that spawned it. SubagentStart (once, in
place of SessionStart) -> ``SubagentLinked`` on the parent and ``Started`` on the child
session ``agent_id`` (its parent ``session_id``: the child its rollout names);
SubagentStop (at the end of each of the child's turns, in place of Stop) ->
``SubagentStopped`` on the parent and ``TurnEnded`` on the child (``send_input`` can give
it another turn). Any other hook that carries an ``agent_id`` fired inside that subagent
and is recorded on the child, where its rollout's copy of the same prompt or call is.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.observation import Observation, SessionRef
from ledger.privacy import strip_private
from ledger.sources.claude_common import text_hash
from ledger.sources.claude_hooks import HookPayloadError
from ledger.sources.codex_common import AGENT, call_failure
from ledger.sources.jsonl import str_or_none

SOURCE_FORMAT = "codex.hook"
KNOWN_HOOKS = frozenset(
    {
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "Stop",
        "StopFailure",
        "PreCompact",
        "SubagentStart",
        "SubagentStop",
    }
)

__all__ = ["HookPayloadError", "parse_hook"]


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "codex.hook": frozenset(
        {
            "Compacted",
            "PermissionRequested",
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
    """Turn one Codex hook payload into observations.

    Args:
        payload: the decoded stdin JSON of the hook call.
        capture_key: idempotency key assigned once at capture (kept through retries).
        captured_at: capture time (Codex hook payloads carry no clock).

    Raises:
        HookPayloadError: not a JSON object, or ``session_id``/``hook_event_name``
            missing or not strings.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError(f"hook payload is a JSON {type(payload).__name__}, not an object")
    sid = str_or_none(payload.get("session_id"))
    name = str_or_none(payload.get("hook_event_name"))
    if sid is None:
        raise HookPayloadError("hook payload has no session_id")
    if name is None:
        raise HookPayloadError("hook payload has no hook_event_name")
    payload, redactions = strip_private(payload, raw=raw)
    cwd = str_or_none(payload.get("cwd"))
    parent = SessionRef(AGENT, sid, None, None, cwd)
    agent_id = str_or_none(payload.get("agent_id"))
    if agent_id == sid or name in ("SubagentStart", "SubagentStop"):
        agent_id = None
    ref = (
        SessionRef(AGENT, agent_id, sid, str_or_none(payload.get("agent_type")), cwd)
        if agent_id
        else parent
    )
    key = f"hook:{capture_key}"
    common: dict[str, Any] = {
        "source_format": SOURCE_FORMAT,
        "occurred_at": captured_at,
        "record_key": key,
    }
    facts = _facts(name, payload, ref, key, common)
    facts[0].raw = payload
    facts[0].redactions = tuple(redactions)
    return facts


def _facts(
    name: str, p: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
) -> list[Observation]:
    def obs(
        kind: str, data: dict[str, Any], k: str = key, session: SessionRef = ref
    ) -> Observation:
        return Observation(session, kind, k, data, **common)

    def s(field: str) -> str | None:
        return str_or_none(p.get(field))

    call_id = s("tool_use_id")
    if name == "SessionStart":
        return [
            obs(
                "Started",
                {
                    "source": s("source"),
                    "model": s("model"),
                    "permission_mode": s("permission_mode"),
                },
            )
        ]
    if name == "UserPromptSubmit":
        text = p.get("prompt") if isinstance(p.get("prompt"), str) else ""
        o = obs("PromptSubmitted", {"text": text, "prompt_kind": "human"})
        o.extra["hook_prompt_hash"] = text_hash(text)  # the rollout's copy is an alias
        return [o]
    if name == "PreToolUse":
        return [
            obs(
                "ToolCallStarted",
                {
                    "tool_use_id": call_id or key,
                    "tool_name": s("tool_name") or "(unknown)",
                    "tool_input": p.get("tool_input"),
                },
                f"tool:{call_id}:start" if call_id else key,
            )
        ]
    if name == "PostToolUse":
        response = p.get("tool_response")
        failed, error = call_failure(response)  # as the rollout's copy of the call
        return [
            obs(
                "ToolCallCompleted",
                {
                    "tool_use_id": call_id or key,
                    "tool_name": s("tool_name"),
                    "output": response,
                    "is_error": failed,
                    "error": error,
                },
                f"tool:{call_id}:end" if call_id else key,
            )
        ]
    if name == "PermissionRequest":
        return [
            obs(
                "PermissionRequested",
                {"tool_name": s("tool_name"), "tool_input": p.get("tool_input")},
            )
        ]
    if name == "Stop":
        return [
            obs(
                "TurnEnded",
                {"reason": "stop_hook", "last_assistant_message": s("last_assistant_message")},
            )
        ]
    if name == "StopFailure":
        error = p.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        reason = f"stop_failure: {message}" if isinstance(message, str) else "stop_failure"
        return [obs("TurnEnded", {"reason": reason})]
    if name == "PreCompact":
        return [obs("Compacted", {"trigger": s("trigger")})]
    if name in ("SubagentStart", "SubagentStop"):
        return _subagent(name, p, ref, key, obs)
    return [obs("UnknownHookEvent", {"hook_event_name": name})]


def _subagent(
    name: str, p: dict[str, Any], parent: SessionRef, key: str, obs: Any
) -> list[Observation]:
    """The lineage and the child's ``Started`` / ``TurnEnded`` of a Subagent hook. A child
    has a SubagentStop per turn: each is its own fact (keyed by the hook), the link is
    made once."""
    agent_id = str_or_none(p.get("agent_id"))
    if not agent_id:
        return [obs("RecordObserved", {"record_type": f"hook:{name}"})]
    agent_type = str_or_none(p.get("agent_type"))
    child = SessionRef(AGENT, agent_id, parent.external_id, agent_type, parent.cwd)
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
    if name == "SubagentStart":
        started = obs(
            "Started",
            {"source": "subagent", "model": str_or_none(p.get("model"))},
            f"{key}:child",
            child,
        )
        return [link, started]
    stopped = obs(
        "SubagentStopped",
        {
            "child_id": child.id,
            "agent_id": agent_id,
            "agent_type": agent_type,
            "last_assistant_message": str_or_none(p.get("last_assistant_message")),
        },
    )
    turn = obs(
        "TurnEnded",
        {
            "reason": "subagent_stop",
            "last_assistant_message": str_or_none(p.get("last_assistant_message")),
        },
        f"{key}:child",
        child,
    )
    return [stopped, link, turn]
