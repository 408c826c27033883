"""The ledger's event store: eventsourcing's ``EventStore.put`` at a lower cost per event.

``EventStore.put`` maps each event, inserts the stored events and returns a
``Recording`` (the event and its ``Notification``) per event. Both are frozen
dataclasses whose ``__init__`` sets every field through ``object.__setattr__``; here
equal objects are built by filling their ``__dict__`` (what a bulk import spends per
event on bookkeeping, not on the stored bytes, which are the mapper's and unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import EventStore, Notification, Recording


class LedgerEventStore(EventStore[Any]):
    """:class:`EventStore` whose :meth:`put` builds its results without dataclass
    ``__init__`` calls (same recorder call, same objects)."""

    def put(self, domain_events: Sequence[Any], **kwargs: Any) -> list[Recording[Any]]:
        """Store ``domain_events`` in their aggregate sequences (as ``EventStore.put``)."""
        stored_events = list(map(self.mapper.to_stored_event, domain_events))
        notification_ids = self.recorder.insert_events(stored_events, **kwargs)
        if not notification_ids:
            return []
        assert len(notification_ids) == len(stored_events)
        new = object.__new__
        recordings: list[Recording[Any]] = []
        append = recordings.append
        for d, s, n_id in zip(domain_events, stored_events, notification_ids, strict=True):
            notification = new(Notification)
            notification.__dict__.update(s.__dict__, id=n_id)
            recording = new(Recording)
            recording.__dict__.update(domain_event=d, notification=notification)
            append(recording)
        return recordings
