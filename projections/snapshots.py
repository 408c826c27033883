"""Read-model rows for many sessions / prompt batches at once (used by the SSE stream).

Shapes: the same dicts as :func:`projections.queries.list_sessions` (sessions) and the
``batches`` entries of :func:`projections.queries.get_session` (prompt batches).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, or_, select, tuple_

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


def next_position(
    models: ReadModels, session_id: str, ref: str | None, children: bool, after: int
) -> tuple[int | None, int]:
    """Where a stream filtered on session ``session_id`` finds its next message after
    log position ``after``: (the position of the first later event of that session, of
    a session whose external id is ``ref`` or, with ``children``, of a session whose
    parent it is; None when there is none), and the position up to which the read
    models (``event_index``, ``sessions``) know the log, so the answer holds only up to it."""
    ei, s, tracking = models.table("event_index"), models.table("sessions"), models.tracking
    matches = [s.c.id == session_id, *([s.c.external_id == ref] if ref else []),
               *([s.c.parent_id == session_id] if children else [])]
    streams = select(s.c.id).where(or_(*matches))
    with models.engine.connect() as conn:
        known = dict(conn.execute(select(tracking.c.name, tracking.c.position).where(
            tracking.c.name.in_(("event_index", "sessions")))).all())
        found = conn.execute(select(func.min(ei.c.position)).where(
            or_(ei.c.stream_id == session_id, ei.c.stream_id.in_(streams)), ei.c.position > after
        )).scalar_one_or_none()
    upto = min(known.get("event_index", 0), known.get("sessions", 0))
    return (int(found) if found is not None else None), int(upto)
