"""``event_index`` read model: position, stream, version, kind, key and digest of every
event. Serves ``/v1/sessions/{id}/events`` positions, ``stats`` and, for ``verify``, the
anchors that reveal a cut tail or a deleted stream (a chain alone cannot)."""

from __future__ import annotations

from typing import Any

from projections.base import Projection, iso
from projections.rows import RowCache


class EventIndexProjection(Projection):
    name = "event_index"

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        rows.put(
            "event_index",
            (position,),
            {
                "position": position,
                "stream_id": str(event.originator_id),
                "version": event.originator_version,
                "kind": type(event).__name__,
                "event_key": event.event_key,
                "agent": event.agent,
                "source_format": event.source_format,
                "digest": event.digest,
                "occurred_at": iso(event.occurred_at),
                "recorded_at": iso(event.timestamp),
            },
        )
