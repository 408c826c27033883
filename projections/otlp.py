"""OTLP JSON traces of sessions, from the read models, following the OpenTelemetry GenAI
semantic conventions (``gen_ai.*``; spans for agents, tools and model calls).

Shape: an ``ExportTraceServiceRequest`` in the OTLP/JSON encoding (the protobuf JSON
mapping of ``opentelemetry/proto/collector/trace/v1/trace_service.proto``, with the OTLP
rule that ``traceId``/``spanId`` are hex strings, enums integers, int64 decimal strings).

Mapping (docs/exports.md has the full table):

* a session is a trace; ``traceId`` = the session's ledger id (a UUID: 16 bytes);
* root span ``invoke_agent {agent}`` (``gen_ai.operation.name=invoke_agent``) with the
  session's totals; subagent sessions link to the parent's ``execute_tool`` span;
* each prompt batch a child span ``prompt_batch {n}`` with the prompt and last reply;
* each tool call ``execute_tool {tool}`` under its batch (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, status ERROR with the error when it failed);
* each model response with usage ``chat {model}`` under its batch, tokens as
  ``gen_ai.usage.*``. ``gen_ai.usage.input_tokens`` includes cache reads and writes (the
  convention), unlike the ledger's Anthropic-style ``input_tokens``.

Span ids are ``sha256(session id + ":" + part)[:8]``, so an export is deterministic.
Times: ``*UnixNano`` from the read models' ISO times (ms precision).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import select

from projections.runner import ReadModels
from projections.schema import session_times

PROVIDERS = {"claude-code": "anthropic", "codex": "openai", "gemini-cli": "gcp.gemini",
             "gemini": "gcp.gemini"}
"""``gen_ai.provider.name`` (well-known values of the convention) per agent."""
INTERNAL, CLIENT = 1, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
MAX_TEXT = 8192
"""Characters of a prompt, reply or error kept in an attribute."""


def build_request(
    models: ReadModels, *, sessions: Iterable[str] = (), since: datetime | None = None
) -> dict[str, Any]:
    """The OTLP JSON request for the selected sessions (all when ``sessions`` is empty;
    ``since``: sessions with any event recorded at or after it, on the ledger's clock
    like the event exports' ``--since``). One ``resourceSpans`` per agent
    (``service.name`` = the agent)."""
    wanted = set(sessions)
    s, b, tc = models.table("sessions"), models.table("prompt_batches"), models.table("tool_calls")
    u, ei = models.table("session_usage"), models.table("event_index")
    times = session_times(s)  # the session's times as GET /v1/sessions gives them
    q = select(
        *(c for c in s.c if c.name not in times), *(t.label(name) for name, t in times.items())
    ).order_by(s.c.id)
    if wanted:
        q = q.where(s.c.id.in_(wanted))
    if since is not None:
        q = q.where(s.c.last_recorded_at >= since.astimezone(UTC).isoformat()[:23] + "Z")
    with models.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(q).mappings()]
        ids = {r["id"] for r in rows}
        batches = _grouped(conn.execute(select(b).order_by(b.c.batch)), ids)
        calls = _grouped(conn.execute(select(tc).order_by(tc.c.start_position)), ids)
        usage = _grouped(
            conn.execute(
                select(u, ei.c.occurred_at, ei.c.recorded_at)
                .join(ei, ei.c.position == u.c.position, isouter=True)
                .order_by(u.c.position)
            ),
            ids,
        )
    by_agent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        sid = row["id"]
        by_agent[row["agent"]].extend(
            _session_spans(row, batches.get(sid, []), calls.get(sid, []), usage.get(sid, []))
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": agent})},
                "scopeSpans": [{"scope": {"name": "hookledger"}, "spans": spans}],
            }
            for agent, spans in sorted(by_agent.items())
        ]
    }


def trace_id(session_id: str) -> str:
    return UUID(session_id).hex


def span_id(session_id: str, part: str) -> str:
    return hashlib.sha256(f"{session_id}:{part}".encode()).hexdigest()[:16]


def _grouped(result: Any, ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in result.mappings():
        if r["session_id"] in ids:
            out[r["session_id"]].append(dict(r))
    return out


def _session_spans(
    row: dict[str, Any], batches: list[dict[str, Any]], calls: list[dict[str, Any]],
    usage: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    sid, agent = row["id"], row["agent"]
    root = span_id(sid, "session")
    start = _nanos(row["started_at"])
    end = _nanos(row["ended_at"] or row["last_activity_at"])
    common = {"gen_ai.conversation.id": row["external_id"], "gen_ai.agent.name": agent,
              "gen_ai.provider.name": PROVIDERS.get(agent)}
    session = _span(sid, root, None, f"invoke_agent {agent}", INTERNAL, start, max(start, end), {
        "gen_ai.operation.name": "invoke_agent",
        **common,
        "gen_ai.agent.id": sid,
        "gen_ai.request.model": row["model"],
        **_usage_attrs(row),
        "hookledger.session.status": row["status"],
        "hookledger.session.cwd": row["cwd"],
        "hookledger.session.agent_type": row["agent_type"],
        "hookledger.session.prompt_count": row["prompt_count"],
        "hookledger.session.tool_call_count": row["tool_call_count"],
    })
    if row["status"] == "FAILED":
        session["status"] = {"code": STATUS_ERROR, "message": "session failed"}
    if row["parent_id"]:
        tool = row["parent_tool_use_id"]
        parent_part = f"tool:{tool}" if tool else "session"
        session["links"] = [{"traceId": trace_id(row["parent_id"]),
                             "spanId": span_id(row["parent_id"], parent_part)}]
    spans = [session]
    batch_span: dict[int, str] = {}
    for bt in batches:
        n = bt["batch"]
        batch_span[n] = span_id(sid, f"batch:{n}")
        b_start = _nanos(bt["started_at"]) or start
        b_end = _nanos(bt["ended_at"]) or b_start
        spans.append(_span(sid, batch_span[n], root, f"prompt_batch {n}", INTERNAL, b_start,
                           max(b_start, b_end), {
            **common,
            "gen_ai.input.messages": _messages("user", bt["prompt"]),
            "gen_ai.output.messages": _messages("assistant", bt["last_assistant_message"]),
            "hookledger.batch": n,
            "hookledger.batch.prompt_kind": bt["prompt_kind"],
            "hookledger.batch.status": bt["status"],
            "hookledger.batch.end_reason": bt["end_reason"],
        }))
    for c in calls:
        parent = batch_span.get(c["batch"], root)
        c_start = _nanos(c["started_at"]) or _nanos(c["completed_at"]) or start
        c_end = _nanos(c["completed_at"]) or c_start
        span = _span(sid, span_id(sid, f"tool:{c['tool_use_id']}"), parent,
                     f"execute_tool {c['tool_name'] or 'unknown'}", INTERNAL, c_start,
                     max(c_start, c_end), {
            **common,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": c["tool_name"],
            "gen_ai.tool.call.id": c["tool_use_id"],
            "gen_ai.tool.type": "function",
            "error.type": "tool_error" if c["is_error"] else None,
            "hookledger.tool.status": c["status"],
            "hookledger.tool.interrupted": bool(c["interrupted"]) or None,
            "hookledger.tool.duration_ms": c["duration_ms"],
        })
        if c["is_error"]:
            span["status"] = {"code": STATUS_ERROR,
                              "message": (c["error"] or "tool call failed")[:MAX_TEXT]}
        spans.append(span)
    for m in usage:
        at = _nanos(m["occurred_at"] or m["recorded_at"]) or start
        parent = next((batch_span[bt["batch"]] for bt in batches
                       if bt["first_position"] <= m["position"] <= bt["last_position"]), root)
        spans.append(_span(sid, span_id(sid, f"chat:{m['message_id']}"), parent,
                           f"chat {m['model'] or 'unknown'}", CLIENT, at, at, {
            **common,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": m["model"],
            "gen_ai.response.model": m["model"],
            "gen_ai.response.id": m["message_id"],
            **_usage_attrs(m),
        }))
    return spans


def _usage_attrs(r: dict[str, Any]) -> dict[str, Any]:
    cache_read, cache_write = r["cache_read_input_tokens"], r["cache_creation_input_tokens"]
    return {
        "gen_ai.usage.input_tokens": r["input_tokens"] + cache_read + cache_write,
        "gen_ai.usage.output_tokens": r["output_tokens"],
        "gen_ai.usage.cache_read.input_tokens": cache_read,
        "gen_ai.usage.cache_creation.input_tokens": cache_write,
    }


def _messages(role: str, text: str | None) -> str | None:
    if not text:
        return None
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text[:MAX_TEXT]}]}],
                      ensure_ascii=False)


def _span(
    sid: str, span: str, parent: str | None, name: str, kind: int, start: int, end: int,
    attributes: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {"traceId": trace_id(sid), "spanId": span}
    if parent:
        out["parentSpanId"] = parent
    out.update(name=name, kind=kind, startTimeUnixNano=str(start), endTimeUnixNano=str(end),
               attributes=_attrs(attributes))
    return out


def _attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP ``KeyValue`` list; None values are left out."""
    out = []
    for key, v in values.items():
        if v is None:
            continue
        if isinstance(v, bool):
            value: dict[str, Any] = {"boolValue": v}
        elif isinstance(v, int):
            value = {"intValue": str(v)}
        else:
            value = {"stringValue": str(v)}
        out.append({"key": key, "value": value})
    return out


def _nanos(iso: str | None) -> int:
    """ISO-8601 UTC text -> unix nanoseconds (0 for None)."""
    if not iso:
        return 0
    dt = datetime.fromisoformat(iso)
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt
    return (dt - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1) * 1000
