"""Fact extraction: notifications -> ``events`` rows -> the derived analytics tables.

One section of the notification log is handed to DuckDB as one Arrow table (position,
stream id, version, topic, stored state bytes); DuckDB parses each event's JSON once
(``json_extract_string`` with a list of paths) and appends the envelope and facts to
``events`` with one ``INSERT … SELECT``. No row-by-row inserts.

``usage``, ``tool_calls``, ``prompt_batches`` and ``sessions`` are then recomputed for
the sessions the section touched, from their ``events`` rows (delete those sessions'
rows, ``INSERT … SELECT``), so they follow the same rules as the relational read
models (``projections/sessions.py``, ``batches.py``, ``tool_calls.py``): usage — the
last record per ``message_id`` wins; batches open on a ``human``/``task`` prompt and
end at ``TurnEnded``, the session's end or the next prompt; tool-call duration is the
agent's figure, else completion minus start.

Stored state format: the JSON object :func:`ledger.envelope.stored_bytes` writes (the
event's fields; the raw record after a NUL byte is cut off before staging). Every
event class is at ``class_version`` 1 but ``Session.Summarised`` (2: adds
``tokens_estimated``, which nothing here reads); an upcast (``class_version`` > 1) must be
mirrored here — ``tests/test_analytics.py`` fails when a class's version moves.
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pyarrow as pa

from ledger.envelope import RAW_SEPARATOR

# (column, JSON path, SQL type) of the fields read from each stored event.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("event_key", "event_key", "VARCHAR"),
    ("agent", "agent", "VARCHAR"),
    ("source_format", "source_format", "VARCHAR"),
    ("source_version", "source_version", "VARCHAR"),
    ("status", "status", "VARCHAR"),
    ("batch", "batch", "INTEGER"),
    ("occurred_at", "occurred_at", "TIMESTAMP"),
    ("recorded_at", "timestamp", "TIMESTAMP"),
    ("digest", "digest", "VARCHAR"),
    ("model", "model", "VARCHAR"),
    ("message_id", "message_id", "VARCHAR"),
    ("input_tokens", "input_tokens", "BIGINT"),
    ("output_tokens", "output_tokens", "BIGINT"),
    ("cache_creation_input_tokens", "cache_creation_input_tokens", "BIGINT"),
    ("cache_read_input_tokens", "cache_read_input_tokens", "BIGINT"),
    ("tool_use_id", "tool_use_id", "VARCHAR"),
    ("tool_name", "tool_name", "VARCHAR"),
    ("is_error", "is_error", "BOOLEAN"),
    ("error", "error", "VARCHAR"),
    ("duration_ms", "duration_ms", "BIGINT"),
    ("interrupted", "interrupted", "BOOLEAN"),
    ("prompt_kind", "prompt_kind", "VARCHAR"),
    ("prompt_text", "text", "VARCHAR"),
    ("reason", "reason", "VARCHAR"),
    ("external_id", "external_id", "VARCHAR"),
    ("parent_id", "parent_id", "UUID"),
    ("agent_type", "agent_type", "VARCHAR"),
    ("cwd", "cwd", "VARCHAR"),
    ("parent_tool_use_id", "parent_tool_use_id", "VARCHAR"),
    ("cost_usd", "cost_usd", "DOUBLE"),
)
# Facts that only one kind carries under a shared field name.
_ONLY = {"prompt_text": "PromptSubmitted", "cost_usd": "CostReported"}


def _column(i: int, name: str, sql_type: str) -> str:
    value = f"f[{i + 1}]"
    if sql_type == "TIMESTAMP":
        value = f"(try_cast({value} AS TIMESTAMPTZ) AT TIME ZONE 'UTC')"
    elif sql_type != "VARCHAR":
        value = f"try_cast({value} AS {sql_type})"
    if name in _ONLY:
        value = f"CASE WHEN kind = '{_ONLY[name]}' THEN {value} END"
    return f"{value} AS {name}"


@cache
def insert_events_sql() -> str:
    """``INSERT INTO events … SELECT`` from the Arrow table registered as ``stage``:
    each stored state is parsed once, all :data:`FIELDS` read from that parse."""
    paths = "[" + ", ".join(f"'$.{path}'" for _, path, _ in FIELDS) + "]"
    columns = ",\n       ".join(_column(i, n, t) for i, (n, _, t) in enumerate(FIELDS))
    return f"""
