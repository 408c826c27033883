"""DuckDB analytics read model: SQL over every session, prompt batch, tool call and token.

Python API for notebooks::

    from projections.analytics import connect, cost_per_day
    con = connect(data_dir)          # catches up, then a read-only DuckDB connection
    con.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY 1").show()
    cost_per_day(con, since="2026-02-01")

Tables: ``events``, ``usage``, ``tool_calls``, ``prompt_batches``, ``sessions``,
``model_prices``, ``analytics_tracking`` (see :mod:`projections.analytics.store`).
How readers and the single writer share the files: docs/analytics.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from projections.analytics.queries import (
    QUERIES,
    busiest_projects,
    cost_per_day,
    error_rate,
    named_queries,
    run_query,
    session_durations,
    tool_usage,
)
from projections.analytics.runner import catch_up, rebuild
from projections.analytics.store import snapshots

__all__ = [
    "QUERIES",
    "busiest_projects",
    "catch_up",
    "connect",
    "cost_per_day",
    "error_rate",
    "named_queries",
    "open_snapshot",
    "rebuild",
    "run_query",
    "session_durations",
    "tool_usage",
]


def open_snapshot(data_dir: str | Path) -> Any:
    """A read-only DuckDB connection to the newest published snapshot.

    Raises FileNotFoundError when no catch-up has published one yet.
    """
    import duckdb

    for _ in range(3):  # a snapshot may be unlinked between listing and opening
        found = snapshots(Path(data_dir))
        if not found:
            break
        try:
            return duckdb.connect(str(found[-1][1]), read_only=True)
        except duckdb.IOException:
            if found[-1][1].exists():
                raise
    raise FileNotFoundError(f"no analytics snapshot under {data_dir}: catch up first")


def connect(data_dir: Any = None, *, catch_up_first: bool = True) -> Any:
    """A read-only DuckDB connection that is current with the ledger.

    ``data_dir``: a data directory (the event store is found as the CLI finds it,
    including ``HOOKLEDGER_DATABASE_URL`` for PostgreSQL) or a
    :class:`ledger.config.Settings`. Catches up (and publishes a snapshot) first unless
    ``catch_up_first`` is False.
    """
    from ledger.app import Ledger
    from ledger.config import Settings

    settings = data_dir if isinstance(data_dir, Settings) else Settings.from_env(data_dir)
    if catch_up_first:
        ledger = Ledger(settings.event_store_env())
        try:
            catch_up(ledger, settings.data_dir)
        finally:
            ledger.close()
    return open_snapshot(settings.data_dir)
