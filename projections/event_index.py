"""``event_index`` read model: position, stream, version, kind, key and digest of every
event. Serves ``/v1/sessions/{id}/events`` positions, ``stats`` and, for ``verify``, the
anchors that reveal a cut tail or a deleted stream (a chain alone cannot)."""

from __future__ import annotations

from typing import Any

from projections.base import Batch, Projection, iso
from projections.rows import RowCache


class EventIndexProjection(Projection):
    name = "event_index"

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        self.apply_all(rows, [(position, event)])

    def apply_all(self, rows: RowCache, batch: Batch) -> None:
        add = rows.added["event_index"].append  # one new row per position
        for position, e in batch:
            add((
                position,
                str(e.originator_id),
                e.originator_version,
                type(e).__name__,
                e.event_key,
                e.agent,
                e.source_format,
                e.digest,
                iso(e.occurred_at),
                iso(e.timestamp),
            ))
