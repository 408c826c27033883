"""OpenClaw plugin hooks, posted to hookledger -> observations.

Format source: ``shared/research/FORMATS.md`` A9 (``openclaw/openclaw``
``src/plugins/hook-types.ts`` @013ba5d, ``hook-message.types.ts`` @066934c) and the
OpenClaw seed design (fork ``akoscz/openclaw`` branch ``feature/session-hooks``:
``session_start -> [session_suspend -> session_resume]* -> session_end``). No licensed
real payload captures exist; the shapes are the documented ones.

OpenClaw hooks are in-process JavaScript (``api.on(name, handler(event, ctx))``), so a
small plugin forwards each call to ``POST /v1/hooks/openclaw`` (or pipes it to
``hookledger hook openclaw``) as this JSON envelope::

    {"hook": "<hook name>", "event": {...the handler's event...}, "ctx": {...its ctx...}}

The session is ``event.sessionId``, else ``ctx.sessionId`` (the id in OpenClaw's
session transcript header). ``sessionKey`` (``event`` or ``ctx``) names the
conversation bucket, the same across ``/new`` and resets; upstream ``message_received``
carries only it. A hook with only the key is resolved by the ledger through the key's
stream (:mod:`ledger.session_keys`) to the session the key names, learnt from
``session_start``, ``session_end.nextSessionId`` and any hook carrying both; when
none is known yet it goes to a session named after the key (logged, and recorded as a
``SessionKey.Resolved`` with ``bound`` False). ``event.timestamp`` (ISO or epoch ms),
when present, is ``occurred_at``.

Hooks -> facts:

* session_start ``{sessionId, resumedFrom?}`` -> ``Started`` (source ``resume`` when
  ``resumedFrom``); session_end ``{reason?, messageCount, durationMs?}`` -> ``Ended``;
* session_suspend / session_resume (seed design) -> ``Suspended`` (PAUSED) /
  ``Resumed`` (ACTIVE);
* before_compaction ``{messageCount, tokenCount?}`` -> ``Compacted`` (pre_tokens);
* message_received ``{from, content}`` -> ``PromptSubmitted``; a reset command with
  text (``/new text``, ``/reset text``: :func:`split_reset`) -> the command
  (``prompt_kind`` ``command``) on the session the key names, and ``text``, keyed
  ``hook:{capture_key}:prompt``, held for the session the key names next (OpenClaw
  emits ``message_received`` before it ends the session and starts the one whose first
  prompt ``text`` is, and with only the key; :mod:`ledger.session_keys`). Without text,
  or without a key to hold it by, the message is one fact as typed;
* before_tool_call / after_tool_call ``{toolName, params, toolCallId?, result?, error?,
  durationMs?}`` -> ``ToolCallStarted`` / ``ToolCallCompleted`` keyed
  ``tool:{toolCallId}:start|end`` (the transcript's keys), else paired by tool name
  and params inside the aggregate;
* llm_output ``{usage{input, output, cacheRead, cacheWrite, total}, model?}`` ->
  ``UsageRecorded`` (one per hook call, tokens as in
  :func:`ledger.sources.openclaw_transcript.usage_from_openclaw`);
* agent_end ``{success, error?, durationMs?}`` -> ``TurnEnded``;
* after_compaction, before_reset -> ``RecordObserved`` (raw kept);
* anything else -> ``UnknownHookEvent``.

Keys: ``hook:{capture_key}`` except tool calls (above).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ledger.observation import Observation, SessionRef, call_hash, json_hash
from ledger.privacy import strip_private
from ledger.sources.adapter_kit import (
    HookPayloadError,
    as_int,
    as_str,
    parse_time,
    prompt_kind,
    text_hash,
)
from ledger.sources.openclaw_transcript import AGENT, usage_from_openclaw

SOURCE_FORMAT = "openclaw.hook"

__all__ = ["SOURCE_FORMAT", "HookPayloadError", "parse_hook"]


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "openclaw.hook": frozenset(
        {
            "Compacted",
            "Ended",
            "PromptSubmitted",
            "RecordObserved",
            "Resumed",
            "Started",
            "Suspended",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UnknownHookEvent",
            "UsageRecorded",
        }
    ),
}

_RESET = re.compile(r"(/new|/reset) (.*)", re.IGNORECASE | re.DOTALL)
"""A reset trigger and a space, then the rest: OpenClaw's default ``resetTriggers``
(``/new``, ``/reset``; ``config/sessions/types.ts``), matched as
``auto-reply/reply/session.ts`` does (case-insensitive, ``trigger + " "`` prefix)."""
_SOFT = re.compile(r"soft(\s|$)", re.IGNORECASE)
"""``/reset soft …`` keeps the session (``commands-reset-mode.ts``)."""


def split_reset(text: str) -> tuple[str, str] | None:
    """``(command, first prompt)`` of a message that starts a new session with a first
    prompt (``"/new fix the tests"`` -> ``("/new", "fix the tests")``); None for any
    other message, a bare ``/new`` or ``/reset`` included. Custom ``resetTriggers``
    and group mentions before the command are not known here."""
    m = _RESET.fullmatch(text.strip())
    if m is None:
        return None
    command, rest = m[1], m[2].lstrip()
    if not rest or (command.lower() == "/reset" and _SOFT.match(rest)):
        return None
    return command, rest


def parse_hook(
    payload: Any, capture_key: str, captured_at: datetime, *, raw: bytes | None = None
) -> list[Observation]:
    """Turn one ``{hook, event, ctx}`` envelope into observations.

    Raises:
        HookPayloadError: not a JSON object, ``hook`` missing or not a string, ``event``
            or ``ctx`` present but not objects, or no session id anywhere.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError(f"hook payload is a JSON {type(payload).__name__}, not an object")
    name = payload.get("hook")
    if not isinstance(name, str) or not name:
        raise HookPayloadError('hook payload has no "hook" (expected {"hook", "event", "ctx"})')
    event = payload.get("event", {})
    ctx = payload.get("ctx", {})
    if not isinstance(event, dict) or not isinstance(ctx, dict):
        raise HookPayloadError('"event" and "ctx" must be JSON objects')
    sid, session_key = (
        next((src[f] for src in (event, ctx) if isinstance(src.get(f), str) and src[f]), None)
        for f in ("sessionId", "sessionKey")
    )
    if sid is None and session_key is None:
        raise HookPayloadError("hook payload has no event.sessionId/ctx.sessionId/sessionKey")
    payload, redactions = strip_private(payload, raw=raw)
    event = payload.get("event", {})
    # A hook with only the key (message_received) goes to the session the key names;
    # one with both tells the ledger which session that is (ledger.session_keys).
    ref = SessionRef(AGENT, sid or session_key)  # type: ignore[arg-type]
    key = f"hook:{capture_key}"
    binding = _binding(name, event, sid, session_key)
    at = _time(event.get("timestamp")) or captured_at

    def obs(kind: str, data: dict[str, Any], k: str = key) -> Observation:
        return Observation(
            ref, kind, k, data, source_format=SOURCE_FORMAT, occurred_at=at, record_key=key
        )

    e = event
    facts: list[Observation]
    if name == "session_start":
        facts = [obs("Started", {"source": "resume" if e.get("resumedFrom") else "startup"})]
    elif name == "session_end":
        facts = [obs("Ended", {"reason": as_str(e.get("reason"))})]
    elif name == "session_suspend":
        facts = [obs("Suspended", {"reason": as_str(e.get("reason"))})]
    elif name == "session_resume":
        facts = [obs("Resumed", {"reason": as_str(e.get("reason"))})]
    elif name == "before_compaction":
        facts = [
            obs(
                "Compacted",
                {"trigger": as_str(e.get("trigger")), "pre_tokens": as_int(e.get("tokenCount"))},
            )
        ]
    elif name == "message_received":
        text = e.get("content") if isinstance(e.get("content"), str) else ""
        reset = split_reset(text) if session_key is not None else None

        def prompt(text: str, k: str = key) -> Observation:
            o = obs(
                "PromptSubmitted",
                {
                    "text": text,
                    "prompt_kind": prompt_kind(text),
                    "prompt_id": as_str(e.get("messageId")),
                },
                k,
            )
            o.extra["hook_prompt_hash"] = text_hash(text)
            return o

        if reset is None:
            facts = [prompt(text)]
        else:
            first = prompt(reset[1], f"{key}:prompt")
            first.extra["session_key"] = (AGENT, session_key, "next", None)
            facts = [prompt(reset[0]), first]
    elif name in ("before_tool_call", "after_tool_call"):
        facts = [_tool(name, e, obs, key)]
    elif name == "llm_output" and isinstance(e.get("usage"), dict):
        tokens = usage_from_openclaw(e["usage"])
        message_id = as_str(e.get("messageId")) or key
        facts = [
            obs(
                "UsageRecorded",
                {"message_id": message_id, "model": as_str(e.get("model")), **tokens},
                f"usage:{message_id}:{json_hash(tokens)}",
            )
        ]
    elif name == "agent_end":
        error = e.get("error")
        reason = (
            "agent_end"
            if e.get("success") is not False
            else f"agent_end_failed: {error}"
            if error
            else "agent_end_failed"
        )
        facts = [obs("TurnEnded", {"reason": reason, "duration_ms": as_int(e.get("durationMs"))})]
    elif name in ("after_compaction", "before_reset", "llm_output"):
        facts = [obs("RecordObserved", {"record_type": f"hook:{name}"})]
    else:
        facts = [obs("UnknownHookEvent", {"hook_event_name": name})]
    if binding is not None:
        for f in facts:
            f.extra.setdefault("session_key", binding)
            f.extra["hook"] = name
    facts[0].raw = payload
    facts[0].redactions = tuple(redactions)
    return facts


