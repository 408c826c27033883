"""SQLAlchemy engine for the read models (SQLite file or PostgreSQL)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event


def make_engine(url: str, schema: str | None = None) -> Engine:
    """Engine for ``url``. SQLite: WAL, ``synchronous=NORMAL`` (read models are
    rebuildable), 30 s busy timeout. PostgreSQL: ``search_path`` set to ``schema``."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    connect_args = {"options": f"-csearch_path={schema}"} if schema else {}
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)
