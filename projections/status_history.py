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
        if isinstance(event, Session.Event):
            self.apply_all(rows, [(position, event)])

    def apply_all(self, rows: RowCache, batch: Batch) -> None:
        get, put = rows.get, rows.put
        add = rows.added["status_history"].append  # one new row per transition
        for position, event in batch:
            sid = str(event.originator_id)
            head = get("status_heads", (sid,))
            previous = head["status"] if head else None
            status = event.status.value
            if previous == status:
                continue
            add((sid, event.originator_version, position, previous, status, event.kind,
                 event_time(event)))
            put("status_heads", (sid,), {"session_id": sid, "status": status})
