"""``hookledger verify``: recompute every hash chain and check it against anchors.

Checks, in one pass over the notification log (log order):

1. every stored event decodes (a flipped byte usually breaks JSON or validation);
2. each stream's versions run 1, 2, 3, … with no gap or reordering;
3. each event's ``digest`` equals ``sha256(previous digest + canonical event)`` (an
   event stored at an earlier class version: over the fields it was stored with, which
   its writer hashed, not the upcast event's), and
   its stored bytes are exactly the event's own encoding
   (:func:`ledger.envelope.stored_bytes`): an edit that decodes to the same event (a
   duplicate key, which readers resolve differently, a letter's case in a time, an id
   in the JSON that the row's columns override) changes what some reader sees, and no
   digest covers it;
4. anchors kept outside the streams still match: every (position, stream, version,
   digest) the projections have recorded (``event_index``) must still be in the store
   unchanged. This is what reveals a deleted last event or a whole deleted stream,
   which no chain can show by itself;
5. the log's order against the link chains of earlier exports (:class:`LinkAnchor`):
   the chain over (position, topic, digest) of the rows an export held, recomputed over
   the store's rows up to the export's last position, must end where the export's did.
   This is what reveals events of different streams swapped (or moved) in the log,
   which keeps every stream's versions in order, when no per-position anchor is left;
6. no stored row lies outside the log (a position of 0 or less, which the log never
   reads but loading its stream does).

The result names the first problem of each stream with its log position.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import ApplicationRecorder, Mapper

from ledger.envelope import RAW_SEPARATOR, chain_digest, stored_bytes, stored_chain_digest
from ledger.exports.records import Filters, link

SECTION = 1000


@dataclass(frozen=True)
class Anchor:
    position: int
    stream_id: str
    version: int
    digest: str


@dataclass(frozen=True)
class LinkAnchor:
    """An export's link chain head (docs/exports.md, ``link_rule``): ``head`` is the
    ``link`` of its last row, at log position ``position``, over the rows ``filters``
    selected. ``source`` names where it was kept (the anchor file's name), ``export``
    the export's directory as written (None: unknown)."""

    position: int
    head: str
    source: str
    filters: Filters = field(default_factory=Filters)
    export: str | None = None


@dataclass
class Problem:
    stream_id: str
    position: int | None
    version: int | None
    message: str
    link: LinkAnchor | None = None
    """Set for a problem of the log's order (a link chain that ends elsewhere): then
    ``position`` is the first position known to differ (None: somewhere up to
    ``link.position``), ``stream_id``/``version`` the store's event there, if known."""

    def __str__(self) -> str:
        where = f"position {self.position}" if self.position is not None else "position ?"
        if self.link is not None:
            if self.position is None:
                return f"log up to position {self.link.position}: {self.message}"
            event = f" (stream {self.stream_id} v{self.version})" if self.stream_id else ""
            return f"log at position {self.position}{event}: {self.message}"
        return f"stream {self.stream_id} v{self.version} at {where}: {self.message}"


@dataclass
class VerifyReport:
    events: int = 0
    streams: int = 0
    anchors: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(
    recorder: ApplicationRecorder,
    mapper: Mapper[UUID],
    anchors: Iterable[Anchor] = (),
    links: Iterable[LinkAnchor] = (),
) -> VerifyReport:
    """Verify all chains in ``recorder``, the given anchors (sorted by position) and the
    link chains of ``links`` (any order)."""
    report = VerifyReport()
    chains = _LinkChains(links, report)
    heads: dict[str, tuple[int, str]] = {}
    broken: set[str] = set()
    anchor_iter = iter(anchors)
    anchor = next(anchor_iter, None)

    def problem(stream: str, position: int | None, version: int | None, message: str) -> None:
        if stream not in broken:
            broken.add(stream)
            report.problems.append(Problem(stream, position, version, message))

    for n in _notifications(recorder):
        report.events += 1
        stream = str(n.originator_id)
        chains.check(n.id - 1)
        while anchor is not None and anchor.position < n.id:
            report.anchors += 1
            problem(
                anchor.stream_id,
                anchor.position,
                anchor.version,
                "event is missing from the store (deleted, or the stream's tail was cut)",
            )
            anchor = next(anchor_iter, None)
        try:
            event = mapper.to_domain_event(n)
            digest = event.digest
        except Exception as e:
            event, digest = None, None
            problem(stream, n.id, n.originator_version, f"stored event cannot be decoded ({e.__class__.__name__})")
        while anchor is not None and anchor.position == n.id:  # several may share one
            report.anchors += 1
            if (anchor.stream_id, anchor.version, anchor.digest) != (stream, n.originator_version, digest):
                problem(
                    stream,
                    n.id,
                    n.originator_version,
                    f"differs from its anchor (expected stream {anchor.stream_id} v{anchor.version} "
                    f"digest {anchor.digest[:12]}…)",
                )
            anchor = next(anchor_iter, None)
        previous_version, previous_digest = heads.get(stream, (0, ""))
        if stream not in heads:
            report.streams += 1
        if n.originator_version != previous_version + 1:
            problem(
                stream,
                n.id,
                n.originator_version,
                f"expected version {previous_version + 1}: an event was deleted or reordered",
            )
        elif event is not None and _digest(previous_digest, event, bytes(n.state)) != digest:
            problem(stream, n.id, n.originator_version, "digest mismatch: the event was altered or reordered")
        elif event is not None and not _stored_as_encoded(event, bytes(n.state)):
            problem(
                stream, n.id, n.originator_version,
                "stored bytes differ from the event's own encoding: edited in place "
                "(e.g. a duplicate key, or an id in the JSON other than the row's)",
            )
        heads[stream] = (n.originator_version, digest or "")
        chains.add(n.id, stream, n.topic, digest, getattr(event, "timestamp", None))
        chains.check(n.id)
    chains.check(None)
    for a in [anchor, *anchor_iter] if anchor is not None else []:
        report.anchors += 1
        problem(a.stream_id, a.position, a.version, "event is missing from the store (deleted, or the log's tail was cut)")
    for stream, version, position in _rows_outside_log(recorder):
        report.problems.append(Problem(
            stream, position, version,
            "stored row outside the log (position 0 or less): inserted behind the log's back",
        ))
    return report


class _LinkChains:
    """The link chain of each filter set of ``links``, recomputed over the log's rows as
    :func:`ledger.exports.records.select` chose them, each checked at its anchors'
    positions; the first anchor of a chain that differs is a problem (the later ones of
    that chain differ as a consequence). A chain is followed only while it has anchors
    left to check, and for a session export only over its sessions' rows."""

    def __init__(self, links: Iterable[LinkAnchor], report: VerifyReport) -> None:
        self.report = report
        self.pending = deque(sorted(links, key=lambda a: a.position))
        self.left = Counter(a.filters for a in self.pending)
        self.chains: dict[Filters, str | None] = dict.fromkeys(self.left, "")
        self.started: dict[Filters, set[str]] = {f: set() for f in self.chains}
        self.every_stream = [f for f in self.chains if not f.sessions]
        self.by_stream: dict[str, list[Filters]] = {}
        for f in self.chains:
            for stream in f.sessions:
                self.by_stream.setdefault(stream, []).append(f)

    def add(self, position: int, stream: str, topic: str, digest: str | None,
            recorded: datetime | None) -> None:
        for filters in (*self.every_stream, *self.by_stream.get(stream, ())):
            if filters.since is not None and stream not in self.started[filters]:
                if recorded is None or recorded < filters.since:
                    continue
                self.started[filters].add(stream)
            previous = self.chains[filters]
            # an undecodable event (already a problem) leaves the chain unknown
            self.chains[filters] = (
                None if previous is None or digest is None else link(previous, position, topic, digest)
            )

    def check(self, upto: int | None) -> None:
        """Check the anchors at positions up to ``upto`` (None: all that are left)."""
        while self.pending and (upto is None or self.pending[0].position <= upto):
            a = self.pending.popleft()
            self.report.anchors += 1
            self.left[a.filters] -= 1
            got = self.chains[a.filters]
            if got is not None and got != a.head and self.left[a.filters] >= 0:
                self.left[a.filters] = -1  # the chain's later anchors are not checked
                self.report.problems.append(Problem(
                    "", None, None,
                    f"the log differs from what export anchor {a.source} recorded: its link "
                    f"chain (position, topic and digest of each exported event) ends in "
                    f"{a.head[:12]}…, the store's events give {got[:12]}…: events were "
                    f"swapped, moved, inserted or re-topiced at or before position {a.position}",
                    a,
                ))
            if self.left[a.filters] <= 0:
                self._retire(a.filters)

    def _retire(self, filters: Filters) -> None:
        """Stop following the chain of ``filters`` (nothing left to check with it)."""
        for group in (self.every_stream, *(self.by_stream.get(s, []) for s in filters.sessions)):
            if filters in group:
                group.remove(filters)


def _earlier_version(event: object, state: bytes) -> bool:
    """Whether ``event`` was stored at a class version below its class's (its row lacks
    ``"class_version":N`` of the current version N > 1) and read through upcasters."""
    version = getattr(type(event), "class_version", 1)
    head = state.partition(RAW_SEPARATOR)[0]
    return version > 1 and f'"class_version":{version}'.encode() not in head


def _digest(previous: str, event: Any, state: bytes) -> str:
    """The digest ``event`` (stored as ``state``) must carry after ``previous``: over the
    event, or, stored at an earlier class version, over the fields stored (and hashed)
    then — the upcast event has fields its writer never hashed."""
    if _earlier_version(event, state):
        try:
            return stored_chain_digest(
                previous, state, type(event).__name__, str(event.originator_id),
                event.originator_version,
            )
        except ValueError:  # includes UnicodeDecodeError: a raw record not UTF-8
            return ""
    return chain_digest(previous, event)


def _stored_as_encoded(event: object, state: bytes) -> bool:
    """Whether ``state`` is exactly what the ledger stores for ``event``. An event
    stored at an earlier class version (upcast on reading) cannot be re-encoded as it
    was then: its bytes must instead be the ledger's plain encoding of a JSON object
    (no duplicate key, no whitespace) each of whose values is the event's own."""
    if _earlier_version(event, state):
        return _stored_as_earlier_version(event, state, type(event).class_version)  # type: ignore[attr-defined]
    return stored_bytes(event) == state  # type: ignore[arg-type]


def _stored_as_earlier_version(event: object, state: bytes, version: int) -> bool:
    """Whether ``state`` can be the event stored at a class version below ``version``:
    without this, taking ``class_version`` out of a current row would exempt it from
    the byte-for-byte check (and let a duplicate key through)."""
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            raise ValueError("duplicate key")
        return found

    head, separator, tail = state.partition(RAW_SEPARATOR)
    try:
        stored = json.loads(head, object_pairs_hook=no_duplicates)
        if not isinstance(stored, dict) or orjson.dumps(stored) != head:
            return False
        if separator:
            stored["raw"] = tail.decode("utf-8")
    except ValueError:  # includes UnicodeDecodeError
        return False
    own_head, own_separator, own_tail = stored_bytes(event).partition(RAW_SEPARATOR)  # type: ignore[arg-type]
    own = orjson.loads(own_head)
    if own_separator:
        own["raw"] = own_tail.decode("utf-8")
    earlier = stored.pop("class_version", 1)
    if not isinstance(earlier, int) or isinstance(earlier, bool) or not 1 <= earlier < version:
        return False
    return all(key in own and own[key] == value for key, value in stored.items())


def _rows_outside_log(recorder: ApplicationRecorder) -> list[tuple[str, int, int]]:
    """(stream, version, position) of every stored row at a position of 0 or less."""
    table: str = recorder.events_table_name  # type: ignore[attr-defined]
    datastore = recorder.datastore  # type: ignore[attr-defined]
    sql: object
    if hasattr(datastore, "schema"):  # PostgreSQL: the table lives in the store's schema
        from psycopg.sql import SQL, Identifier

        sql = SQL(
            "SELECT originator_id, originator_version, notification_id FROM {}.{} "
            "WHERE notification_id <= 0"
        ).format(Identifier(datastore.schema), Identifier(table))
    else:
        sql = f"SELECT originator_id, originator_version, rowid FROM {table} WHERE rowid <= 0"
    with datastore.transaction(commit=False) as c:
        c.execute(sql)
        rows = c.fetchall()
    found = [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]  # PG: dict rows
    return [(str(_uuid(r[0])), int(r[1]), int(r[2])) for r in found]


def _uuid(value: object) -> object:
    try:
        return UUID(str(value))
    except ValueError:
        return value


def _notifications(recorder: ApplicationRecorder) -> Iterator[object]:
    start = 0
    while True:
        section = recorder.select_notifications(start=start, limit=SECTION, inclusive_of_start=False)
        if not section:
            return
        yield from section
        start = section[-1].id
