"""SQLAlchemy engine for the read models (SQLite file or PostgreSQL), and the lock that
keeps two rebuilds of one read-model database from running at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event, text

SQLITE_PAGE_SIZE = 65536
"""Page size (bytes) of a newly created read-model file (an existing one keeps its own):
a rebuild of all projections spends ~half the system time it did on 4 KiB pages (1.4 ->
0.8 s per 100k events) and runs 11-18 % faster (docs/benchmarks.md)."""


def make_engine(url: str, schema: str | None = None) -> Engine:
    """Engine for ``url``. SQLite: :data:`SQLITE_PAGE_SIZE` pages when new, WAL,
    ``synchronous=NORMAL`` (read models are rebuildable), 30 s busy timeout. PostgreSQL:
    ``search_path`` set to ``schema``."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # no-op once it has tables
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    connect_args = {"options": f"-csearch_path={schema}"} if schema else {}
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def rebuild_lock(engine: Engine) -> contextlib.AbstractContextManager[None]:
    """Hold the read-model database's rebuild lock (blocks until it is free), across
    processes: two rebuilds share the ``*__rebuild`` table names, so a second one would
    drop the first one's tables mid-way."""
    return _database_lock(engine, "rebuild")


def schema_lock(engine: Engine) -> contextlib.AbstractContextManager[None]:
    """Hold the read-model database's schema lock while creating or upgrading tables:
    two processes opening a new data directory at once (an import and a ``sessions``)
    would both find a table missing and both create it, and one would fail."""
    return _database_lock(engine, "schema")


@contextlib.contextmanager
def _database_lock(engine: Engine, purpose: str) -> Iterator[None]:
    """An exclusive lock named ``purpose`` on the read-model database, across processes.
    SQLite: ``flock`` on ``<database>.<purpose>.lock`` beside the file (nothing for an
    in-memory database; nothing where ``fcntl`` is missing). PostgreSQL: a session
    advisory lock keyed by the current schema and ``purpose``."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar()
            key = f"hookledger.{purpose}:{schema}"
            conn.execute(text("SELECT pg_advisory_lock(hashtext(:k))"), {"k": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"), {"k": key})
                conn.commit()
        return
    database = engine.url.database
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        fcntl = None  # type: ignore[assignment]
    if fcntl is None or not database or database == ":memory:":
        yield
        return
    with open(f"{database}.{purpose}.lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
