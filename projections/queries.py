"""Read functions over the relational read models (used by the CLI and the API).

Shapes: plain dicts/lists, JSON-ready. Times are ISO-8601 UTC strings; tokens counts;
``cost_usd`` (computed from the bundled price table; a lower bound when
``unpriced_tokens`` > 0) and ``agent_cost_usd`` (the agent's own figure, None when it
reported none) in USD — see docs/cost.md.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import ColumnElement, Table, func, or_, select

from projections.runner import ReadModels
from projections.schema import session_times
from projections.summaries import summaries_of

SESSION_FIELDS = (
    "id",
    "agent",
    "external_id",
    "parent_id",
    "parent_tool_use_id",
    "agent_type",
    "cwd",
    "model",
    "status",
    "prompt_count",
    "batch_count",
    "tool_call_count",
    "tool_error_count",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cost_usd",
    "agent_cost_usd",
    "unpriced_tokens",
    "event_count",
    "started_at",
    "last_activity_at",
    "ended_at",
)


def _session_columns(t: Table) -> list[ColumnElement[object]]:
    """SESSION_FIELDS; ``started_at`` and ``last_activity_at`` fall back to the ledger's
    clock of the agent's own activity when the source gave none
    (:func:`projections.schema.session_times`)."""
    times = session_times(t)
    return [times[f].label(f) if f in times else t.c[f] for f in SESSION_FIELDS]


def list_sessions(
    models: ReadModels,
    *,
    limit: int | None = None,
    offset: int = 0,
    agent: str | None = None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """Sessions, most recent activity first (ties by id, so output is stable): one dict
    per session with the keys of :data:`SESSION_FIELDS` (four token counts,
    ``cost_usd`` / ``agent_cost_usd`` USD, times ISO-8601 UTC; ``started_at`` and
    ``last_activity_at`` of the agent's activity, by the source's clock, else the
    ledger's: a summary, a job's decision or an operator's command moves neither).
    ``agent``: exact match; ``status``: any case."""
    t = models.table("sessions")
    columns = _session_columns(t)
    last_activity = columns[SESSION_FIELDS.index("last_activity_at")]
    q = select(*columns).order_by(last_activity.desc(), t.c.id)
    if agent:
        q = q.where(t.c.agent == agent)
    if status:
        q = q.where(t.c.status == status.upper())
    if limit is not None:
        q = q.limit(limit)
    if offset:
        q = q.offset(offset)
    with models.engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def get_session(models: ReadModels, session_id: str) -> dict[str, Any] | None:
    """One session (a ledger id, not a prefix: see :func:`find_session_id`), None when
    unknown: the :func:`list_sessions` fields plus ``batches`` (``prompt_batches`` rows,
    by number), ``tool_calls`` (``tool_calls`` rows in log order, ``tool_input`` and
    ``output`` decoded from JSON, ``duration_ms`` milliseconds), ``status_history`` (one
    row per transition, by version), ``children`` (subagent and fork ids) and
    ``summaries`` (with their observations)."""
    s = models.table("sessions")
    b = models.table("prompt_batches")
    tc = models.table("tool_calls")
    sh = models.table("status_history")
    with models.engine.connect() as conn:
        row = conn.execute(select(*_session_columns(s)).where(s.c.id == session_id)).mappings().first()
        if row is None:
            return None
        out = dict(row)
        out["batches"] = [
            dict(r)
            for r in conn.execute(
                select(b).where(b.c.session_id == session_id).order_by(b.c.batch)
            ).mappings()
        ]
        calls = []
        for r in conn.execute(
            select(tc).where(tc.c.session_id == session_id).order_by(
                tc.c.start_position.is_(None), tc.c.start_position, tc.c.end_position
            )
        ).mappings():
            call = dict(r)
            for f in ("tool_input", "output"):
                call[f] = orjson.loads(call[f]) if call[f] is not None else None
            calls.append(call)
        out["tool_calls"] = calls
        out["status_history"] = [
            dict(r)
            for r in conn.execute(
                select(sh).where(sh.c.session_id == session_id).order_by(sh.c.version)
            ).mappings()
        ]
        out["children"] = [
            r[0] for r in conn.execute(select(s.c.id).where(s.c.parent_id == session_id).order_by(s.c.id))
        ]
        out["summaries"] = summaries_of(conn, _summary_tables(models), session_id)
        return out


def _summary_tables(models: ReadModels) -> dict[str, Table]:
    return {n: models.table(n) for n in ("summaries", "observations")}


def session_summaries(models: ReadModels, session_id: str) -> list[dict[str, Any]]:
    """A session's summaries with their observations (:func:`projections.summaries.summaries_of`)."""
    with models.engine.connect() as conn:
        return summaries_of(conn, _summary_tables(models), session_id)


def find_session_id(models: ReadModels, ref: str) -> str | None:
    """Resolve a ledger id, an external (agent) id, or an id prefix: a prefix of ledger
    ids that only one session has, else a prefix of external ids that only one
    top-level session has (a subagent's external id is ``<parent's id>/agent-…``, so
    the prefix of a parent's id also matches its subagents). None when nothing, or more
    than one, matches (:func:`sessions_matching` lists them)."""
    s = models.table("sessions")
    with models.engine.connect() as conn:
        for cond in (s.c.id == ref, s.c.external_id == ref):
            found = conn.execute(select(s.c.id).where(cond)).scalars().all()
            if len(found) == 1:
                return found[0]
        pattern = _like_prefix(ref)
        found = conn.execute(
            select(s.c.id).where(s.c.id.like(pattern, escape="\\")).limit(2)
        ).scalars().all()
        if len(found) == 1:
            return found[0]
        found = conn.execute(
            select(s.c.id)
            .where(s.c.external_id.like(pattern, escape="\\"), s.c.parent_id.is_(None))
            .limit(2)
        ).scalars().all()
        return found[0] if len(found) == 1 else None


def sessions_matching(models: ReadModels, ref: str, limit: int = 10) -> list[dict[str, Any]]:
    """Up to ``limit`` sessions (``id``, ``external_id``, ``parent_id``) whose ledger or
    external id starts with ``ref``: what an unresolved reference could have meant."""
    s = models.table("sessions")
    pattern = _like_prefix(ref)
    query = (
        select(s.c.id, s.c.external_id, s.c.parent_id)
        .where(or_(s.c.id.like(pattern, escape="\\"), s.c.external_id.like(pattern, escape="\\")))
        .order_by(s.c.external_id)
        .limit(limit)
    )
    with models.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def _like_prefix(ref: str) -> str:
    """A LIKE pattern matching strings that start with ``ref`` (its ``%``, ``_`` and
    ``\\`` taken literally, escaped with ``\\``)."""
    return ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def stats(models: ReadModels) -> dict[str, int]:
    """``events`` (all recorded), ``sessions``, ``rejected`` (inputs kept as rejected),
    ``tool_calls``, ``prompts``."""
    ei = models.table("event_index")
    s = models.table("sessions")
    with models.engine.connect() as conn:
        events = conn.execute(select(func.count()).select_from(ei)).scalar_one()
        rejected = conn.execute(select(func.count()).select_from(ei).where(ei.c.kind == "InputRejected")).scalar_one()
        sessions, prompts, tools = conn.execute(
            select(func.count(), func.coalesce(func.sum(s.c.prompt_count), 0), func.coalesce(func.sum(s.c.tool_call_count), 0))
        ).one()
    return {
        "events": int(events),
        "sessions": int(sessions),
        "rejected": int(rejected),
        "prompts": int(prompts),
        "tool_calls": int(tools),
    }


def session_event_positions(models: ReadModels, session_id: str) -> dict[int, int]:
    """version -> log position for one stream."""
    ei = models.table("event_index")
    with models.engine.connect() as conn:
        return dict(
            conn.execute(select(ei.c.version, ei.c.position).where(ei.c.stream_id == session_id)).all()
        )
