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
agent's figure, else completion minus start, and a start that arrived after its
completion (``LateStartObserved``) moves the start as ``projections/tool_calls.py`` says.

Stored state format: the JSON object :func:`ledger.envelope.stored_bytes` writes (the
event's fields; the raw record after a NUL byte is cut off before staging). Every
event class is at ``class_version`` 1 but ``Session.Summarised`` (2: adds
``tokens_estimated``, which nothing here reads) and ``Session.UsageRecorded`` (2: adds
``cache_creation_1h_input_tokens``, 0 in a version 1 event: its column is NULL there and
read as 0); an upcast (``class_version`` > 1) must be mirrored here —
``tests/test_analytics.py`` fails when a class's version moves.
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
    # UsageRecorded v2; NULL in a v1 row (upcast: 0, read as such below)
    ("cache_creation_1h_input_tokens", "cache_creation_1h_input_tokens", "BIGINT"),
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
    ("subagent_type", "tool_input.subagent_type", "VARCHAR"),
    # lifecycle: liveness-job decisions, operator commands, run outcomes
    ("measured_from", "measured_from", "TIMESTAMP"),
    ("recovery", "recovery", "BOOLEAN"),
    ("tool_use_ids", "tool_use_ids", "VARCHAR[]"),
    ("tool_errors", "tool_errors", "INTEGER"),
    ("first_activity_at", "first_activity_at", "TIMESTAMP"),
    ("to_status", "to_status", "VARCHAR"),
    ("outcome", "outcome", "VARCHAR"),
)
# Facts that only one kind carries under a shared field name.
_ONLY = {
    "prompt_text": "PromptSubmitted",
    "cost_usd": "CostReported",
    "tool_use_ids": "ActivitiesAttached",
    "subagent_type": "ToolCallStarted",
}


def _column(i: int, name: str, sql_type: str) -> str:
    value = f"f[{i + 1}]"
    if sql_type == "TIMESTAMP":
        value = f"(try_cast({value} AS TIMESTAMPTZ) AT TIME ZONE 'UTC')"
    elif sql_type == "VARCHAR[]":
        value = f"""from_json({value}, '["VARCHAR"]')"""
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


_SUBAGENT_CALLS = """events WHERE kind = 'ToolCallStarted' AND tool_name IN ('Task', 'Agent')
    AND subagent_type <> ''"""
"""A subagent's type from the call that spawned it (``projections/sessions.py``:
``SUBAGENT_TOOLS``, ``subagent_type``)."""

# The sessions a section touched, with the lowest position their events can have
# (lets DuckDB skip row groups of ``events`` by their position zone maps): those with
# events in it, and the children linked to a subagent call it holds (their agent_type).
TOUCHED = f"""
CREATE OR REPLACE TEMP TABLE touched AS
SELECT s.id, coalesce(any_value(x.first_position), min(s.lo)) AS lo
FROM (SELECT stream_id AS id, min(position) AS lo FROM events
      WHERE position > $after AND stream_type = 'Session' GROUP BY stream_id
      UNION ALL
      SELECT x.id, x.first_position AS lo
      FROM (SELECT stream_id, tool_use_id FROM {_SUBAGENT_CALLS} AND position > $after) c
      JOIN sessions x ON x.parent_id = c.stream_id
      WHERE EXISTS (SELECT 1 FROM events l WHERE l.stream_id = x.id
                    AND l.kind = 'LinkedToParent' AND l.parent_tool_use_id = c.tool_use_id)) s
LEFT JOIN sessions x ON x.id = s.id
GROUP BY s.id
"""

_EV = "events WHERE position >= $lo AND stream_id IN (SELECT id FROM touched)"
_AT = "coalesce(occurred_at, recorded_at)"
_LONG = """p.above_tokens IS NOT NULL AND u.input_tokens + u.cache_read_input_tokens
    + u.cache_creation_input_tokens > p.above_tokens"""
_5M = "(u.cache_creation_input_tokens - u.cache_creation_1h_input_tokens)"
# USD of one response: its own rates, or the long-context ones (projections/pricing.py);
# cache writes: the 1-hour part at the 1-hour rate, the rest at the 5-minute one
_PRICE = f"""CASE WHEN p.priced AND {_LONG} THEN (u.input_tokens * p.above_input
    + u.output_tokens * p.above_output
    + u.cache_read_input_tokens * coalesce(p.above_cache_read, p.above_input)
    + {_5M} * coalesce(p.above_cache_write, p.above_input)
    + u.cache_creation_1h_input_tokens
      * coalesce(p.above_cache_write_1h, p.above_cache_write, p.above_input)) / 1e6
    WHEN p.priced THEN (u.input_tokens * p.input + u.output_tokens * p.output
    + u.cache_read_input_tokens * coalesce(p.cache_read, p.input)
    + {_5M} * coalesce(p.cache_write, p.input)
    + u.cache_creation_1h_input_tokens * coalesce(p.cache_write_1h, p.cache_write, p.input))
    / 1e6 END"""

