"""The DuckDB files of the analytics read model: the writer's file, its lock, snapshots.

Layout under the data directory (see docs/analytics.md for why):

* ``analytics.duckdb`` — written by exactly one process at a time: whoever catches up
  holds an exclusive ``flock`` on ``analytics.lock`` while the file is open.
* ``analytics-snapshots/analytics-<generation>-<position>.duckdb`` — a copy of the
  writer's file published after each catch-up that changed it: moved the position, or
  replaced rows under a new generation (rebuild, re-pricing) (copied to a temporary name,
  then renamed into place). Readers open the newest one ``read_only``; they never open
  the writer's file, so a reader never blocks the writer and the writer never breaks
  a reader (a rename leaves an open snapshot's inode alive).

DDL: every time column is ``TIMESTAMP`` in UTC; tokens are counts; ``duration_ms``
milliseconds; ``cost_usd`` USD. The tracking position lives in the same file
(``analytics_tracking``), written in the same transaction as the rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRACKING_NAME = "analytics"
SNAPSHOT_DIR = "analytics-snapshots"
KEEP_SNAPSHOTS = 2
"""Snapshots kept: the newest and the one before (a reader may be opening it)."""

DDL = """
CREATE TABLE IF NOT EXISTS analytics_tracking (
    name VARCHAR PRIMARY KEY, position BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS analytics_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS events (
    position BIGINT NOT NULL,          -- notification log position
    stream_id UUID NOT NULL,           -- session id (or quarantine stream id)
    version INTEGER NOT NULL,          -- 1-based position in the stream
    stream_type VARCHAR NOT NULL,      -- Session | Quarantine
    kind VARCHAR NOT NULL,             -- event class name, e.g. ToolCallStarted
    event_key VARCHAR, agent VARCHAR, source_format VARCHAR, source_version VARCHAR,
    status VARCHAR, batch INTEGER,
    occurred_at TIMESTAMP,             -- source clock (UTC), when the source has one
    recorded_at TIMESTAMP,             -- ledger clock (UTC)
    digest VARCHAR,
    -- facts of the kinds that carry them (NULL otherwise)
    model VARCHAR, message_id VARCHAR,
    input_tokens BIGINT, output_tokens BIGINT,
    cache_creation_input_tokens BIGINT, cache_read_input_tokens BIGINT,
    cache_creation_1h_input_tokens BIGINT,  -- UsageRecorded v2 (NULL in a v1 row: 0)
    tool_use_id VARCHAR, tool_name VARCHAR, is_error BOOLEAN, error VARCHAR,
    duration_ms BIGINT, interrupted BOOLEAN,
    prompt_kind VARCHAR, prompt_text VARCHAR, reason VARCHAR,
    external_id VARCHAR, parent_id UUID, agent_type VARCHAR, cwd VARCHAR,
    parent_tool_use_id VARCHAR, cost_usd DOUBLE,  -- CostReported: the agent's own figure
    subagent_type VARCHAR,             -- ToolCallStarted: tool_input.subagent_type
    -- lifecycle: liveness jobs (BatchClosed, TimedOut, ActivitiesAttached), commands, runs
    measured_from TIMESTAMP, recovery BOOLEAN, tool_use_ids VARCHAR[], tool_errors INTEGER,
    first_activity_at TIMESTAMP, to_status VARCHAR, outcome VARCHAR
);
CREATE TABLE IF NOT EXISTS model_prices (
    model VARCHAR PRIMARY KEY,         -- the name as the usage records give it
    priced BOOLEAN NOT NULL,
    input DOUBLE, output DOUBLE, cache_read DOUBLE, cache_write DOUBLE,  -- USD / MTok
    cache_write_1h DOUBLE,             -- 1-hour cache write (cache_write: 5-minute)
    -- long-context rates: a request whose prompt (input + cache read + cache write
    -- tokens) exceeds above_tokens is charged at these, all of it (projections/pricing.py)
    above_tokens BIGINT, above_input DOUBLE, above_output DOUBLE,
    above_cache_read DOUBLE, above_cache_write DOUBLE, above_cache_write_1h DOUBLE
);
CREATE TABLE IF NOT EXISTS usage (
    session_id UUID NOT NULL, message_id VARCHAR NOT NULL, model VARCHAR,
    input_tokens BIGINT, output_tokens BIGINT,
    cache_creation_input_tokens BIGINT, cache_read_input_tokens BIGINT,
    cache_creation_1h_input_tokens BIGINT,  -- the 1-hour part of cache_creation_input_tokens
    cost_usd DOUBLE,                   -- NULL when the model has no price
    batch INTEGER, occurred_at TIMESTAMP, position BIGINT, records INTEGER
);
CREATE TABLE IF NOT EXISTS tool_calls (
    session_id UUID NOT NULL, tool_use_id VARCHAR NOT NULL, batch INTEGER,
    tool_name VARCHAR, status VARCHAR, is_error BOOLEAN, error VARCHAR,
    interrupted BOOLEAN, started_at TIMESTAMP, completed_at TIMESTAMP,
    duration_ms BIGINT, start_position BIGINT, end_position BIGINT
);
CREATE TABLE IF NOT EXISTS prompt_batches (
    session_id UUID NOT NULL, batch INTEGER NOT NULL, prompt VARCHAR, prompt_kind VARCHAR,
    status VARCHAR, started_at TIMESTAMP, ended_at TIMESTAMP, end_reason VARCHAR,
    tool_call_count INTEGER, tool_error_count INTEGER,
    input_tokens BIGINT, output_tokens BIGINT, cost_usd DOUBLE,
    first_position BIGINT, last_position BIGINT
);
CREATE TABLE IF NOT EXISTS sessions (
    id UUID NOT NULL, agent VARCHAR, external_id VARCHAR, parent_id UUID,
    parent_tool_use_id VARCHAR, agent_type VARCHAR, cwd VARCHAR, model VARCHAR,
    status VARCHAR, prompt_count INTEGER, batch_count INTEGER,
    tool_call_count INTEGER, tool_error_count INTEGER,
    input_tokens BIGINT, output_tokens BIGINT,
    cache_creation_input_tokens BIGINT, cache_read_input_tokens BIGINT,
    cache_creation_1h_input_tokens BIGINT,
    cost_usd DOUBLE, unpriced_tokens BIGINT, agent_cost_usd DOUBLE,
    event_count INTEGER, started_at TIMESTAMP, last_activity_at TIMESTAMP,
    ended_at TIMESTAMP, first_recorded_at TIMESTAMP, last_recorded_at TIMESTAMP,
    -- ledger times of the agent's first and latest activity (not Opened, Reopened or the
    -- ledger's own events): started_at / last_activity_at of a session with no source clock
    first_activity_recorded_at TIMESTAMP, last_activity_recorded_at TIMESTAMP,
    first_position BIGINT, head_version INTEGER, head_position BIGINT
);
"""

SCHEMA_VERSION = 6
"""Version of :data:`DDL` and of the SQL in ``extract.py`` (``analytics_meta``
``schema_version``); a file with another version is rebuilt (:func:`open_writer`).
1 (no ``schema_version`` row): before the lifecycle columns of ``events``; 2: before the
long-context rates of ``model_prices``; 3: before ``sessions.first/last_activity_recorded_at``;
4: before ``events.subagent_type`` (a child session's type from its parent's call); 5:
before the 1-hour cache writes (``cache_creation_1h_input_tokens``, ``cache_write_1h``)."""

READ_MODEL_TABLES = ("events", "usage", "tool_calls", "prompt_batches", "sessions")


def analytics_path(data_dir: Path) -> Path:
    """The writer's DuckDB file."""
    return Path(data_dir) / "analytics.duckdb"


def snapshot_dir(data_dir: Path) -> Path:
    return Path(data_dir) / SNAPSHOT_DIR


_SNAPSHOT_NAME = re.compile(r"^analytics-(?:(\d+)-)?(\d+)\.duckdb$")


def snapshots(data_dir: Path) -> list[tuple[int, Path]]:
    """Published snapshots as (position, path), oldest first: ordered by generation,
    then position (a rebuilt or re-priced model is newer at the same position). A name
    without a generation (``analytics-<position>.duckdb``, older versions) is the oldest."""
    found = []
    for p in snapshot_dir(data_dir).glob("analytics-*.duckdb"):
        if m := _SNAPSHOT_NAME.match(p.name):
            found.append(((int(m[1]) if m[1] else -1, int(m[2])), p))
    return [(key[1], p) for key, p in sorted(found)]


def _published_generation(data_dir: Path) -> int:
    """The highest generation among the published snapshots (0: none)."""
    best = 0
    for p in snapshot_dir(data_dir).glob("analytics-*.duckdb"):
        if (m := _SNAPSHOT_NAME.match(p.name)) and m[1]:
            best = max(best, int(m[1]))
    return best


def generation(con: Any) -> int:
    """The content generation of the writer's file behind ``con`` (``analytics_meta``)."""
    return int(_meta(con, "generation") or 0)


def next_generation(con: Any) -> int:
    """Give the file behind ``con`` a new generation (call in the transaction that
    changes its rows without moving its position, e.g. a re-pricing)."""
    new = generation(con) + 1
    con.execute("INSERT OR REPLACE INTO analytics_meta VALUES ('generation', ?)", [str(new)])
    return new


@contextlib.contextmanager
def writer_lock(data_dir: Path) -> Iterator[None]:
    """Exclusive inter-process lock for writing ``analytics.duckdb`` (blocks until free).

    ``flock`` is released by the kernel when the holder dies (even by SIGKILL), so a
    killed catch-up never leaves a stale lock behind.
    """
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(data_dir) / "analytics.lock", "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def open_writer(data_dir: Path, store: str | None = None, store_id: str | None = None) -> Any:
    """Open (creating) the writer's file with the schema. Call under :func:`writer_lock`.

    A file written with another :data:`SCHEMA_VERSION` (an older hookledger), or from
    another event store than the one named ``store`` (its URL form) whose own id
    (:mod:`ledger.store_id`) is ``store_id`` (None: it has none), is deleted first: the
    next catch-up replays this store's log into the current schema. Both are kept in
    ``analytics_meta``. A file that recorded an id belongs to the store with that id,
    whatever URL reaches it (a store without it, or with another, is another store:
    e.g. an ``events.db`` replaced in place); a file without one to the store of its URL
    form (two PostgreSQL schemas used with one data directory). ``store`` None: no check.
    """
    import duckdb

    con = duckdb.connect(str(analytics_path(data_dir)))
    known_id = _meta(con, "store_id")
    other_store = store is not None and (
        known_id != store_id if known_id is not None
        else _meta(con, "store") not in (None, store)
    )
    if other_store or (_meta(con, "schema_version") != str(SCHEMA_VERSION) and _has_tables(con)):
        con.close()
        remove_all(data_dir)
        con = duckdb.connect(str(analytics_path(data_dir)))
    con.execute(DDL)
    con.execute(
        "INSERT INTO analytics_tracking VALUES (?, 0) ON CONFLICT DO NOTHING", [TRACKING_NAME]
    )
    con.execute(
        "INSERT OR REPLACE INTO analytics_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
    )
    if store is not None:
        con.execute("INSERT OR REPLACE INTO analytics_meta VALUES ('store', ?)", [store])
    if store is not None and store_id is not None:
        con.execute("INSERT OR REPLACE INTO analytics_meta VALUES ('store_id', ?)", [store_id])
    if _meta(con, "generation") is None:  # a new file: newer than anything published
        con.execute(
            "INSERT INTO analytics_meta VALUES ('generation', ?)",
            [str(_published_generation(data_dir) + 1)],
        )
    return con


def _has_tables(con: Any) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()[0])


