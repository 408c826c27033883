"""Named analytics queries: the SQL the notebook, ``hookledger analytics`` and
``GET /v1/analytics/{query}`` share (all of it is here, nowhere else).

Every query takes two parameters: ``since`` (only rows from that UTC time on; a date
or an ISO-8601 time, None for all) and ``limit`` (rows, 1..10,000). Results are lists
of JSON-ready dicts: times ISO-8601 UTC strings, dates ``YYYY-MM-DD``, tokens counts,
durations ms (``*_ms``) or seconds (``*_s``), costs USD (``cost_usd``, computed from the
bundled price table; tokens of models without a price count as ``unpriced_tokens``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
import re
import uuid
from typing import Any

MAX_LIMIT = 10_000
_TOKENS = "input_tokens + output_tokens + cache_creation_input_tokens + cache_read_input_tokens"
_LAST_ACTIVITY = "coalesce(last_activity_at, last_activity_recorded_at, first_recorded_at)"
"""A session's last activity as ``GET /v1/sessions`` gives it (projections.schema.session_times):
the source's clock, else the ledger's of the agent's own activity."""


QUERIES: dict[str, tuple[str, str, int]] = {
    # name: (description, SQL with parameters $since and $limit, default limit)
    "cost-per-day": (
        "Cost (USD) and tokens per day (UTC, source clock) and model; last usage record per "
        "message id.",
        f"""
        WITH d AS (  -- aggregate on the DATE, format the few result rows after
            SELECT CAST(occurred_at AS DATE) AS d, model, count(*) AS responses,
                   sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                   sum(cache_creation_input_tokens) AS cache_creation_input_tokens,
                   sum(cache_read_input_tokens) AS cache_read_input_tokens,
                   sum(cache_creation_1h_input_tokens) AS cache_creation_1h_input_tokens,
                   sum(cost_usd) AS cost_usd,
                   sum({_TOKENS}) FILTER (cost_usd IS NULL) AS unpriced_tokens
            FROM usage
            WHERE $since IS NULL OR occurred_at >= $since
            GROUP BY ALL
        )
        SELECT strftime(d, '%Y-%m-%d') AS day, coalesce(model, '(none)') AS model, responses,
               input_tokens, output_tokens, cache_creation_input_tokens,
               cache_read_input_tokens, cache_creation_1h_input_tokens,
               round(coalesce(cost_usd, 0), 6) AS cost_usd,
               coalesce(unpriced_tokens, 0) AS unpriced_tokens
        FROM d
        ORDER BY day DESC, cost_usd DESC, model
        LIMIT $limit""",
        1000,
    ),
    "tool-usage": (
        "Tool calls per tool: count, and p50/p95/max duration (ms) of the timed ones.",
        """
        SELECT coalesce(tool_name, '(unknown)') AS tool_name, count(*) AS calls,
               count(duration_ms) AS timed_calls,
               round(quantile_cont(duration_ms, 0.5), 1) AS p50_ms,
               round(quantile_cont(duration_ms, 0.95), 1) AS p95_ms,
               max(duration_ms) AS max_ms
        FROM tool_calls
        WHERE $since IS NULL OR coalesce(started_at, completed_at) >= $since
        GROUP BY ALL
        ORDER BY calls DESC, tool_name
        LIMIT $limit""",
        100,
    ),
    "session-durations": (
        "Distribution of session durations (end, else last activity, minus start; source "
        "clock: an end after the last activity, e.g. an operator's command, does not "
        "lengthen it) in buckets, with each bucket's share of sessions. Sessions whose "
        "source gives no times of its own (stream-json, codex exec) are not counted.",
        """
        WITH b(bucket, lower_s, upper_s) AS (VALUES
            ('< 1 min', 0, 60), ('1-5 min', 60, 300), ('5-15 min', 300, 900),
            ('15-60 min', 900, 3600), ('1-4 h', 3600, 14400), ('>= 4 h', 14400, NULL)),
        d AS (
            -- ended_at may be the ledger's clock (a command into an ended state): never
            -- past the last activity, or a session terminated a year later lasted a year
            SELECT greatest(0, epoch(least(ended_at, last_activity_at) - started_at)) AS s
            FROM sessions
            WHERE started_at IS NOT NULL AND ($since IS NULL OR started_at >= $since)
        )
        SELECT bucket, lower_s, upper_s, count(d.s) AS sessions,
               round(count(d.s) / greatest(1, (SELECT count(*) FROM d)), 4) AS share,
               round(median(d.s), 1) AS median_s
        FROM b LEFT JOIN d ON d.s >= b.lower_s AND (b.upper_s IS NULL OR d.s < b.upper_s)
        GROUP BY ALL
        ORDER BY lower_s
        LIMIT $limit""",
        100,
    ),
    "error-rate": (
        "Error rate per tool: failed / finished calls (calls still open are not counted).",
        """
        SELECT coalesce(tool_name, '(unknown)') AS tool_name, count(*) AS calls,
               count(*) FILTER (status <> 'started') AS finished,
               count(*) FILTER (is_error) AS errors,
               round(count(*) FILTER (is_error)
                     / greatest(1, count(*) FILTER (status <> 'started')), 4) AS error_rate
        FROM tool_calls
        WHERE $since IS NULL OR coalesce(started_at, completed_at) >= $since
        GROUP BY ALL
        ORDER BY error_rate DESC, errors DESC, calls DESC, tool_name
        LIMIT $limit""",
        100,
    ),
    "busiest-projects": (
        "Projects (session working directory) by sessions, prompts and tool calls, with "
        "tokens and cost (USD); subagent runs counted apart.",
        f"""
        SELECT coalesce(cwd, '(unknown)') AS project,
               count(*) FILTER (parent_id IS NULL) AS sessions,
               count(*) FILTER (parent_id IS NOT NULL) AS subagent_runs,
               sum(prompt_count) AS prompts, sum(tool_call_count) AS tool_calls,
               sum({_TOKENS}) AS tokens, round(sum(cost_usd), 6) AS cost_usd,
               strftime(max({_LAST_ACTIVITY}), '%Y-%m-%dT%H:%M:%S.%gZ') AS last_activity_at
        FROM sessions
        WHERE $since IS NULL OR {_LAST_ACTIVITY} >= $since
        GROUP BY ALL
        ORDER BY sessions DESC, prompts DESC, tool_calls DESC, project
        LIMIT $limit""",
        100,
    ),
}


