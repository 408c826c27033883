"""Rejected input, kept whole with the reason: nothing observed is dropped silently.

One stream per source (``hook:claude-code``, or a transcript file's path), id
``uuid5(NAMESPACE, "quarantine:" + source)``. Each rejected line or request body is an
:class:`Quarantine.InputRejected` event whose key hashes the bytes and their location,
so re-importing the same bad file appends nothing.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import BaseAggregate, CanInitAggregate
from eventsourcing.utils import get_topic

from ledger.envelope import LedgerEvent, seal, start_stream
from ledger.observation import SESSION_NAMESPACE, Rejected
from ledger.privacy import redact_text

MAX_KEPT_BYTES = 16 * 1024 * 1024
"""Bytes of one rejected input kept verbatim; beyond this the size and sha256 remain."""


def quarantine_id(source: str) -> UUID:
    return uuid5(SESSION_NAMESPACE, f"quarantine:{source}")


class Quarantine(BaseAggregate[UUID]):
    """Stream of rejected inputs of one source."""

    class Event(LedgerEvent):
        pass

    class Opened(Event, CanInitAggregate[UUID]):
        originator_topic: str
        source: str

    class InputRejected(Event):
        """Input that could not be parsed. ``text`` is the input decoded as UTF-8 with
        invalid bytes escaped (``backslashreplace``); ``data_b64`` holds the exact bytes
        when they were not valid UTF-8. ``size`` in bytes, ``sha256`` of all bytes (after
        privacy redaction; of the bytes as received when the input was cut where it was
        received, e.g. a request body over the server's limit). ``truncated``: ``text``
        holds only the first bytes (at most 16 MiB)."""

        source: str
        location: str
        reason: str
        text: str
        data_b64: str | None = None
        size: int
        sha256: str
        truncated: bool = False

    def __init__(self, source: str) -> None:
        self.source = source
        self.head_digest = ""
        self.seen_keys: set[str] = set()

    @classmethod
    def open(cls, source: str, recorded_at: datetime) -> Quarantine:
        event = cls.Opened(
            originator_topic=get_topic(cls),
            originator_id=quarantine_id(source),
            originator_version=1,
            timestamp=recorded_at,
            event_key="opened",
            agent="hookledger",
            source_format="hookledger.quarantine",
            source=source,
        )
        return start_stream(event, Quarantine)

    def reject(self, rejected: Rejected, recorded_at: datetime) -> int:
        """Append the rejected input unless the same bytes at the same place are in."""
        key = rejected.key
        if key in self.seen_keys:
            return 0
        # Privacy applies to rejected input too: strip <private> spans and redact secrets
        # in the text (invalid UTF-8 survives via surrogateescape) before anything is stored;
        # it may be JSON whose tags are spelled with escapes.
        cleaned, redactions = redact_text(
            rejected.data.decode("utf-8", "surrogateescape"), json_text=True
        )
        data = cleaned.encode("utf-8", "surrogateescape") if redactions else rejected.data
        kept = data[:MAX_KEPT_BYTES]
        if rejected.size is None:
            size, sha256 = len(data), hashlib.sha256(data).hexdigest()
        else:  # cut where it was received: the whole input's size and digest
            size, sha256 = rejected.size, rejected.sha256
        try:
            text = kept.decode("utf-8")
            data_b64 = None
        except UnicodeDecodeError:
            text = kept.decode("utf-8", "backslashreplace")
            data_b64 = base64.b64encode(kept).decode("ascii")
        fields: dict[str, Any] = {
            "originator_id": self.id,
            "originator_version": self.version + 1,
            "timestamp": recorded_at,
            "event_key": key,
            "agent": rejected.agent,
            "source_format": rejected.source_format,
            "source": rejected.source,
            "location": rejected.location,
            "reason": rejected.reason,
            "text": text,
            "data_b64": data_b64,
            "size": size,
            "sha256": sha256,
            "truncated": size > len(kept),
            "redactions": [*rejected.redactions, *redactions],
        }
        event = self.InputRejected(**fields)
        event = seal(self.head_digest, event)
        event.mutate(self)
        self.pending_events.append(event)
        return 1

    def apply_event(self, event: LedgerEvent) -> None:
        self.seen_keys.add(event.event_key)
        self.head_digest = event.digest
