"""Export records: the stored events of the notification log, in log order, as exported.

An export record is one stored event with everything a verifier needs to recompute its
hash-chain link without the store (see :mod:`ledger.envelope`):

* ``position`` (log position), ``stream_id``, ``version``, ``kind`` (event class name),
  ``topic`` (the stored class topic), ``digest`` (the chain link stored in the event);
* ``canonical``: the exact bytes the digest was computed over — the event's JSON state
  without ``digest``, with ``kind``, sorted keys, no whitespace (UTF-8), so that
  ``digest == sha256(prev_digest + "\\n" + canonical)``;
* ``link``: the export's own chain over what the digest does not cover,
  ``sha256(prev_link + "\\n" + f"{position} {topic} {digest}")`` from ``""``, so a changed
  position or topic is pinned to its record too.

The canonical state is rebuilt from the stored state (no pydantic validation): its values
are the event's ``model_dump(mode="json")`` values, plus ``digest`` and, for
``class_version`` > 1, ``class_version`` — so both are taken out and the two ids are put
back from the store's columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import ApplicationRecorder, Mapper

SECTION = 1000
"""Notifications read from the store per query."""


class ExportError(RuntimeError):
    """The store cannot be exported as asked (e.g. a stored event does not decode)."""


@dataclass(frozen=True)
class ExportRecord:
    position: int
    stream_id: str
    version: int
    kind: str
    topic: str
    digest: str
    canonical: bytes
    link: str = ""


@dataclass(frozen=True)
class Filters:
    """Which events an export holds.

    ``sessions``: stream ids (ledger ids) to export; empty = every stream.
    ``since``: per stream, export from its first event recorded (ledger clock) at or after
    this time to the end of the stream, so each exported stream is a contiguous suffix
    whose chain verifies from the digest preceding it. None = from the first event.
    """

    sessions: tuple[str, ...] = ()
    since: datetime | None = None

    @property
    def partial(self) -> bool:
        return bool(self.sessions) or self.since is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": list(self.sessions),
            "since": self.since.isoformat() if self.since else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Filters:
        since = data.get("since")
        return cls(tuple(data.get("sessions") or ()), parse_time(since) if since else None)


def parse_time(value: str) -> datetime:
    """ISO-8601 date or date-time (``Z`` allowed); a naive value is taken as UTC.

    Raises ValueError for anything else."""
    dt = datetime.fromisoformat(value)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


def link(previous: str, position: int, topic: str, digest: str) -> str:
    return hashlib.sha256(f"{previous}\n{position} {topic} {digest}".encode()).hexdigest()


def chain(previous: str, canonical: bytes) -> str:
    """``sha256(previous + "\\n" + canonical)``: the digest a record must carry."""
    h = hashlib.sha256(previous.encode("ascii"))
    h.update(b"\n")
    h.update(canonical)
    return h.hexdigest()


def kind_of(topic: str) -> str:
    """``ledger.session:Session.Opened`` -> ``Opened``."""
    return topic.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


@dataclass
class StreamHead:
    """Per stream: ``prev_digest`` (the digest before the first exported event, ``""``
    from the start), first exported version, count, and the last exported event."""

    prev_digest: str
    first_version: int
    count: int = 0
    head_version: int = 0
    head_digest: str = ""
    head_position: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "prev_digest": self.prev_digest,
            "first_version": self.first_version,
            "count": self.count,
            "head_version": self.head_version,
            "head_digest": self.head_digest,
            "head_position": self.head_position,
        }


def state_of(mapper: Mapper[UUID], notification: Any) -> dict[str, Any]:
    """The stored JSON state of one notification, not validated (see
    :meth:`ledger.mapper.PydanticMapper.stored_state`)."""
    return mapper.stored_state(notification.state)  # type: ignore[attr-defined, no-any-return]


def select(
    recorder: ApplicationRecorder,
    mapper: Mapper[UUID],
    filters: Filters,
    heads: dict[str, StreamHead],
    stop: int,
) -> Iterator[ExportRecord]:
    """Yield the export records of positions ``1..stop`` that ``filters`` select, in log
    order, with ``link`` set; fill ``heads`` (per exported stream) as it goes.

    Raises ExportError when a selected stored event cannot be decoded.
    """
    wanted = set(filters.sessions)
    last_digest: dict[str, str] = {}  # every stream's digest so far, for prev_digest
    previous_link = ""
    start = 0
    while start < stop:
        section = recorder.select_notifications(
            start=start, limit=SECTION, stop=stop, inclusive_of_start=False
        )
        if not section:
            return
        for n in section:
            stream = str(n.originator_id)
            if wanted and stream not in wanted:
                continue
            try:
                state = state_of(mapper, n)
                digest = state.pop("digest")
            except Exception as e:
                raise ExportError(
                    f"stored event at position {n.id} (stream {stream} v{n.originator_version}) "
                    f"cannot be decoded ({e.__class__.__name__}: {e}); run `hookledger verify`"
                ) from e
            head = heads.get(stream)
            if head is None and filters.since is not None:
                recorded = state.get("timestamp")
                if recorded is None or parse_time(recorded) < filters.since:
                    last_digest[stream] = digest
                    continue
            state.pop("class_version", None)
            kind = kind_of(n.topic)
            canonical = orjson.dumps(
                {**state, "originator_id": stream, "originator_version": n.originator_version,
                 "kind": kind},
                option=orjson.OPT_SORT_KEYS,
            )
            if head is None:
                head = heads[stream] = StreamHead(last_digest.pop(stream, ""), n.originator_version)
            head.count += 1
            head.head_version, head.head_digest, head.head_position = (
                n.originator_version, digest, n.id
            )
            previous_link = link(previous_link, n.id, n.topic, digest)
            yield ExportRecord(
                n.id, stream, n.originator_version, kind, n.topic, digest, canonical, previous_link
            )
        start = section[-1].id
