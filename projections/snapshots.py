"""Read-model rows for many sessions / prompt batches at once (used by the SSE stream).

Shapes: the same dicts as :func:`projections.queries.list_sessions` (sessions) and the
``batches`` entries of :func:`projections.queries.get_session` (prompt batches).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select, tuple_

from projections.queries import _session_columns
from projections.runner import ReadModels


def session_rows(models: ReadModels, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{session id: session row}`` for the ids that have a row (others are left out)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    t = models.table("sessions")
    with models.engine.connect() as conn:
        rows = conn.execute(select(*_session_columns(t)).where(t.c.id.in_(wanted))).mappings()
        return {r["id"]: _plain(r) for r in rows}


def batch_rows(
    models: ReadModels, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """``{(session id, batch): prompt batch row}`` for the keys that have a row."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    b = models.table("prompt_batches")
    with models.engine.connect() as conn:
        key = tuple_(b.c.session_id, b.c.batch)
        rows = conn.execute(select(b).where(key.in_(wanted))).mappings()
        return {(r["session_id"], r["batch"]): _plain(r) for r in rows}


def _plain(row: Any) -> dict[str, Any]:
    """A row as a dict with plain ``str`` keys (SQLAlchemy labels are ``quoted_name``)."""
    return {str(k): v for k, v in row.items()}


def first_position(models: ReadModels, session_id: str) -> int | None:
    """Log position of the session's first event (``event_index``), None when unknown."""
    ei = models.table("event_index")
    with models.engine.connect() as conn:
        found = conn.execute(
            select(func.min(ei.c.position)).where(ei.c.stream_id == session_id)
        ).scalar_one_or_none()
    return int(found) if found is not None else None