def named_queries() -> dict[str, str]:
    """``{name: description}`` of every named query."""
    return {name: q[0] for name, q in QUERIES.items()}


_SPACE_FOR_PLUS = re.compile(r"^(\d{4}-\d{2}-\d{2}T[\d:.,]+) (\d{2}(?::?\d{2}(?::?\d{2})?)?)$")


def parse_since(value: str | dt.datetime | dt.date | None) -> dt.datetime | None:
    """``since`` as a naive UTC datetime. Accepts ``2026-02-11``, ``2026-02-11T21:24:19Z``
    and offsets, also a ``+`` offset that a URL query decoded to a space
    (``2026-02-11T00:00:00 01:00``). Raises ValueError with the reason for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime(value.year, value.month, value.day)
    else:
        text = value.strip().replace("Z", "+00:00")
        # an unescaped '+' of an offset in a URL query arrives as a space
        text = _SPACE_FOR_PLUS.sub(r"\1+\2", text)
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"since: not an ISO-8601 date or time: {value!r}") from None
    if parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:  # e.g. 9999-12-31T23:00-05:00: its UTC instant is past 9999
            raise ValueError(f"since: out of range in UTC: {value!r}") from None
    return parsed


def run_query(
    con: Any, name: str, *, since: str | dt.datetime | dt.date | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Run the named query ``name`` on a DuckDB connection to the analytics model.

    Raises KeyError for an unknown name and ValueError for a bad ``since``/``limit``.
    """
    if name not in QUERIES:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(QUERIES)}")
    _, sql, default_limit = QUERIES[name]
    n = default_limit if limit is None else int(limit)
    if not 1 <= n <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, not {n}")
    cur = con.execute(sql, {"since": parse_since(since), "limit": n})
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, map(json_value, row), strict=True)) for row in cur.fetchall()]


def json_value(value: Any) -> Any:
    """A DuckDB value as JSON-ready Python, nested values (lists, structs, maps) too:
    times ISO-8601 (UTC with ``Z`` when naive), ``TIME`` ``HH:MM:SS[.ffffff]``, intervals
    seconds, ``BLOB`` base64, NaN and infinities None (JSON has no such numbers)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds") + ("Z" if value.tzinfo is None else "")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(json_value(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


# Python functions for notebooks: one per named query.
def cost_per_day(con: Any, **kw: Any) -> list[dict[str, Any]]:
    return run_query(con, "cost-per-day", **kw)


def tool_usage(con: Any, **kw: Any) -> list[dict[str, Any]]:
    return run_query(con, "tool-usage", **kw)


def session_durations(con: Any, **kw: Any) -> list[dict[str, Any]]:
    return run_query(con, "session-durations", **kw)


def error_rate(con: Any, **kw: Any) -> list[dict[str, Any]]:
    return run_query(con, "error-rate", **kw)


def busiest_projects(con: Any, **kw: Any) -> list[dict[str, Any]]:
    return run_query(con, "busiest-projects", **kw)
