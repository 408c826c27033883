"""Relational read models (SQLAlchemy Core; SQLite and PostgreSQL dialects).

Tables are built by :func:`build_tables` with an optional name suffix, so a rebuild can
fill fresh ``<name>__rebuild`` tables next to the live ones and swap them in. Times
are ISO-8601 UTC strings (``2026-06-20T00:55:16.123Z``); tokens are counts;
``duration_ms`` milliseconds; ``*cost_usd`` US dollars (docs/cost.md).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
)
from sqlalchemy.types import TypeEngine

TRACKING = "projection_tracking"


def tracking_table(metadata: MetaData) -> Table:
    """``projection_tracking(name, position)``: the last log position each projection
    applied, written in the same transaction as its rows (exactly once)."""
    return Table(
        TRACKING,
        metadata,
        Column("name", String(64), primary_key=True),
        Column("position", BigInteger, nullable=False),
    )


def session_times(t: Table) -> dict[str, ColumnElement[str]]:
    """``started_at`` and ``last_activity_at`` of a ``sessions`` row as the queries give
    them: the source's clock (the stored columns, min and max of the events'
    ``occurred_at``) when the session has one; else the ledger time of the agent's first
    and latest activity (``first/last_activity_recorded_at``: never a summary, a job's
    decision or an operator's command); else, a session with no activity of its own (a
    fork of nothing but its first event), when it was opened (``first_recorded_at``).
    ``last_recorded_at`` stays the ledger time of the latest event of any kind."""
    return {
        "started_at": func.coalesce(
            t.c.started_at, t.c.first_activity_recorded_at, t.c.first_recorded_at
        ),
        "last_activity_at": func.coalesce(
            t.c.last_activity_at, t.c.last_activity_recorded_at, t.c.first_recorded_at
        ),
    }


def _sessions(md: MetaData, sfx: str) -> list[Table]:
    tokens = [
        Column(n, BigInteger, nullable=False, default=0)
        for n in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        )
    ]
    sessions = Table(
        "sessions" + sfx,
        md,
        Column("id", String(36), primary_key=True),
        Column("agent", String(32), nullable=False),
        Column("external_id", Text, nullable=False),
        Column("parent_id", String(36)),
        Column("parent_tool_use_id", Text),
        Column("agent_type", Text),
        Column("cwd", Text),
        Column("model", Text),
        Column("status", String(16), nullable=False),
        Column("prompt_count", Integer, nullable=False, default=0),
        Column("batch_count", Integer, nullable=False, default=0),
        Column("tool_call_count", Integer, nullable=False, default=0),
        Column("tool_error_count", Integer, nullable=False, default=0),
        *tokens,
        *_cost_columns(),
        Column("agent_cost_usd", Float),  # sum of the agent's own CostReported figures
        Column("event_count", Integer, nullable=False, default=0),
        Column("started_at", String(32)),
        Column("last_activity_at", String(32)),
        Column("ended_at", String(32)),
        Column("first_recorded_at", String(32), nullable=False),
        Column("last_recorded_at", String(32), nullable=False),
        # ledger times of the agent's first and latest activity (not Opened, Reopened or
        # the ledger's own events: ledger.lifecycle.NOT_ACTIVITY); see session_times()
        Column("first_activity_recorded_at", String(32)),
        Column("last_activity_recorded_at", String(32)),
        Column("head_version", Integer, nullable=False),
        Column("head_digest", String(64), nullable=False),
        Column("head_position", BigInteger, nullable=False),
        # what the liveness jobs may still decide on, as the aggregate's Liveness has it:
        # its latest prompt batch is open; batch activity recorded while none was open
        # and not yet attached (api/jobs.py nominates ended sessions by these)
        Column("batch_open", Boolean, nullable=False, default=False),
        Column("unattached_count", Integer, nullable=False, default=0),
    )
    usage = Table(
        "session_usage" + sfx,
        md,
        Column("session_id", String(36), primary_key=True),
        Column("message_id", Text, primary_key=True),
        Column("model", Text),
        Column("batch", Integer, nullable=False, default=0),
        *[Column(c.name, BigInteger, nullable=False, default=0) for c in tokens],
        # the 1-hour part of cache_creation_input_tokens (priced at its own rate)
        Column("cache_creation_1h_input_tokens", BigInteger, nullable=False, default=0),
        Column("cost_usd", Float),  # None: the model has no price
        Column("unpriced_tokens", BigInteger, nullable=False, default=0),
        Column("position", BigInteger, nullable=False),
    )
    subagent_calls = Table(  # a subagent's type from the call that spawned it
        "session_subagent_calls" + sfx,
        md,
        Column("parent_id", String(36), primary_key=True),  # the calling session
        Column("tool_use_id", Text, primary_key=True),
        Column("agent_type", Text),  # the call's input's subagent_type (None: not seen yet)
        Column("child_id", String(36)),  # the session linked to it (None: not seen yet)
    )
    return [sessions, usage, subagent_calls]


TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def _token_columns() -> list[Column]:  # type: ignore[type-arg]
    return [Column(n, BigInteger, nullable=False, default=0) for n in TOKEN_COLUMNS]


def _cost_columns() -> list[Column]:  # type: ignore[type-arg]
    """``cost_usd``: sum over priced usage (USD); ``unpriced_tokens``: tokens of usage
    whose model has no price (``cost_usd`` is a lower bound when > 0)."""
    return [
        Column("cost_usd", Float, nullable=False, default=0.0),
        Column("unpriced_tokens", BigInteger, nullable=False, default=0),
    ]


def _batches(md: MetaData, sfx: str) -> list[Table]:
    return [
        Table(  # inputs that open no batch: slash commands, background-task notifications
            "batch_inputs" + sfx,
            md,
            # session first: the key is also the index of a session's inputs
            Column("session_id", String(36), primary_key=True),
            Column("position", BigInteger, primary_key=True, autoincrement=False),
            Column("batch", Integer, nullable=False),  # 0: before the first prompt
            Column("kind", String(32), nullable=False),  # the prompt_kind
            Column("text", Text),
            Column("occurred_at", String(32)),
        ),
        Table(
            "batch_usage" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("message_id", Text, primary_key=True),
            Column("batch", Integer),  # the prompt batch it is counted in; None: none
            *_token_columns(),
            Column("cache_creation_1h_input_tokens", BigInteger, nullable=False, default=0),
            Column("cost_usd", Float),
            Column("unpriced_tokens", BigInteger, nullable=False, default=0),
        ),
        Table(
            "prompt_batches" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("batch", Integer, primary_key=True),
            Column("prompt", Text),
            Column("prompt_kind", String(32)),
            Column("status", String(16), nullable=False),
            Column("started_at", String(32)),
            Column("ended_at", String(32)),
            Column("end_reason", Text),
            Column("tool_call_count", Integer, nullable=False, default=0),
            Column("tool_error_count", Integer, nullable=False, default=0),
            Column("last_assistant_message", Text),
            *_token_columns(),
            *_cost_columns(),
            Column("agent_cost_usd", Float),
            Column("first_position", BigInteger, nullable=False),
            Column("last_position", BigInteger, nullable=False),
            # the latest observed event of the batch (not a job's or operator's decision)
            Column("activity_position", BigInteger, nullable=False),
            # the latest event that ended its activity: TurnEnded, the next prompt, the
            # session's end, BatchClosed, ActivitiesAttached, TimedOut (None: still open)
            Column("settled_position", BigInteger),
        )
    ]


def _tool_calls(md: MetaData, sfx: str) -> list[Table]:
    return [
        Table(
            "tool_calls" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("tool_use_id", Text, primary_key=True),
            Column("batch", Integer, nullable=False),
            Column("tool_name", Text),
            Column("tool_input", Text),
            Column("output", Text),
            Column("status", String(16), nullable=False),
            Column("is_error", Boolean, nullable=False, default=False),
            Column("error", Text),
            Column("interrupted", Boolean, nullable=False, default=False),
            Column("started_at", String(32)),
            Column("completed_at", String(32)),
            Column("duration_ms", BigInteger),
            Column("start_position", BigInteger),
            Column("end_position", BigInteger),
        )
    ]


def _status_history(md: MetaData, sfx: str) -> list[Table]:
    return [
        Table(
            "status_history" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("version", Integer, primary_key=True),
            Column("position", BigInteger, nullable=False),
            Column("from_status", String(16)),
            Column("to_status", String(16), nullable=False),
            Column("cause", String(64), nullable=False),
            Column("at", String(32)),
        ),
        Table(
            "status_heads" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("status", String(16), nullable=False),
        ),
    ]


def _rowid_position() -> TypeEngine[int]:
    """A log position key: BIGINT, and INTEGER on SQLite (so it is the rowid)."""
    return BigInteger().with_variant(Integer(), "sqlite")


def _event_index(md: MetaData, sfx: str) -> list[Table]:
    return [
        Table(
            "event_index" + sfx,
            md,
            # SQLite: INTEGER PRIMARY KEY, the rowid itself (no second b-tree); tables
            # created before this keep their BIGINT key (same column names, same rows)
            Column("position", _rowid_position(), primary_key=True, autoincrement=False),
            Column("stream_id", String(36), nullable=False),
            Column("version", Integer, nullable=False),
            Column("kind", String(64), nullable=False),
            Column("event_key", Text, nullable=False),
            Column("agent", String(32)),
            Column("source_format", String(64)),
            Column("digest", String(64), nullable=False),
            Column("occurred_at", String(32)),
            Column("recorded_at", String(32)),
        )
    ]


def _plans(md: MetaData, sfx: str) -> list[Table]:
    """Plan capture (``projections/plans.py``)."""
    return [
        Table(
            "plans" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("plan_id", Text, primary_key=True),
            Column("source", String(16), nullable=False),
            Column("path", Text),
            Column("batch", Integer, nullable=False),
            Column("content", Text),
            Column("revisions", Integer, nullable=False),
            Column("unapplied_edits", Integer, nullable=False),
            Column("approved", Boolean),
            Column("created_at", String(32)),
            Column("updated_at", String(32)),
            Column("first_position", BigInteger, nullable=False),
            Column("last_position", BigInteger, nullable=False),
        ),
        Table(
            "plan_tool_calls" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("tool_use_id", Text, primary_key=True),
            Column("plan_id", Text, nullable=False),
        ),
    ]


def _summaries(md: MetaData, sfx: str) -> list[Table]:
    """Summaries and observations (``projections/summaries.py``). List columns hold JSON
    arrays of strings; ``files`` a JSON array of paths; tokens are counts, ``cost_usd`` USD."""
    lists = ("investigated", "learned", "completed", "next_steps", "files_read", "files_edited",
             "commands_failed")
    return [
        Table(
            "summaries" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("scope", String(16), primary_key=True),
            Column("batch", Integer, primary_key=True),  # 0 for a session summary
            Column("request", Text),
            *[Column(n, Text, nullable=False) for n in lists],
            Column("observation_count", Integer, nullable=False),
            Column("summariser", String(32), nullable=False),
            Column("model", Text),
            Column("input_tokens", BigInteger, nullable=False),
            Column("output_tokens", BigInteger, nullable=False),
            Column("cost_usd", Float),
            Column("fallback_reason", Text),
            Column("through_version", Integer, nullable=False),
            Column("through_position", BigInteger),
            Column("position", BigInteger, nullable=False),
            Column("recorded_at", String(32), nullable=False),
        ),
        Table(
            "observations" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("position", BigInteger, primary_key=True),
            Column("idx", Integer, primary_key=True),
            Column("scope", String(16), nullable=False),
            Column("batch", Integer, nullable=False),
            Column("kind", String(16), nullable=False),
            Column("title", Text, nullable=False),
            Column("detail", Text, nullable=False),
            Column("files", Text, nullable=False),
            Column("recorded_at", String(32), nullable=False),
            # position of the later summary of the same scope and batch that replaced
            # this one's summary (None: current)
            Column("superseded_by", BigInteger),
        ),
        Table(  # what every summary cost, kept when a later summary replaces it
            "summary_spend" + sfx,
            md,
            Column("session_id", String(36), primary_key=True),
            Column("position", BigInteger, primary_key=True),
            Column("tokens", BigInteger, nullable=False),  # input + output tokens
            Column("recorded_at", String(32), nullable=False),
        ),
    ]


def _search(md: MetaData, sfx: str) -> list[Table]:
    """``search_documents``: one row per searchable text (projections/search.py). The
    full-text index beside it is not a SQLAlchemy table: an FTS5 table on SQLite, a GIN
    expression index on PostgreSQL (:func:`projections.search.companions`)."""
    return [
        Table(
            "search_documents" + sfx,
            md,
            Column("doc_id", BigInteger, primary_key=True, autoincrement=False),  # FTS rowid
            Column("session_id", String(36), nullable=False),
            Column("ref", Text, nullable=False),  # prompt:<pos> | tool:<pos> | summary:<scope>:<batch> | observation:<pos>:<i>
            Column("kind", String(16), nullable=False),  # prompt | tool_input | summary | observation
            Column("batch", Integer, nullable=False),
            Column("title", Text, nullable=False),
            Column("body", Text, nullable=False),
            Column("occurred_at", String(32)),
            Column("position", BigInteger, nullable=False),
        )
    ]


TABLE_BUILDERS = {
    "sessions": _sessions,
    "batches": _batches,
    "tool_calls": _tool_calls,
    "status_history": _status_history,
    "event_index": _event_index,
    "plans": _plans,
    "summaries": _summaries,
    "search": _search,
}


def build_tables(metadata: MetaData, projection: str, suffix: str = "") -> dict[str, Table]:
    """Tables of one projection, keyed by their base name."""
    tables = TABLE_BUILDERS[projection](metadata, suffix)
    return {t.name.removesuffix(suffix) if suffix else t.name: t for t in tables}
