"""Gemini CLI hook payloads (stdin JSON, one object per hook call) -> observations.

Format source: ``shared/research/FORMATS.md`` A7 (``google-gemini/gemini-cli``
``docs/hooks/reference.md`` @06c0d81). No licensed real payload captures exist; the
shapes are the documented ones. Common fields: ``session_id`` (the chat file's
``sessionId``), ``transcript_path``, ``cwd``, ``hook_event_name``, ``timestamp`` (ISO,
used as ``occurred_at``; the capture time when absent).

Hooks -> facts:

* SessionStart ``{source|trigger}`` -> ``Started``; SessionEnd ``{reason|trigger}`` ->
  ``Ended``;
* BeforeAgent ``{prompt}`` -> ``PromptSubmitted`` (same alias as the chat file's prompt);
* AfterAgent ``{prompt_response}`` -> ``TurnEnded``;
* BeforeTool / AfterTool ``{tool_name, tool_input, tool_response{llmContent,
  returnDisplay, error?}}`` -> ``ToolCallStarted`` / ``ToolCallCompleted``, paired by
  tool name and input inside the aggregate (Gemini hooks carry no call id), which meets
  them with the chat file's copy on ``call:{hash}:{n}`` (``Session._same_call``);
* AfterModel -> see below;
* Notification ``{notification_type, message, details}`` -> ``NotificationReceived``;
* PreCompress ``{trigger}`` -> ``Compacted``;
* BeforeModel, BeforeToolSelection -> ``RecordObserved`` (raw kept);
* anything else -> ``UnknownHookEvent``.

AfterModel fires once per streamed chunk. A chunk is not a fact: its usage
(``llm_response.usageMetadata``) becomes one ``UsageRecorded`` per model call, the call
named by the hash of ``llm_request`` (identical for every chunk of one call) and the key
by the hash of the token counts, so a repeated count appends nothing and the last count
wins in the read models; the chunk with a ``finishReason`` becomes ``AssistantReplied``;
other chunks are kept as ``RecordObserved`` (raw chunk, never dropped).

Keys: ``hook:{capture_key}`` (assigned once by the hook client), usage as above.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.observation import Observation, SessionRef, call_hash, json_hash
from ledger.privacy import strip_private
from ledger.sources.adapter_kit import (
    HookPayloadError,
    as_int,
    as_str,
    hook_envelope,
    parse_time,
    prompt_kind,
    text_hash,
)
from ledger.sources.gemini_chat import AGENT, usage_from_tokens

SOURCE_FORMAT = "gemini.hook"

__all__ = ["SOURCE_FORMAT", "HookPayloadError", "parse_hook"]


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "gemini.hook": frozenset(
        {
            "AssistantReplied",
            "Compacted",
            "Ended",
            "NotificationReceived",
            "PromptSubmitted",
            "RecordObserved",
            "Started",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UnknownHookEvent",
            "UsageRecorded",
        }
    ),
}

def parse_hook(
    payload: Any, capture_key: str, captured_at: datetime, *, raw: bytes | None = None
) -> list[Observation]:
    """Turn one Gemini CLI hook payload into observations.

    Raises:
        HookPayloadError: not a JSON object, or ``session_id``/``hook_event_name``
            missing or not strings.
    """
    sid, name = hook_envelope(payload, ("session_id",), "hook_event_name")
    payload, redactions = strip_private(payload, raw=raw)
    ref = SessionRef(AGENT, sid, cwd=as_str(payload.get("cwd")))
    key = f"hook:{capture_key}"
    at = parse_time(payload.get("timestamp")) or captured_at

    def obs(kind: str, data: dict[str, Any], k: str = key) -> Observation:
        return Observation(
            ref, kind, k, data, source_format=SOURCE_FORMAT, occurred_at=at, record_key=key
        )

    p = payload
    facts: list[Observation]
    if name == "SessionStart":
        facts = [
            obs(
                "Started",
                {
                    "source": as_str(p.get("source")) or as_str(p.get("trigger")),
                    "model": as_str(p.get("model")),
                },
            )
        ]
    elif name == "SessionEnd":
        facts = [obs("Ended", {"reason": as_str(p.get("reason")) or as_str(p.get("trigger"))})]
    elif name == "BeforeAgent":
        text = as_str(p.get("prompt")) or ""
        o = obs("PromptSubmitted", {"text": text, "prompt_kind": prompt_kind(text)})
        o.extra["hook_prompt_hash"] = text_hash(text)
        facts = [o]
    elif name == "AfterAgent":
        facts = [
            obs(
                "TurnEnded",
                {
                    "reason": "after_agent",
                    "last_assistant_message": as_str(p.get("prompt_response")),
                },
            )
        ]
    elif name in ("BeforeTool", "AfterTool"):
        facts = [_tool(name, p, obs)]
    elif name == "AfterModel":
        facts = _after_model(p, obs)
    elif name == "Notification":
        facts = [
            obs(
                "NotificationReceived",
                {
                    "message": as_str(p.get("message")),
                    "notification_type": as_str(p.get("notification_type")),
                },
            )
        ]
    elif name == "PreCompress":
        facts = [obs("Compacted", {"trigger": as_str(p.get("trigger"))})]
    elif name in ("BeforeModel", "BeforeToolSelection"):
        facts = [obs("RecordObserved", {"record_type": f"hook:{name}"})]
    else:
        facts = [obs("UnknownHookEvent", {"hook_event_name": name})]
    facts[0].raw = payload
    facts[0].redactions = tuple(redactions)
    return facts


def _tool(name: str, p: dict[str, Any], obs: Any) -> Observation:
    tool_name = as_str(p.get("tool_name")) or "(unknown)"
    tool_input = p.get("tool_input")
    if name == "BeforeTool":
        o = obs(
            "ToolCallStarted",
            {"tool_use_id": None, "tool_name": tool_name, "tool_input": tool_input},
        )
    else:
        response = p.get("tool_response")
        error = response.get("error") if isinstance(response, dict) else None
        error_text = (
            error
            if isinstance(error, str)
            else (as_str(error.get("message")) if isinstance(error, dict) else None)
        )
        o = obs(
            "ToolCallCompleted",
            {
                "tool_use_id": None,
                "tool_name": tool_name,
                "output": response,
                "is_error": error is not None,
                "error": error_text,
            },
        )
        o.extra["tool_input"] = tool_input  # for a start never seen (Session._start_unseen_call)
    o.extra["pair"] = call_hash(tool_name, tool_input)  # the aggregate pairs Before -> After
    return o


def _after_model(p: dict[str, Any], obs: Any) -> list[Observation]:
    response = p.get("llm_response") if isinstance(p.get("llm_response"), dict) else {}
    call_id = "gemini-model-call:" + json_hash(p.get("llm_request"))
    facts: list[Observation] = []
    candidates = [c for c in response.get("candidates") or [] if isinstance(c, dict)]
    finish = next(
        (as_str(c.get("finishReason")) for c in candidates if c.get("finishReason")), None
    )
    model = as_str(response.get("modelVersion")) or as_str(p.get("model"))
    if finish is not None:
        facts.append(
            obs(
                "AssistantReplied",
                {
                    "message_id": call_id,
                    "model": model,
                    "text": _chunk_text(response),
                    "stop_reason": finish.lower(),
                },
            )
        )
    meta = response.get("usageMetadata")
    if isinstance(meta, dict) and any(as_int(v) for v in meta.values()):
        usage = usage_from_tokens(_tokens(meta))
        facts.append(
            obs(
                "UsageRecorded",
                {"message_id": call_id, "model": model, **usage},
                f"usage:{call_id}:{json_hash(usage)}",
            )
        )
    if not facts:
        facts.append(obs("RecordObserved", {"record_type": "hook:AfterModel"}))
    return facts


def _tokens(meta: dict[str, Any]) -> dict[str, Any]:
    """Gemini API ``usageMetadata`` -> the chat file's ``tokens`` names."""
    return {
        "input": meta.get("promptTokenCount"),
        "output": meta.get("candidatesTokenCount"),
        "cached": meta.get("cachedContentTokenCount"),
        "thoughts": meta.get("thoughtsTokenCount"),
        "tool": meta.get("toolUsePromptTokenCount"),
        "total": meta.get("totalTokenCount"),
    }


def _chunk_text(response: dict[str, Any]) -> str:
    if isinstance(response.get("text"), str):
        return response["text"]
    out: list[str] = []
    for c in response.get("candidates") or []:
        content = c.get("content") if isinstance(c, dict) else None
        for part in (content or {}).get("parts") or [] if isinstance(content, dict) else []:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return "".join(out)
