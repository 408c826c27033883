"""``status_history`` read model: every lifecycle transition with its cause and position."""

from __future__ import annotations

from typing import Any

from ledger.session import Session
from projections.base import Batch, Projection, event_time, session_events
from projections.rows import RowCache


class StatusHistoryProjection(Projection):
    name = "status_history"
    kinds = (Session.Event,)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        rows.prefetch("status_heads", [(str(e.originator_id),) for _, e in session_events(batch)])

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if not isinstance(event, Session.Event):
            return
        sid = str(event.originator_id)
        head = rows.get("status_heads", (sid,))
        previous = head["status"] if head else None
        if previous == event.status.value:
            return
        rows.put(
            "status_history",
            (sid, event.originator_version),
            {
                "session_id": sid,
                "version": event.originator_version,
                "position": position,
                "from_status": previous,
                "to_status": event.status.value,
                "cause": event.kind,
                "at": event_time(event),
            },
        )
        rows.put("status_heads", (sid,), {"session_id": sid, "status": event.status.value})