_ENDED_STATES = "('ARCHIVED', 'COMPLETED', 'FAILED', 'TERMINATED')"
"""ledger.lifecycle.ENDED_STATES as SQL (tests/test_analytics.py checks they agree)."""
_NOT_ACTIVITY = (
    "('ActivitiesAttached', 'Archived', 'BatchClosed', 'CommandApplied', 'CwdLearned', "
    "'ForkedFrom', 'JobDecided', 'Opened', 'Reopened', 'Summarised', 'TimedOut')"
)
"""ledger.lifecycle.NOT_ACTIVITY as SQL: kinds whose ledger time is not the agent's
activity (tests/test_analytics.py checks they agree)."""

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
               coalesce(arg_max_null(cache_creation_1h_input_tokens, position), 0)
                   AS cache_creation_1h_input_tokens,
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
               arg_max_null({_AT}, position) AS started_at, max(position) AS start_position,
               min(position) AS first_position
        FROM {_EV} AND kind = 'ToolCallStarted' GROUP BY ALL
    ), c AS (
        SELECT stream_id, tool_use_id, arg_max_null(tool_name, position) AS tool_name,
               arg_min_null(batch, position) AS batch,
               arg_max_null(is_error, position) AS is_error,
               arg_max_null(error, position) AS error,
               arg_max_null(interrupted, position) AS interrupted,
               arg_max_null(duration_ms, position) AS duration_ms,
               arg_max_null({_AT}, position) AS completed_at, max(position) AS end_position,
               min(position) AS first_position
        FROM {_EV} AND kind = 'ToolCallCompleted' GROUP BY ALL
    ), l AS (  -- starts that arrived after their completion (LateStartObserved): the earliest
        SELECT stream_id, tool_use_id, min({_AT}) AS started_at,
               arg_min_null(tool_name, {_AT}) AS tool_name
        FROM {_EV} AND kind = 'LateStartObserved' GROUP BY ALL
    ), sc AS (
        SELECT coalesce(s.stream_id, c.stream_id) AS session_id,
               coalesce(s.tool_use_id, c.tool_use_id) AS tool_use_id,
               -- the last start sets the batch; a call seen only completed: its first completion
               CASE WHEN s.stream_id IS NOT NULL THEN s.batch ELSE c.batch END AS batch,
               least(s.first_position, c.first_position) AS created_position,
               coalesce(s.tool_name, c.tool_name) AS tool_name,
               CASE WHEN c.stream_id IS NULL THEN 'started'
                    WHEN c.is_error THEN 'failed' ELSE 'completed' END AS status,
               coalesce(c.is_error, false) AS is_error, c.error,
               coalesce(c.interrupted, false) AS interrupted,
               s.started_at, c.completed_at, c.duration_ms AS agent_ms,
               -- completion - start; NULL while either is missing
               CASE WHEN s.started_at IS NOT NULL AND c.completed_at IS NOT NULL
                   THEN greatest(0, round(epoch_ms(c.completed_at) - epoch_ms(s.started_at)))::BIGINT
               END AS span_ms,
               s.start_position, c.end_position
        FROM s FULL OUTER JOIN c ON s.stream_id = c.stream_id AND s.tool_use_id = c.tool_use_id
    ), j AS (  -- a late start: its tool name when the call has none; its time unless the
               -- start is earlier (to the ms), and a duration equal to the span recomputed
        SELECT sc.* EXCLUDE (tool_name, started_at, agent_ms, span_ms),
               CASE WHEN coalesce(sc.tool_name, '(unknown)') = '(unknown)'
                    THEN coalesce(l.tool_name, sc.tool_name) ELSE sc.tool_name END AS tool_name,
               CASE WHEN late THEN l.started_at ELSE sc.started_at END AS started_at,
               -- the agent's figure, else completion - start
               CASE WHEN late AND (agent_ms IS NULL OR agent_ms = span_ms)
                    THEN CASE WHEN sc.completed_at IS NOT NULL THEN greatest(0, round(
                        epoch_ms(sc.completed_at) - epoch_ms(l.started_at)))::BIGINT END
                    ELSE coalesce(agent_ms, span_ms) END AS duration_ms
        FROM sc LEFT JOIN l ON l.stream_id = sc.session_id AND l.tool_use_id = sc.tool_use_id,
        LATERAL (SELECT coalesce(l.started_at IS NOT NULL AND (sc.started_at IS NULL
            OR date_trunc('millisecond', l.started_at)
               <= date_trunc('millisecond', sc.started_at)), false) AS late)
    ), a AS (  -- liveness jobs: calls attached to a (recovery or latest) batch
        SELECT stream_id, unnest(tool_use_ids) AS tool_use_id, batch, position
        FROM {_EV} AND kind = 'ActivitiesAttached'
    ), moved AS (  -- the last attachment made after the call was seen
        SELECT j.session_id, j.tool_use_id, arg_max(a.batch, a.position) AS batch,
               max(a.position) AS position
        FROM j JOIN a ON a.stream_id = j.session_id AND a.tool_use_id = j.tool_use_id
                     AND a.position > j.created_position
        GROUP BY ALL
    )
    SELECT j.* EXCLUDE (batch, created_position),
           CASE WHEN m.position > coalesce(j.start_position, 0) THEN m.batch
                ELSE j.batch END AS batch
    FROM j LEFT JOIN moved m ON m.session_id = j.session_id AND m.tool_use_id = j.tool_use_id""",
    "DELETE FROM prompt_batches WHERE session_id IN (SELECT id FROM touched)",
    # As projections/batches.py applies events one by one: a batch row is created by the
    # first human/task prompt of the batch or by a liveness job's recovery attachment;
    # the last TurnEnded decides how it ended; otherwise the first of the session's end,
    # the run's end, an idle BatchClosed or the next batch's prompt that came while it
    # was open (a recovery batch is created completed).
    f"""INSERT INTO prompt_batches BY NAME
    WITH ev AS (SELECT * FROM {_EV} AND stream_type = 'Session' AND batch >= 1),
    o AS (  -- the event that creates each batch row
        SELECT stream_id, batch, min(position) AS first_position,
               arg_min(kind, position) = 'ActivitiesAttached' AS recovery,
               arg_min_null({_AT}, position) AS at,
               arg_min_null(first_activity_at, position) AS first_activity_at,
               arg_min_null(measured_from, position) AS measured_from,
               arg_min_null(prompt_text, position) AS prompt,
               arg_min_null(prompt_kind, position) AS prompt_kind,
               -- calls made before any prompt: of a recovery batch, or a late task prompt's
               sum(len(tool_use_ids)) FILTER (kind = 'ActivitiesAttached') AS attached_calls,
               sum(tool_errors) FILTER (kind = 'ActivitiesAttached') AS attached_errors
        FROM ev WHERE (kind = 'PromptSubmitted' AND prompt_kind IN ('human', 'task'))
                      OR (kind = 'ActivitiesAttached' AND recovery)
        GROUP BY ALL
    ),
    b AS (
        SELECT o.stream_id, o.batch,
               max(ev.position) FILTER (ev.kind NOT IN ('Summarised', 'ActivitiesAttached',
                   'BatchClosed') OR ev.position = o.first_position) AS last_position,
               count(*) FILTER (ev.kind = 'ToolCallStarted') AS tool_calls,
               count(*) FILTER (ev.kind = 'ToolCallCompleted' AND ev.is_error) AS tool_errors,
               max(ev.position) FILTER (ev.kind = 'TurnEnded') AS turn_position,
               min(ev.position) FILTER (ev.kind = 'TurnEnded') AS first_turn_position,
               arg_max_null(ev.reason, ev.position) FILTER (ev.kind = 'TurnEnded')
                   AS turn_reason,
               arg_max_null(coalesce(ev.occurred_at, ev.recorded_at), ev.position)
                   FILTER (ev.kind = 'TurnEnded') AS turn_at,
               -- the first end that can close an open batch
               min(ev.position) FILTER (ev.kind IN ('Ended', 'RunEnded', 'BatchClosed'))
                   AS end_position,
               arg_min(ev.kind, ev.position)
                   FILTER (ev.kind IN ('Ended', 'RunEnded', 'BatchClosed')) AS end_kind,
               arg_min_null(CASE ev.kind WHEN 'Ended' THEN 'session_end'
                                         WHEN 'RunEnded' THEN 'run_' || ev.outcome
                                         ELSE ev.reason END, ev.position)
                   FILTER (ev.kind IN ('Ended', 'RunEnded', 'BatchClosed')) AS end_reason,
               arg_min_null(CASE WHEN ev.kind = 'BatchClosed' THEN coalesce(ev.measured_from,
                   ev.occurred_at, ev.recorded_at) ELSE coalesce(ev.occurred_at,
                   ev.recorded_at) END, ev.position)
                   FILTER (ev.kind IN ('Ended', 'RunEnded', 'BatchClosed')) AS end_at
        FROM o JOIN ev ON ev.stream_id = o.stream_id AND ev.batch = o.batch
                      AND ev.position >= o.first_position
        GROUP BY o.stream_id, o.batch
    ),
    u AS (  -- usage whose last record came while the batch row existed
        SELECT o.stream_id, o.batch, sum(u.input_tokens) AS input_tokens,
               sum(u.output_tokens) AS output_tokens, sum(u.cost_usd) AS cost_usd
        FROM usage u JOIN o ON u.session_id = o.stream_id AND u.batch = o.batch
                           AND u.position > o.first_position
        WHERE u.session_id IN (SELECT id FROM touched) GROUP BY ALL
    ),
    e AS (
        SELECT o.*, b.* EXCLUDE (stream_id, batch), n.first_position AS next_position,
               n.at AS next_at,
               -- the end (session, run, idle) or the next prompt, whichever came first
               b.end_position IS NOT NULL AND (n.first_position IS NULL
                   OR b.end_position < n.first_position) AS by_end
        FROM o JOIN b USING (stream_id, batch)
        LEFT JOIN o n ON n.stream_id = o.stream_id AND n.batch = o.batch + 1 AND NOT n.recovery
    ),
    closed AS (  -- how an open (not recovery) batch was closed, absent a TurnEnded
        SELECT e.*,
               CASE WHEN e.recovery THEN NULL
                    WHEN e.by_end AND e.end_position < coalesce(e.first_turn_position,
                        e.end_position + 1) THEN 'end'
                    WHEN NOT e.by_end AND e.next_position IS NOT NULL
                        AND e.next_position < coalesce(e.first_turn_position,
                            e.next_position + 1) THEN 'next'
               END AS closer
        FROM e
    )
    SELECT c.stream_id AS session_id, c.batch, c.prompt,
           CASE WHEN c.recovery THEN 'recovery' ELSE c.prompt_kind END AS prompt_kind,
           CASE WHEN c.turn_position IS NOT NULL OR c.recovery OR c.closer IS NOT NULL
                THEN 'completed' ELSE 'open' END AS status,
           CASE WHEN c.recovery THEN c.first_activity_at ELSE c.at END AS started_at,
           CASE WHEN c.turn_position IS NOT NULL THEN c.turn_at
                WHEN c.recovery THEN c.measured_from
                WHEN c.closer = 'end' THEN c.end_at
                WHEN c.closer = 'next' THEN c.next_at END AS ended_at,
           CASE WHEN c.turn_position IS NOT NULL THEN c.turn_reason
                WHEN c.recovery THEN 'recovery'
                WHEN c.closer = 'end' THEN c.end_reason
                WHEN c.closer = 'next' THEN 'next_prompt' END AS end_reason,
           c.tool_calls + coalesce(c.attached_calls, 0) AS tool_call_count,
           c.tool_errors + coalesce(c.attached_errors, 0) AS tool_error_count,
           coalesce(u.input_tokens, 0) AS input_tokens,
           coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.cost_usd, 0) AS cost_usd,
           c.first_position,
           -- an idle BatchClosed that closed the batch is its last event
           CASE WHEN c.closer = 'end' AND c.end_kind = 'BatchClosed'
                THEN greatest(c.last_position, c.end_position)
                ELSE c.last_position END AS last_position
    FROM closed c LEFT JOIN u ON u.stream_id = c.stream_id AND u.batch = c.batch""",
    "DELETE FROM sessions WHERE id IN (SELECT id FROM touched)",
    f"""INSERT INTO sessions BY NAME
    WITH ends AS (  -- the events that set or clear the end (projections/sessions.py)
        SELECT * FROM {_EV} AND stream_type = 'Session'
            AND (kind IN ('Ended', 'RunEnded', 'TimedOut', 'Reopened')
                 OR (kind = 'CommandApplied' AND to_status IN {_ENDED_STATES}))
    ), last_set AS (  -- an end (or Reopened: none) that replaces whatever was before
        SELECT stream_id, max(position) AS position,
               arg_max_null(CASE kind WHEN 'Reopened' THEN NULL
                                      WHEN 'TimedOut' THEN coalesce(measured_from, {_AT})
                                      ELSE {_AT} END, position) AS at
        FROM ends WHERE kind <> 'CommandApplied' GROUP BY ALL
    ), ended AS (  -- a command into an ended state keeps an end, else its time is the end
        SELECT stream_id, coalesce(any_value(l.at),
                   arg_min({_AT}, e.position) FILTER (e.kind = 'CommandApplied'
                       AND e.position > coalesce(l.position, 0))) AS ended_at
        FROM ends e LEFT JOIN last_set l USING (stream_id) GROUP BY stream_id
    ), u AS (
        SELECT session_id, sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens,
               sum(cache_creation_input_tokens) AS cache_creation_input_tokens,
               sum(cache_read_input_tokens) AS cache_read_input_tokens,
               sum(cache_creation_1h_input_tokens) AS cache_creation_1h_input_tokens,
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
               arg_min(cwd, position) FILTER (kind IN ('Opened', 'CwdLearned') AND cwd IS NOT NULL) AS cwd,
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
               min(recorded_at) AS first_recorded_at, max(recorded_at) AS last_recorded_at,
               min(recorded_at) FILTER (kind NOT IN {_NOT_ACTIVITY})
                   AS first_activity_recorded_at,
               max(recorded_at) FILTER (kind NOT IN {_NOT_ACTIVITY})
                   AS last_activity_recorded_at,
               min(position) AS first_position, max(version) AS head_version,
               max(position) AS head_position
        FROM {_EV} AND stream_type = 'Session' GROUP BY stream_id
    ), typed AS (  -- no type of its own: the first linked call's that names one
        SELECT s.id, arg_min(c.subagent_type, greatest(l.position, c.position)) AS agent_type
        FROM s JOIN (SELECT stream_id, parent_tool_use_id, position FROM {_EV}
                     AND kind = 'LinkedToParent' AND parent_tool_use_id <> '') l
                 ON l.stream_id = s.id
        JOIN (SELECT stream_id, tool_use_id, subagent_type, position FROM {_SUBAGENT_CALLS}) c
          ON c.stream_id = s.parent_id AND c.tool_use_id = l.parent_tool_use_id
        WHERE s.agent_type IS NULL GROUP BY s.id
    )
    SELECT s.* REPLACE (coalesce(s.agent_type, typed.agent_type) AS agent_type),
           ended.ended_at, coalesce(u.input_tokens, 0) AS input_tokens,
           coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.cache_creation_input_tokens, 0) AS cache_creation_input_tokens,
           coalesce(u.cache_read_input_tokens, 0) AS cache_read_input_tokens,
           coalesce(u.cache_creation_1h_input_tokens, 0) AS cache_creation_1h_input_tokens,
           coalesce(u.cost_usd, 0) AS cost_usd, coalesce(u.unpriced_tokens, 0) AS unpriced_tokens
    FROM s LEFT JOIN u ON u.session_id = s.id LEFT JOIN ended ON ended.stream_id = s.id
    LEFT JOIN typed ON typed.id = s.id""",
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

    out: list[tuple[Any, ...]] = []
    for m in models:
        p = price_for(m)
        if p is None:
            out.append((m, False, *[None] * (len(PRICE_COLUMNS) - 2)))
            continue
        above = p.above if p.above_tokens is not None else None
        out.append((
            m, True, p.input, p.output, p.cache_read, p.cache_write, p.cache_write_1h,
            p.above_tokens if above else None,
            *((above.input, above.output, above.cache_read, above.cache_write,
               above.cache_write_1h)
              if above else (None,) * 5),
        ))
    return out


PRICE_COLUMNS = (
    "model", "priced", "input", "output", "cache_read", "cache_write", "cache_write_1h",
    "above_tokens", "above_input", "above_output", "above_cache_read", "above_cache_write",
    "above_cache_write_1h",
)
INSERT_PRICES = (
    "INSERT INTO model_prices (model, priced, input, output, cache_read, cache_write, "
    "cache_write_1h, above_tokens, above_input, above_output, above_cache_read, "
    "above_cache_write, above_cache_write_1h) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""Inserts :func:`price_rows` (one ``?`` per :data:`PRICE_COLUMNS`)."""
