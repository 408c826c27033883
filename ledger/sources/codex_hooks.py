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
    }
)

__all__ = ["HookPayloadError", "parse_hook"]


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "codex.hook": frozenset(
        {
            "Compacted",
            "PermissionRequested",
            "PromptSubmitted",
            "Started",
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
    ref = SessionRef(AGENT, sid, None, None, str_or_none(payload.get("cwd")))
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
    def obs(kind: str, data: dict[str, Any], k: str = key) -> Observation:
        return Observation(ref, kind, k, data, **common)

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
    return [obs("UnknownHookEvent", {"hook_event_name": name})]