def _meta(con: Any, key: str) -> str | None:
    """A value of ``analytics_meta`` (None: no such key, or no such table yet)."""
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'analytics_meta'"
    ).fetchone()[0]
    if not found:
        return None
    row = con.execute("SELECT value FROM analytics_meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def publish(data_dir: Path, position: int, generation: int) -> Path:
    """Copy the (closed, checkpointed) writer's file to
    ``analytics-<generation>-<position>.duckdb``.

    The generation changes whenever the file's rows change without its position
    moving (a new file after a rebuild or schema upgrade, a re-pricing), so readers see
    that too; an unchanged file (same generation and position) is not copied again.

    Call under :func:`writer_lock` after closing the writer's connection. Keeps the
    newest :data:`KEEP_SNAPSHOTS` snapshots; older ones are unlinked (a reader that
    still has one open keeps reading it: the inode lives until it is closed).
    """
    target = snapshot_dir(data_dir) / f"analytics-{generation:06d}-{position:012d}.duckdb"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(analytics_path(data_dir), tmp)
        os.replace(tmp, target)
    for _, old in snapshots(data_dir)[:-KEEP_SNAPSHOTS]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return target


def remove_all(data_dir: Path) -> None:
    """Delete the writer's file (and its WAL). Call under :func:`writer_lock`."""
    for p in (analytics_path(data_dir), Path(str(analytics_path(data_dir)) + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
