"""What a projection is: a name, its tables, and how one event changes its rows."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

from sqlalchemy import Table

from ledger.session import Session
from projections.rows import RowCache

Batch = list[tuple[int, Any]]
"""(log position, domain event) pairs, in log order."""


class Companion(NamedTuple):
    """A database object beside a projection's tables that SQLAlchemy does not model
    (a full-text index): ``kind`` ``table``, ``index`` or ``column`` (a generated column
    of ``table``, which moves with its table and is ignored by the schema check), its
    ``name`` (with the rebuild suffix when it belongs to shadow tables) and the DDL
    creating it if missing."""

    kind: str
    name: str
    create: str
    table: str = ""

    def drop_sql(self) -> str:
        """DDL dropping it if it exists."""
        if self.kind == "column":
            return f'ALTER TABLE IF EXISTS "{self.table}" DROP COLUMN IF EXISTS "{self.name}"'
        return f'DROP {self.kind.upper()} IF EXISTS "{self.name}"'


class Projection:
    """Base class: subclasses set ``name`` (and ``kinds``) and implement :meth:`prefetch`
    and :meth:`apply`.

    ``apply`` must be deterministic in (position, event) so a rebuild gives identical rows.
    """

    name: ClassVar[str]
    kinds: ClassVar[tuple[type, ...] | None] = None
    """The event classes (with their subclasses) :meth:`apply` acts on; None: every
    event. The runner decodes and passes only these (``apply`` must ignore the others
    anyway); the tracking position still advances past the rest."""

    def __init__(self, tables: dict[str, Table]) -> None:
        self.tables = tables

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        """Load the rows the batch will touch (one SELECT per table)."""

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        raise NotImplementedError

    def apply_all(self, rows: RowCache, batch: Batch) -> None:
        """Apply a section's events in order; the runner passes only events of
        :attr:`kinds` (a projection may apply them in one loop of its own)."""
        apply = self.apply
        for position, event in batch:
            apply(rows, position, event)

    @classmethod
    def consumes(cls, event_class: type) -> bool:
        """Whether events of ``event_class`` are among :attr:`kinds`."""
        return cls.kinds is None or issubclass(event_class, cls.kinds)

    def flush(self, rows: RowCache) -> None:
        """Write the section's changes (in the runner's transaction)."""
        rows.flush()

    @classmethod
    def companions(cls, dialect: str, suffix: str = "") -> list[Companion]:
        """Objects to create beside the tables (``dialect``: ``sqlite`` or
        ``postgresql``); they are dropped, rebuilt and swapped in with them."""
        return []


def iso(dt: datetime | None) -> str | None:
    """UTC ISO-8601 with milliseconds and ``Z``; None stays None."""
    if dt is None:
        return None
    found = _ISO_BY_ID.get(id(dt))
    if found is not None and found[0] is dt:
        return found[1]
    text = _iso(dt)
    if len(_ISO_BY_ID) >= _ISO_IDS:
        _ISO_BY_ID.clear()
    _ISO_BY_ID[id(dt)] = (dt, text)  # the entry keeps dt alive: its id is not reused
    return text


_ISO_IDS = 32768
_ISO_BY_ID: dict[int, tuple[datetime, str]] = {}
"""The same datetime object is formatted by several projections (one event's
``timestamp`` by ``event_index``, ``sessions``, ``batches`` …): found by identity, which
costs far less than hashing an aware datetime. Up to :data:`_ISO_IDS` (two per event of
a few sections), then it starts again."""


@functools.lru_cache(maxsize=8192)
def _iso(dt: datetime) -> str:
    # Cached by value: all events of one write share their recorded_at, and a rebuild
    # formats every time again.
    if dt.utcoffset():  # not UTC (a naive time is taken as UTC)
        dt = dt.astimezone(UTC)
    return dt.isoformat(timespec="milliseconds")[:23] + "Z"


def event_time(event: Session.Event) -> str | None:
    """The source's clock when it has one, else the ledger's."""
    return iso(event.occurred_at or event.timestamp)


def session_events(batch: Batch) -> list[tuple[int, Session.Event]]:
    return [(p, e) for p, e in batch if isinstance(e, Session.Event)]
