"""Catch-up runner: applies the notification log to the read models, exactly once.

For each section of the log (up to ``SECTION`` notifications, decoded once) every
projection behind that position applies the events to its rows and advances its
tracking row **in the same transaction**. The tracking update is conditional on the
position it started from, so two runners (say the server and a CLI command) never
apply a section twice: the loser's transaction rolls back and it reloads positions.
A projection error stops the runner at the last committed position (never skips).

:meth:`ProjectionRunner.rebuild` fills fresh ``<table>__rebuild`` tables from
position 0 and swaps them in, in one transaction, once they are current.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, MetaData, Table, insert, select, text, update

from ledger.app import Ledger
from projections.base import Projection
from projections.batches import BatchesProjection
from projections.event_index import EventIndexProjection
from projections.plans import PlansProjection
from projections.rows import RowCache
from projections.schema import build_tables, tracking_table
from projections.sessions import SessionsProjection
from projections.status_history import StatusHistoryProjection
from projections.tool_calls import ToolCallsProjection

SECTION = 1000
PROJECTION_CLASSES: dict[str, type[Projection]] = {
    cls.name: cls
    for cls in (
        EventIndexProjection,
        SessionsProjection,
        BatchesProjection,
        ToolCallsProjection,
        StatusHistoryProjection,
        PlansProjection,
    )
}
REBUILD_SUFFIX = "__rebuild"


class TrackingConflict(RuntimeError):
    """Another runner advanced a projection first; this section was rolled back."""


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    position: int
    head: int

    @property
    def lag(self) -> int:
        return max(0, self.head - self.position)


class ReadModels:
    """The read-model database: engine, metadata and each projection's tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.metadata = MetaData()
        self.tracking = tracking_table(self.metadata)
        self.tables: dict[str, dict[str, Table]] = {
            name: build_tables(self.metadata, name) for name in PROJECTION_CLASSES
        }
        self.metadata.create_all(engine)

    def table(self, name: str) -> Table:
        for tables in self.tables.values():
            if name in tables:
                return tables[name]
        raise KeyError(name)


class ProjectionRunner:
    """Keeps the read models in step with the ledger's notification log."""

    def __init__(self, ledger: Ledger, models: ReadModels, names: Sequence[str] | None = None) -> None:
        self.ledger = ledger
        self.models = models
        chosen = list(names or PROJECTION_CLASSES)
        self.projections = [PROJECTION_CLASSES[n](models.tables[n]) for n in chosen]
        self._lock = threading.Lock()

    # -- status ---------------------------------------------------------------------

    def positions(self) -> dict[str, int]:
        with self.models.engine.connect() as conn:
            found = dict(conn.execute(select(self.models.tracking.c.name, self.models.tracking.c.position)).all())
        return {p.name: int(found.get(p.name, 0)) for p in self.projections}

    def status(self) -> list[ProjectionStatus]:
        head = self.ledger.max_position()
        return [ProjectionStatus(n, pos, head) for n, pos in self.positions().items()]

    # -- catching up ----------------------------------------------------------------

    def catch_up(self, stop: int | None = None, max_sections: int | None = None) -> int:
        """Apply everything in the log (up to ``stop``); returns events applied."""
        with self._lock:
            return _catch_up(self.ledger, self.models, self.projections, self.models.tracking, stop, max_sections)

    # -- rebuilding -----------------------------------------------------------------

    def rebuild(self, name: str) -> int:
        """Rebuild projection ``name`` from position 0 into fresh tables and swap them in."""
        cls = PROJECTION_CLASSES[name]
        md = MetaData()
        shadow = build_tables(md, name, REBUILD_SUFFIX)
        tracking = tracking_table(md)
        shadow_name = name + REBUILD_SUFFIX
        with self._lock:
            with self.models.engine.begin() as conn:
                for t in shadow.values():
                    t.drop(conn, checkfirst=True)
                    t.create(conn)
                conn.execute(tracking.delete().where(tracking.c.name == shadow_name))
            projection = cls(shadow)
            projection.name = shadow_name  # type: ignore[misc]
            applied = 0
            while True:
                applied += _catch_up(self.ledger, self.models, [projection], tracking, None, None)
                head = self.ledger.max_position()
                with self.models.engine.begin() as conn:
                    pos = conn.execute(
                        select(tracking.c.position).where(tracking.c.name == shadow_name)
                    ).scalar_one_or_none() or 0
                    if pos < head:
                        continue
                    live = self.models.tables[name]
                    for base, t in live.items():
                        conn.execute(text(f'DROP TABLE "{t.name}"'))
                        conn.execute(text(f'ALTER TABLE "{base}{REBUILD_SUFFIX}" RENAME TO "{t.name}"'))
                    conn.execute(tracking.delete().where(tracking.c.name == shadow_name))
                    _set_tracking(conn, tracking, name, pos)
                    return applied


def _catch_up(
    ledger: Ledger,
    models: ReadModels,
    projections: Sequence[Projection],
    tracking: Table,
    stop: int | None,
    max_sections: int | None,
) -> int:
    applied = 0
    sections = 0
    while max_sections is None or sections < max_sections:
        with models.engine.connect() as conn:
            found = dict(conn.execute(select(tracking.c.name, tracking.c.position)).all())
        positions = {p.name: int(found.get(p.name, 0)) for p in projections}
        start = min(positions.values())
        if stop is not None and start >= stop:
            break
        notifications = ledger.recorder.select_notifications(
            start=start, limit=SECTION, stop=stop, inclusive_of_start=False
        )
        if not notifications:
            break
        events = [(n.id, ledger.mapper.to_domain_event(n)) for n in notifications]
        last = notifications[-1].id
        try:
            with models.engine.begin() as conn:
                for projection in projections:
                    pos = positions[projection.name]
                    todo = [(p, e) for p, e in events if p > pos]
                    if not todo:
                        continue
                    rows = RowCache(conn, projection.tables)
                    projection.prefetch(rows, todo)
                    for p, e in todo:
                        projection.apply(rows, p, e)
                    rows.flush()
                    _advance(conn, tracking, projection.name, pos, last, projection.name in found)
                    applied += len(todo)
        except TrackingConflict:
            continue
        sections += 1
    return applied


def _advance(conn, tracking: Table, name: str, old: int, new: int, exists: bool) -> None:  # type: ignore[no-untyped-def]
    if exists:
        result = conn.execute(
            update(tracking).where(tracking.c.name == name, tracking.c.position == old).values(position=new)
        )
        if result.rowcount != 1:
            raise TrackingConflict(name)
    else:
        try:
            conn.execute(insert(tracking).values(name=name, position=new))
        except Exception as e:  # unique violation: another runner inserted first
            raise TrackingConflict(name) from e


def _set_tracking(conn, tracking: Table, name: str, position: int) -> None:  # type: ignore[no-untyped-def]
    conn.execute(tracking.delete().where(tracking.c.name == name))
    conn.execute(insert(tracking).values(name=name, position=position))
