"""Reading the notification log for projections: one section of rows, decoded once,
only the events some projection consumes.

A rebuild reads every row of the log, so this path skips what a projection never
looks at:

* the rows are read whole (no per-row SQL to cut the state) and the raw source record
  after the NUL byte (:data:`ledger.envelope.RAW_SEPARATOR`) is cut off in Python;
* an event whose class no projection consumes (:attr:`Projection.kinds`) is not decoded
  at all: its position is still part of the section, so tracking advances past it;
* an event is built from its JSON without validating it again
  (:class:`projections.event_decoder.EventDecoder`; a row that does not fit goes
  through pydantic), and its stream id is a :class:`StreamId` shared by the stream's
  events, whose ``str()`` (every projection's row key) is computed once.

Decoding gives the same event as :meth:`ledger.mapper.PydanticMapper.decode` with
``raw=False``; anything the fast path does not handle (an event class with upcasters,
JSON it rejects) goes through the mapper.

PostgreSQL text cannot hold a NUL character, which JSON strings can (``\\u0000``): for
read models there (``nul_free``), each NUL in an event's strings is read as U+FFFD, the
replacement character (the event itself keeps it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.utils import resolve_topic

from ledger.app import Ledger
from ledger.envelope import RAW_SEPARATOR
from projections.event_decoder import EventDecoder

_STREAM_IDS = 100_000
"""Stream ids kept per reader before its cache starts again."""
_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")
"""A ``\\u0000`` escape in JSON text (after an even run of backslashes, none escaped)."""


class StreamId(UUID):
    """A stream's UUID that computes its ``str()`` once (equal to, and hashed like, the
    plain :class:`~uuid.UUID`)."""

    __slots__ = ("_str",)

    def __init__(self, hex: str) -> None:
        super().__init__(hex)
        object.__setattr__(self, "_str", UUID.__str__(self))

    def __str__(self) -> str:
        return self._str  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[type[StreamId], tuple[str]]:
        return StreamId, (self._str,)


class Section(NamedTuple):
    """One read of the log: every position read (in order), the decoded events among
    them (those a projection consumes) and their classes."""

    positions: list[int]
    events: list[tuple[int, Any]]
    classes: set[type]

    @property
    def last(self) -> int:
        return self.positions[-1]


class LogReader:
    """Reads sections of ``ledger``'s log; ``wanted(event class)`` says which events to
    decode (None: all); ``nul_free``: NUL characters in strings are read as U+FFFD."""

    def __init__(
        self,
        ledger: Ledger,
        wanted: Callable[[type], bool] | None = None,
        *,
        nul_free: bool = False,
    ) -> None:
        self.ledger = ledger
        self.mapper = ledger.mapper
        self.wanted = wanted
        self.nul_free = nul_free
        self._classes: dict[str, tuple[type, bool, bool]] = {}  # topic -> (cls, wanted, fast)
        self._stream_ids: dict[str, StreamId] = {}
        self._decoder = EventDecoder()

    def read(self, after: int, limit: int, stop: int | None = None) -> Section:
        """Up to ``limit`` events after position ``after`` (up to ``stop``, inclusive)."""
        positions: list[int] = []
        events: list[tuple[int, Any]] = []
        decoded: set[type] = set()
        classes, stream_ids = self._classes, self._stream_ids
        decode = self._decoder.decode
        if len(stream_ids) > _STREAM_IDS:
            stream_ids.clear()
        for position, oid, version, topic, state in self._rows(after, limit, stop):
            positions.append(position)
            found = classes.get(topic)
            if found is None:
                found = self._class(topic)
            cls, wanted, fast = found
            if not wanted:
                continue
            sid = stream_ids.get(oid)
            if sid is None:
                sid = stream_ids[oid] = StreamId(oid)
            if self.nul_free:
                state = _without_nul(state.partition(RAW_SEPARATOR)[0])
            event = None
            if fast:
                event = decode(cls, state.partition(RAW_SEPARATOR)[0], sid, version)
            if event is None:  # pydantic decides (and raises its own error)
                event = self.mapper.decode(topic, state, sid, version, raw=False)
                event.__dict__["originator_id"] = sid  # the row's, shared by the stream
            fields = event.__dict__
            # the same instants with the C ``timezone.utc`` (the decoder's times have it
            # already; rows pydantic decoded, and times with an offset, do not): pydantic
            # gives every parsed time its own tzinfo object, which makes each
            # utcoffset(), hash and compare of it (iso() formats them several times per
            # event) several times dearer
            ts = fields["timestamp"]
            if ts.tzinfo is not None and ts.tzinfo is not UTC:
                fields["timestamp"] = ts.astimezone(UTC)
            ts = fields["occurred_at"]
            if ts is not None and ts.tzinfo is not None and ts.tzinfo is not UTC:
                fields["occurred_at"] = _utc_or_none(ts)
            events.append((position, event))
            decoded.add(cls)
        return Section(positions, events, decoded)

    def _class(self, topic: str) -> tuple[type, bool, bool]:
        cls = resolve_topic(topic)
        wanted = self.wanted is None or self.wanted(cls)
        fast = self._decoder.supports(cls)
        self._classes[topic] = found = (cls, wanted, fast)
        return found

    def _rows(
        self, after: int, limit: int, stop: int | None
    ) -> list[tuple[int, str, int, str, bytes]]:
        """``(position, stream id text, version, topic, stored bytes)`` rows."""
        recorder = self.ledger.recorder
        select_rows = getattr(recorder, "select_rows", None)  # SQLite: ledger.recorders
        if select_rows is not None:
            return select_rows(after, limit, stop, raw=True)  # type: ignore[no-any-return]
        return [
            (n.id, str(n.originator_id), n.originator_version, n.topic, n.state)
            for n in recorder.select_notifications(
                start=after, limit=limit, stop=stop, inclusive_of_start=False
            )
        ]


def _without_nul(head: bytes) -> bytes:
    """Stored JSON ``head`` with each ``\\u0000`` escape as ``\\ufffd``."""
    return _NUL.sub(rb"\1\\ufffd", head) if b"\\u0000" in head else head


def _utc_or_none(ts: datetime) -> datetime | None:
    """``ts`` in UTC; None when that instant is past year 9999 or before year 1 (a
    source time such as ``9999-12-31T23:59:59-01:00``, which stores written before
    2026-11-27 may hold: read as no source time, as sources now record it, instead of
    stopping every projection at it)."""
    try:
        return ts.astimezone(UTC)
    except OverflowError:
        return None