INSERT INTO events BY NAME
SELECT position, stream_id, version, stream_type, kind,
       {columns}
FROM (
    SELECT position, stream_id::UUID AS stream_id, version,
           split_part(split_part(topic, ':', 2), '.', 1) AS stream_type,
           split_part(split_part(topic, ':', 2), '.', 2) AS kind,
           json_extract_string(decode(state), {paths}) AS f
    FROM stage
)
"""


def stage_table(notifications: Any) -> pa.Table:
    """Arrow table (position, stream_id, version, topic, state) of one section (stored
    bytes are plain JSON: :class:`ledger.app.Ledger` refuses compression and ciphers)."""
    states = [n.state for n in notifications]
    # The JSON part only: the raw source record follows a NUL byte
    # (ledger.envelope.stored_bytes) and no analytics table needs it.
    states = [s.partition(RAW_SEPARATOR)[0] for s in states]
    # One join and one offsets array: ~6x faster than pa.array(states) for 100k states.
    offsets = pa.array(itertools.accumulate(map(len, states), initial=0), pa.int64())
    state = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(states), [None, offsets.buffers()[1], pa.py_buffer(b"".join(states))]
    )
    return pa.table(
        {
            "position": pa.array([n.id for n in notifications], pa.int64()),
            "stream_id": pa.array([str(n.originator_id) for n in notifications], pa.string()),
            "version": pa.array([n.originator_version for n in notifications], pa.int32()),
            "topic": pa.array([n.topic for n in notifications], pa.string()),
            "state": state,
        }
    )


# The sessions a section touched, with the lowest position their events can have
# (lets DuckDB skip row groups of ``events`` by their position zone maps).
TOUCHED = """
CREATE OR REPLACE TEMP TABLE touched AS
SELECT s.stream_id AS id, coalesce(x.first_position, s.lo) AS lo
FROM (SELECT stream_id, min(position) AS lo FROM events
      WHERE position > $after AND stream_type = 'Session' GROUP BY stream_id) s