def _binding(
    name: str, event: dict[str, Any], sid: str | None, session_key: str | None
) -> tuple[str, str, str, str | None] | None:
    """``(agent, key, mode, session id)`` for :meth:`ledger.app.Ledger.record` to
    resolve or bind through the key's stream, or None (no key)."""
    if session_key is None:
        return None
    if sid is None:
        return (AGENT, session_key, "resolve", None)
    if name == "session_start":
        return (AGENT, session_key, "start", sid)
    if name == "session_end":  # the key moves on to the next session, if named
        nxt = as_str(event.get("nextSessionId"))
        return (AGENT, session_key, "start", nxt) if nxt else None
    return (AGENT, session_key, "bind", sid)


def _tool(name: str, e: dict[str, Any], obs: Any, key: str) -> Observation:
    tool_name = as_str(e.get("toolName")) or "(unknown)"
    params = e.get("params")
    tid = as_str(e.get("toolCallId"))
    if name == "before_tool_call":
        o = obs(
            "ToolCallStarted",
            {"tool_use_id": tid, "tool_name": tool_name, "tool_input": params},
            f"tool:{tid}:start" if tid else key,
        )
    else:
        error = e.get("error")
        o = obs(
            "ToolCallCompleted",
            {
                "tool_use_id": tid,
                "tool_name": tool_name,
                "output": e.get("result"),
                "is_error": error is not None,
                "error": error
                if isinstance(error, str)
                else (str(error) if error is not None else None),
                "duration_ms": as_int(e.get("durationMs")),
            },
            f"tool:{tid}:end" if tid else key,
        )
        o.extra["tool_input"] = params  # for a start never seen (Session._start_unseen_call)
    if not tid:
        o.extra["pair"] = call_hash(tool_name, params)
    return o


def _time(value: Any) -> datetime | None:
    """ISO-8601 string or epoch milliseconds (JavaScript ``Date.now()``)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        try:
            return datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return parse_time(value)
