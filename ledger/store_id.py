"""The event store's own identity: a random id kept inside the store.

Records kept beside a store in the data directory (export anchors) must name the store
they belong to, and the name must not depend on how the store is reached: one
PostgreSQL database is the same store whether its URL says ``localhost`` or
``127.0.0.1``, a trailing slash or none, through a proxy on another port. So the store
names itself: a UUID in the one-row table ``hookledger_store`` of the store's own
database (the SQLite file; the PostgreSQL schema, beside ``hookledger_events``). It is
created by the first :func:`store_id` (an export) and travels with the store (a copied
``events.db``, a ``pg_dump`` of the schema); two stores never share it.

:func:`read_store_id` only reads (``verify`` writes nothing): None for a store that has
not named itself yet.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.persistence import ApplicationRecorder

TABLE = "hookledger_store"


def read_store_id(recorder: ApplicationRecorder) -> str | None:
    """The store's id (a UUID string), or None when it has none yet. Raises whatever
    the store raises when it cannot be read."""
    datastore = recorder.datastore  # type: ignore[attr-defined]
    with datastore.transaction(commit=False) as c:
        if not _exists(c, datastore):
            return None
        c.execute(f"SELECT id FROM {_table(datastore)}")  # type: ignore[arg-type]
        row = c.fetchone()
    if row is None:
        return None
    return str(row["id"] if isinstance(row, dict) else row[0])


def store_id(recorder: ApplicationRecorder) -> str:
    """The store's id, created (a new random UUID) when it has none. Another process
    creating it at the same moment is harmless: both return the one that was kept.
    Raises whatever the store raises when it cannot be written."""
    found = read_store_id(recorder)
    if found is not None:
        return found
    datastore = recorder.datastore  # type: ignore[attr-defined]
    table = _table(datastore)
    try:
        with datastore.transaction(commit=True) as c:
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {table} ("  # type: ignore[arg-type]
                "singleton INTEGER PRIMARY KEY CHECK (singleton = 1), id TEXT NOT NULL)"
            )
            c.execute(  # type: ignore[arg-type]
                f"INSERT INTO {table} (singleton, id) VALUES (1, '{uuid.uuid4()}') "
                "ON CONFLICT (singleton) DO NOTHING"
            )
    except Exception:
        # PostgreSQL: a concurrent CREATE TABLE IF NOT EXISTS can fail on its catalogue
        # row; the other process created the table (and its id) meanwhile
        found = read_store_id(recorder)
        if found is None:
            raise
        return found
    found = read_store_id(recorder)
    assert found is not None
    return found


def _table(datastore: Any) -> Any:
    if hasattr(datastore, "schema"):  # PostgreSQL: the store's schema
        from psycopg.sql import Identifier

        return Identifier(datastore.schema, TABLE).as_string(None)
    return TABLE


def _exists(c: Any, datastore: Any) -> bool:
    if hasattr(datastore, "schema"):
        c.execute("SELECT to_regclass(%s) AS t", (f'"{datastore.schema}".{TABLE}',))
        row = c.fetchone()
        return (row["t"] if isinstance(row, dict) else row[0]) is not None
    c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,))
    return c.fetchone() is not None