LEFT JOIN sessions x ON x.id = s.stream_id
"""

_EV = "events WHERE position >= $lo AND stream_id IN (SELECT id FROM touched)"
_AT = "coalesce(occurred_at, recorded_at)"
_PRICE = """CASE WHEN p.priced THEN (u.input_tokens * p.input + u.output_tokens * p.output
    + u.cache_read_input_tokens * coalesce(p.cache_read, p.input)
    + u.cache_creation_input_tokens * coalesce(p.cache_write, p.input)) / 1e6 END"""

RECOMPUTE = [
    "DELETE FROM usage WHERE session_id IN (SELECT id FROM touched)",
    f"""INSERT INTO usage BY NAME
    SELECT u.*, {_PRICE} AS cost_usd FROM (
        SELECT stream_id AS session_id, message_id,
               arg_max_null(model, position) AS model,
               arg_max_null(input_tokens, position) AS input_tokens,
               arg_max_null(output_tokens, position) AS output_tokens,
               arg_max_null(cache_creation_input_tokens, position) AS cache_creation_input_tokens,
               arg_max_null(cache_read_input_tokens, position) AS cache_read_input_tokens,
               arg_max_null(batch, position) AS batch,
               arg_max_null({_AT}, position) AS occurred_at,
               max(position) AS position, count(*) AS records
        FROM {_EV} AND kind = 'UsageRecorded' GROUP BY ALL
    ) u LEFT JOIN model_prices p ON p.model = u.model""",
    "DELETE FROM tool_calls WHERE session_id IN (SELECT id FROM touched)",
    f"""INSERT INTO tool_calls BY NAME
    WITH s AS (
        SELECT stream_id, tool_use_id, arg_max_null(tool_name, position) AS tool_name,
               arg_max_null(batch, position) AS batch,
               arg_max_null({_AT}, position) AS started_at, max(position) AS start_position
        FROM {_EV} AND kind = 'ToolCallStarted' GROUP BY ALL
    ), c AS (
        SELECT stream_id, tool_use_id, arg_max_null(tool_name, position) AS tool_name,
               arg_max_null(batch, position) AS batch,
               arg_max_null(is_error, position) AS is_error,
               arg_max_null(error, position) AS error,
               arg_max_null(interrupted, position) AS interrupted,
               arg_max_null(duration_ms, position) AS duration_ms,
               arg_max_null({_AT}, position) AS completed_at, max(position) AS end_position
        FROM {_EV} AND kind = 'ToolCallCompleted' GROUP BY ALL
    )
    SELECT coalesce(s.stream_id, c.stream_id) AS session_id,
           coalesce(s.tool_use_id, c.tool_use_id) AS tool_use_id,
           CASE WHEN s.stream_id IS NOT NULL THEN s.batch ELSE c.batch END AS batch,
           coalesce(s.tool_name, c.tool_name) AS tool_name,
           CASE WHEN c.stream_id IS NULL THEN 'started'
                WHEN c.is_error THEN 'failed' ELSE 'completed' END AS status,
           coalesce(c.is_error, false) AS is_error, c.error,
           coalesce(c.interrupted, false) AS interrupted,
           s.started_at, c.completed_at,
           coalesce(c.duration_ms, greatest(0, round(
               epoch_ms(c.completed_at) - epoch_ms(s.started_at)))::BIGINT) AS duration_ms,
           s.start_position, c.end_position
    FROM s FULL OUTER JOIN c ON s.stream_id = c.stream_id AND s.tool_use_id = c.tool_use_id""",
    "DELETE FROM prompt_batches WHERE session_id IN (SELECT id FROM touched)",
    f"""INSERT INTO prompt_batches BY NAME
    WITH ev AS (SELECT * FROM {_EV} AND stream_type = 'Session' AND batch >= 1),
    o AS (  -- the prompt that opens each batch
        SELECT stream_id, batch, min(position) AS first_position,
               arg_min({_AT}, position) AS started_at,
               arg_min(prompt_text, position) AS prompt,
               arg_min(prompt_kind, position) AS prompt_kind
        FROM ev WHERE kind = 'PromptSubmitted' AND prompt_kind IN ('human', 'task')
        GROUP BY ALL
    ),
    b AS (
        SELECT o.stream_id, o.batch, any_value(o.first_position) AS first_position,
               any_value(o.started_at) AS started_at, any_value(o.prompt) AS prompt,
               any_value(o.prompt_kind) AS prompt_kind, max(ev.position) AS last_position,
               count(*) FILTER (ev.kind = 'ToolCallStarted') AS tool_call_count,
               count(*) FILTER (ev.kind = 'ToolCallCompleted' AND ev.is_error)
                   AS tool_error_count,
               max(ev.position) FILTER (ev.kind = 'TurnEnded') AS turn_position,
               arg_max_null(ev.reason, ev.position) FILTER (ev.kind = 'TurnEnded')
                   AS turn_reason,
               arg_max_null(coalesce(ev.occurred_at, ev.recorded_at), ev.position)
                   FILTER (ev.kind = 'TurnEnded') AS turn_at,
               min(ev.position) FILTER (ev.kind = 'Ended') AS end_position,
               arg_min(coalesce(ev.occurred_at, ev.recorded_at), ev.position)
                   FILTER (ev.kind = 'Ended') AS end_at
        FROM o JOIN ev ON ev.stream_id = o.stream_id AND ev.batch = o.batch
                      AND ev.position >= o.first_position
        GROUP BY o.stream_id, o.batch
    ),
    u AS (
        SELECT session_id, batch, sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd
        FROM usage WHERE session_id IN (SELECT id FROM touched) GROUP BY ALL
    ),
    ended AS (
        SELECT b.*, n.first_position AS next_position, n.started_at AS next_at,
               b.end_position IS NOT NULL
                   AND (n.first_position IS NULL OR b.end_position < n.first_position)
                   AS by_session_end
        FROM b LEFT JOIN o n ON n.stream_id = b.stream_id AND n.batch = b.batch + 1
    )
    SELECT e.stream_id AS session_id, e.batch, e.prompt, e.prompt_kind,
           CASE WHEN e.turn_position IS NOT NULL OR e.by_session_end
                     OR e.next_position IS NOT NULL THEN 'completed' ELSE 'open' END AS status,
           e.started_at,
           CASE WHEN e.turn_position IS NOT NULL THEN e.turn_at
                WHEN e.by_session_end THEN e.end_at ELSE e.next_at END AS ended_at,
           CASE WHEN e.turn_position IS NOT NULL THEN e.turn_reason
                WHEN e.by_session_end THEN 'session_end'
                WHEN e.next_position IS NOT NULL THEN 'next_prompt' END AS end_reason,
           e.tool_call_count, e.tool_error_count,
           coalesce(u.input_tokens, 0) AS input_tokens,
           coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.cost_usd, 0) AS cost_usd,
           e.first_position, e.last_position
    FROM ended e LEFT JOIN u ON u.session_id = e.stream_id AND u.batch = e.batch""",
    "DELETE FROM sessions WHERE id IN (SELECT id FROM touched)",
    f"""INSERT INTO sessions BY NAME
    WITH u AS (
        SELECT session_id, sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens,
               sum(cache_creation_input_tokens) AS cache_creation_input_tokens,
               sum(cache_read_input_tokens) AS cache_read_input_tokens,
               coalesce(sum(cost_usd), 0) AS cost_usd,
               coalesce(sum(input_tokens + output_tokens + cache_creation_input_tokens
                            + cache_read_input_tokens) FILTER (cost_usd IS NULL), 0)
                   AS unpriced_tokens
        FROM usage WHERE session_id IN (SELECT id FROM touched) GROUP BY ALL
    ),
    s AS (
        SELECT stream_id AS id,
               arg_min(agent, position) FILTER (kind = 'Opened') AS agent,
               arg_min(external_id, position) FILTER (kind = 'Opened') AS external_id,
               coalesce(arg_min(parent_id, position) FILTER (kind = 'Opened'),
                        arg_min(parent_id, position) FILTER (kind = 'LinkedToParent'))
                   AS parent_id,
               arg_max_null(parent_tool_use_id, position) FILTER (kind = 'LinkedToParent')
                   AS parent_tool_use_id,
               arg_min(agent_type, position) FILTER (kind = 'Opened') AS agent_type,
               arg_min(cwd, position) FILTER (kind = 'Opened') AS cwd,
               arg_max(model, position)
                   FILTER (kind IN ('Started', 'UsageRecorded') AND model IS NOT NULL) AS model,
               arg_max_null(status, position) AS status,
               count(*) FILTER (kind = 'PromptSubmitted' AND prompt_kind IN ('human', 'task'))
                   AS prompt_count,
               coalesce(max(batch), 0) AS batch_count,
               count(*) FILTER (kind = 'ToolCallStarted') AS tool_call_count,
               count(*) FILTER (kind = 'ToolCallCompleted' AND is_error) AS tool_error_count,
               sum(cost_usd) FILTER (kind = 'CostReported') AS agent_cost_usd,
               count(*) AS event_count,
               min(occurred_at) AS started_at, max(occurred_at) AS last_activity_at,
               CASE WHEN arg_max_null(kind, position) FILTER (kind IN ('Ended', 'Reopened'))
                         = 'Ended'
                    THEN arg_max_null({_AT}, position) FILTER (kind IN ('Ended', 'Reopened'))
               END AS ended_at,
               min(recorded_at) AS first_recorded_at, max(recorded_at) AS last_recorded_at,
               min(position) AS first_position, max(version) AS head_version,
               max(position) AS head_position
        FROM {_EV} AND stream_type = 'Session' GROUP BY stream_id
    )
    SELECT s.*, coalesce(u.input_tokens, 0) AS input_tokens,
           coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.cache_creation_input_tokens, 0) AS cache_creation_input_tokens,
           coalesce(u.cache_read_input_tokens, 0) AS cache_read_input_tokens,
           coalesce(u.cost_usd, 0) AS cost_usd, coalesce(u.unpriced_tokens, 0) AS unpriced_tokens
    FROM s LEFT JOIN u ON u.session_id = s.id""",
]


def new_models(con: Any, after: int) -> list[str]:
    """Models of the usage events after ``after`` that ``model_prices`` lacks."""
    rows = con.execute(
        "SELECT DISTINCT model FROM events WHERE position > $after AND kind = 'UsageRecorded' "
        "AND model IS NOT NULL AND model NOT IN (SELECT model FROM model_prices)",
        {"after": after},
    ).fetchall()
    return [r[0] for r in rows]


def price_rows(models: list[str]) -> list[tuple[Any, ...]]:
    """``model_prices`` rows from the bundled price table (:mod:`projections.pricing`)."""
    from projections.pricing import price_for

    out = []
    for m in models:
        p = price_for(m)
        if p is None:
            out.append((m, False, None, None, None, None))
        else:
            out.append((m, True, p.input, p.output, p.cache_read, p.cache_write))
    return out
