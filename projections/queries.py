"""Read functions over the relational read models (used by the CLI and the API).

Shapes: plain dicts/lists, JSON-ready. Times are ISO-8601 UTC strings; tokens counts;
``cost_usd`` (computed from the bundled price table; a lower bound when
``unpriced_tokens`` > 0) and ``agent_cost_usd`` (the agent's own figure, None when it
reported none) in USD — see docs/cost.md.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import BigInteger, ColumnElement, Float, Table, cast, func, or_, select

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
    q = select(*columns).order_by(last_activity.desc(), t.c.id).where(*_filters(t, agent, status))
    if limit is not None:
        q = q.limit(limit)
    if offset:
        q = q.offset(offset)
    with models.engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def _filters(t: Table, agent: str | None, status: str | None) -> list[ColumnElement[bool]]:
    """The ``agent`` (exact) and ``status`` (any case) filters of the session list."""
    found: list[ColumnElement[bool]] = []
    if agent:
        found.append(t.c.agent == agent)
    if status:
        found.append(t.c.status == status.upper())
    return found


TOTAL_FIELDS = (
    "prompt_count",
    "tool_call_count",
    "tool_error_count",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cost_usd",
    "unpriced_tokens",
)


def session_totals(
    models: ReadModels, *, agent: str | None = None, status: str | None = None
) -> dict[str, Any]:
    """Sums over the sessions :func:`list_sessions` lists with the same filters:
    ``sessions``, ``subagents`` (those with a parent), the :data:`TOTAL_FIELDS` sums,
    ``agent_cost_usd`` (None when no session has a figure), ``first_started_at`` and
    ``last_activity_at``. A subagent run is its own session: nothing is counted twice."""
    t = models.table("sessions")
    columns = _session_columns(t)
    started = columns[SESSION_FIELDS.index("started_at")]
    last_activity = columns[SESSION_FIELDS.index("last_activity_at")]
    q = select(
        func.count().label("sessions"),
        func.count(t.c.parent_id).label("subagents"),
        # PostgreSQL sums BIGINT as NUMERIC (a Decimal): cast back to the column's kind
        *[
            cast(func.coalesce(func.sum(t.c[f]), 0), Float if f == "cost_usd" else BigInteger).label(f)
            for f in TOTAL_FIELDS
        ],
        cast(func.sum(t.c.agent_cost_usd), Float).label("agent_cost_usd"),
        func.min(started).label("first_started_at"),
        func.max(last_activity).label("last_activity_at"),
    ).where(*_filters(t, agent, status))
    with models.engine.connect() as conn:
        return {str(k): v for k, v in conn.execute(q).mappings().one().items()}


def agents(models: ReadModels) -> list[str]:
    """The agents that have sessions, sorted (the values the ``agent`` filter takes)."""
    t = models.table("sessions")
    with models.engine.connect() as conn:
        return list(conn.execute(select(t.c.agent).distinct().order_by(t.c.agent)).scalars())


def get_session(models: ReadModels, session_id: str) -> dict[str, Any] | None:
    """One session (a ledger id, not a prefix: see :func:`find_session_id`), None when
    unknown: the :func:`list_sessions` fields plus ``batches`` (``prompt_batches`` rows,
    by number), ``tool_calls`` (``tool_calls`` rows in log order, ``tool_input`` and
    ``output`` decoded from JSON, ``duration_ms`` milliseconds), ``status_history`` (one
    row per transition, by version), ``inputs`` (what the session was given that opens
    no batch, by position: ``position``, ``batch`` (0: before the first prompt),
    ``kind`` (``command``: a local slash command, text ``/name args``; ``task_notification``:
    a background task's report), ``text``, ``occurred_at``), ``summaries`` (with their
    observations), and its
    lineage: ``children`` (ids of subagents and forks), ``subagents`` (their session
    rows, first started first), ``parent`` (``id``, ``external_id``, ``agent``,
    ``agent_type``, ``status``; None when the session has no parent or the parent has
    no row) and ``spawned_by`` (the parent's tool call that started
    this run: ``tool_use_id``, ``tool_name``, ``batch``, ``status``, ``description``;
    None when not recorded)."""
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
        bi = models.table("batch_inputs")
        out["inputs"] = [
            dict(r)
            for r in conn.execute(
                select(bi.c.position, bi.c.batch, bi.c.kind, bi.c.text, bi.c.occurred_at)
                .where(bi.c.session_id == session_id)
                .order_by(bi.c.position)
            ).mappings()
        ]
        out["children"] = [
            r[0] for r in conn.execute(select(s.c.id).where(s.c.parent_id == session_id).order_by(s.c.id))
        ]
        columns = _session_columns(s)
        started = columns[SESSION_FIELDS.index("started_at")]
        out["subagents"] = [
            dict(r)
            for r in conn.execute(
                select(*columns).where(s.c.parent_id == session_id).order_by(started, s.c.id)
            ).mappings()
        ]
        out["parent"] = out["spawned_by"] = None
        if out["parent_id"]:
            parent = conn.execute(
                select(s.c.id, s.c.external_id, s.c.agent, s.c.agent_type, s.c.status).where(
                    s.c.id == out["parent_id"]
                )
            ).mappings().first()
            out["parent"] = dict(parent) if parent else None
        if out["parent_id"] and out["parent_tool_use_id"]:
            call = conn.execute(
                select(tc.c.tool_use_id, tc.c.tool_name, tc.c.batch, tc.c.status, tc.c.tool_input).where(
                    tc.c.session_id == out["parent_id"], tc.c.tool_use_id == out["parent_tool_use_id"]
                )
            ).mappings().first()
            if call is not None:
                found = dict(call)
                found["description"] = _description(found.pop("tool_input"))
                out["spawned_by"] = found
        out["summaries"] = summaries_of(conn, _summary_tables(models), session_id)
        return out


def _description(tool_input: str | None) -> str | None:
    """The ``description`` a subagent tool call gave (Claude Code's Task/Agent tool), at
    most 200 characters; None when it has none."""
    value = orjson.loads(tool_input) if tool_input else None
    text = value.get("description") if isinstance(value, dict) else None
    return text[:200] if isinstance(text, str) and text else None


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


def unresolved(models: ReadModels, ref: str) -> str:
    """Why :func:`find_session_id` resolved ``ref`` to no session, for an error message:
    ``no such session: …``, or the sessions whose ledger or external id it starts (an
    ambiguous prefix, or the prefix of a subagent's id only), listed."""
    matches = sessions_matching(models, ref)
    if not matches:
        return f"no such session: {ref}"
    listed = "\n".join(f"  {m['id']}  {m['external_id']}" for m in matches)
    if len(matches) == 1:
        return f"only a subagent's id starts with {ref!r}; give all of it:\n{listed}"
    return f"more than one session matches {ref!r}:\n{listed}"


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


def rejected_streams(models: ReadModels) -> list[str]:
    """Ids of the streams holding rejected input (one per source), in the order of their
    first rejected input in the log."""
    ei = models.table("event_index")
    first = func.min(ei.c.position)
    with models.engine.connect() as conn:
        rows = conn.execute(
            select(ei.c.stream_id).where(ei.c.kind == "InputRejected").group_by(ei.c.stream_id).order_by(first)
        ).all()
    return [r[0] for r in rows]


def session_event_positions(
    models: ReadModels, session_id: str, after: int = 0, upto: int | None = None
) -> dict[int, int]:
    """version -> log position for one stream: its versions after ``after`` and up to
    ``upto`` (None: all), found through the ``event_index_stream`` index."""
    ei = models.table("event_index")
    query = select(ei.c.version, ei.c.position).where(ei.c.stream_id == session_id)
    if after:
        query = query.where(ei.c.version > after)
    if upto is not None:
        query = query.where(ei.c.version <= upto)
    with models.engine.connect() as conn:
        return dict(conn.execute(query).all())
