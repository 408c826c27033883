"""Catch-up runner: applies the notification log to the read models, exactly once.

For each section of the log (up to ``SECTION`` notifications, read once; only the
events some projection consumes are decoded, see :mod:`projections.decode`) every
projection behind that position applies its events (its :attr:`Projection.kinds`) to
its rows and advances its tracking row **in the same transaction**. The tracking
update is conditional on the position it started from, so two runners (say the server
and a CLI command) never apply a section twice: the loser's transaction rolls back and
it reloads positions.
A projection error stops the runner at the last committed position (never skips).

:meth:`ProjectionRunner.rebuild` fills fresh ``<table>__rebuild`` tables from
position 0 and swaps them in, in one transaction, once they are current.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, MetaData, Table, insert, inspect, select, text, update

from ledger.app import Ledger
from ledger.gcpause import gc_paused
from projections.base import Companion, Projection
from projections.batches import BatchesProjection
from projections.decode import LogReader, Section
from projections.event_index import EventIndexProjection
from projections.plans import PlansProjection
from projections.rows import RowCache
from projections.schema import build_tables, tracking_table
from projections.search import SearchProjection
from projections.sessions import SessionsProjection
from projections.status_history import StatusHistoryProjection
from projections.store import rebuild_lock, schema_lock
from projections.summaries import SummariesProjection
from projections.tool_calls import ToolCallsProjection
from projections.upgrade import reset_outdated

SECTION = 5000
PROJECTION_CLASSES: dict[str, type[Projection]] = {
    cls.name: cls
    for cls in (
        EventIndexProjection,
        SessionsProjection,
        BatchesProjection,
        ToolCallsProjection,
        StatusHistoryProjection,
        PlansProjection,
        SummariesProjection,
        SearchProjection,
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
        with schema_lock(engine):  # another process may be creating them right now
            before = set(inspect(engine).get_table_names())
            # only the missing ones: create_all would ask the catalogue about each table
            missing = [t for t in self.metadata.sorted_tables if t.name not in before]
            if missing:
                self.metadata.create_all(engine, tables=missing)
            generated: dict[str, set[str]] = {}  # table -> columns its companions add
            for cls in PROJECTION_CLASSES.values():
                for c in cls.companions(engine.dialect.name):
                    if c.kind == "column":
                        generated.setdefault(c.table, set()).add(c.name)
            outdated = reset_outdated(  # columns changed: rebuild
                engine, self.tables, self.tracking,
                ignore=generated,
                on_drop=lambda conn, name: _drop_companions(conn, name, ""),
                created={t.name for own in self.tables.values() for t in own.values()} - before,
            )
            if outdated:
                self.metadata.create_all(engine)
            with engine.begin() as conn:
                for name in PROJECTION_CLASSES:
                    _create_companions(conn, name, "")

    def table(self, name: str) -> Table:
        for tables in self.tables.values():
            if name in tables:
                return tables[name]
        raise KeyError(name)


class ProjectionRunner:
    """Keeps the read models in step with the ledger's notification log."""

    def __init__(
        self,
        ledger: Ledger,
        models: ReadModels,
        names: Sequence[str] | None = None,
        *,
        read_ahead: bool = False,
    ) -> None:
        self.ledger = ledger
        self.models = models
        chosen = list(names or PROJECTION_CLASSES)
        self.projections = [PROJECTION_CLASSES[n](models.tables[n]) for n in chosen]
        self._lock = threading.Lock()
        self.read_ahead = read_ahead
        """Read and decode the next full section in a second thread while one is
        applied. Off by default: measured on both backends on 2 cores it gave no wall
        time back and cost CPU (SQLite: every row the reader steps through and every
        row the writer upserts hands the GIL between the threads; rebuild of all
        projections 13.5k vs 16.2k events/s, system 1.10 vs 0.37 s per 100k events;
        local PostgreSQL 6.2k vs 6.7k; docs/benchmarks.md, "Read-ahead"). Kept as an
        option (``benchmarks/read_ahead.py`` measures both) for a log read over a slow
        link, which was not measured."""
        self.delegate: Callable[[int | None], int | None] | None = None
        """When set (e.g. by :class:`api.projection_process.ProjectionProcess`), a
        ``catch_up(stop)`` without ``max_sections`` calls ``delegate(stop)`` first: it
        waits for another process to apply the log up to ``stop`` and returns events
        applied here (0), or None to let this runner catch up itself."""

    # -- status ---------------------------------------------------------------------

    def positions(self) -> dict[str, int]:
        with self.models.engine.connect() as conn:
            found = dict(conn.execute(select(self.models.tracking.c.name, self.models.tracking.c.position)).all())
        return {p.name: int(found.get(p.name, 0)) for p in self.projections}

    def status(self) -> list[ProjectionStatus]:
        # the read models first: when the database is down, their engine says so at
        # once, where the event store's pool retries for most of a minute
        positions = self.positions()
        head = self.ledger.max_position()
        return [ProjectionStatus(n, pos, head) for n, pos in positions.items()]

    # -- catching up ----------------------------------------------------------------

    def catch_up(
        self, stop: int | None = None, max_sections: int | None = None, section: int = SECTION
    ) -> int:
        """Apply everything in the log (up to ``stop``, or ``max_sections`` sections of
        ``section`` events); returns events applied (by this runner: see ``delegate``)."""
        delegate = self.delegate
        if delegate is not None and max_sections is None:
            done = delegate(stop)
            if done is not None:
                return done
        with self._lock, gc_paused():
            return _catch_up(
                self.ledger, self.models, self.projections, self.models.tracking, stop,
                max_sections, section, self.read_ahead,
            )

    # -- rebuilding -----------------------------------------------------------------

    def rebuild(self, *names: str) -> int:
        """Rebuild the named projections (default: all) from position 0, in one pass over
        the log, into fresh ``*__rebuild`` tables; once they are current, swap them in
        for the live ones in one transaction. Returns events applied (summed over the
        projections).

        Raises:
            KeyError: an unknown projection name.
            AnchorsLost: the rebuilt ``event_index`` lacks rows of the live one (the
                store lost or changed events since they were projected); nothing is
                swapped, so the live anchors still show it to ``verify``.
            SwapBusy: PostgreSQL: the live tables stayed in use through
                :data:`SWAP_ATTEMPTS` tries at the swap (nothing swapped).
        """
        names = names or tuple(PROJECTION_CLASSES)
        md = MetaData()
        tracking = tracking_table(md)
        shadows = {n: build_tables(md, n, REBUILD_SUFFIX) for n in names}
        projections = []
        for name in names:
            projection = PROJECTION_CLASSES[name](shadows[name])
            projection.name = name + REBUILD_SUFFIX  # type: ignore[misc]
            projections.append(projection)
        shadow_names = [p.name for p in projections]
        with self._lock, rebuild_lock(self.models.engine), gc_paused():
            with self.models.engine.begin() as conn:
                for name in names:
                    _drop_companions(conn, name, REBUILD_SUFFIX)
                for t in (t for tables in shadows.values() for t in tables.values()):
                    t.drop(conn, checkfirst=True)
                    t.create(conn)
                for name in names:
                    _create_companions(conn, name, REBUILD_SUFFIX)
                conn.execute(tracking.delete().where(tracking.c.name.in_(shadow_names)))
            applied = 0
            busy = 0
            while True:
                applied += _catch_up(
                    self.ledger, self.models, projections, tracking, None, None, SECTION,
                    self.read_ahead,
                )
                head = self.ledger.max_position()
                try:
                    swapped = self._swap(names, tracking, shadow_names, head)
                except SwapBusy:
                    busy += 1
                    if busy >= SWAP_ATTEMPTS:
                        raise
                    time.sleep(min(1.0, 0.05 * busy))
                    continue
                if swapped:
                    return applied

    def _swap(
        self, names: Sequence[str], tracking: Table, shadow_names: list[str], head: int
    ) -> bool:
        """Swap the rebuilt tables of ``names`` in for the live ones, in one transaction,
        if they reached ``head``; False when they did not (catch up again first).

        Raises:
            SwapBusy: PostgreSQL: the live tables stayed in use (see :func:`_lock_for_swap`).
            AnchorsLost: see :meth:`rebuild`.
        """
        with self.models.engine.begin() as conn:
            _lock_for_swap(conn, [self.models.tracking, *(
                t for name in names for t in self.models.tables[name].values()
            )])
            found = dict(
                conn.execute(
                    select(tracking.c.name, tracking.c.position).where(
                        tracking.c.name.in_(shadow_names)
                    )
                ).all()
            )
            if min((found.get(n, 0) for n in shadow_names), default=0) < head:
                return False  # written meanwhile: catch the new tail up first
            if "event_index" in names:
                _check_anchors_kept(conn)
            for name in names:
                _drop_companions(conn, name, "")
                for base, t in self.models.tables[name].items():
                    conn.execute(text(f'DROP TABLE "{t.name}"'))
                    shadow = f"{base}{REBUILD_SUFFIX}"
                    conn.execute(text(f'ALTER TABLE "{shadow}" RENAME TO "{t.name}"'))
                _rename_companions(conn, name)
                _set_tracking(conn, tracking, name, found[name + REBUILD_SUFFIX])
            conn.execute(tracking.delete().where(tracking.c.name.in_(shadow_names)))
            return True


class SwapBusy(RuntimeError):
    """The rebuilt tables could not be swapped in: the live ones stayed in use."""


SWAP_ATTEMPTS = 100
"""Tries at taking the live tables' locks for a swap (each waits at most half of
PostgreSQL's ``deadlock_timeout``; 50 ms more between tries, up to 1 s)."""


def _lock_for_swap(conn: Connection, tables: Sequence[Table]) -> None:
    """PostgreSQL: lock every table the swap drops or writes (``ACCESS EXCLUSIVE``), in
    one statement that waits at most half of ``deadlock_timeout``.

    The swap drops one live table after another, and each ``DROP`` waits for the
    transactions using that table while holding the tables dropped before. A reader (the
    search query joins ``search_documents`` to ``sessions``; a request reads several
    tables in one transaction) or the server's catch-up (it writes projection after
    projection) that holds a later table and then asks for an earlier one closed a cycle:
    PostgreSQL's deadlock detector then aborted one of them (a 500 to the reader, a
    catch-up retried, or the rebuild lost). Taking all the locks first, for less time
    than the detector waits before it looks, ends every such wait by this transaction
    giving up (rolled back, :class:`SwapBusy`; :meth:`ProjectionRunner.rebuild` catches
    up and tries again), never by a deadlock. SQLite: nothing (one writer at a time,
    readers never blocked).

    Raises:
        SwapBusy: the locks were not all free in time.
    """
    if conn.dialect.name != "postgresql":
        return
    from sqlalchemy.exc import OperationalError

    deadlock_ms = conn.exec_driver_sql(
        "SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'"
    ).scalar()
    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(deadlock_ms or 1000) // 2)}")
    names = ", ".join(f'"{t.name}"' for t in dict.fromkeys(tables))
    try:
        conn.exec_driver_sql(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE")
    except OperationalError as e:  # the statement timed out (query_canceled)
        raise SwapBusy(
            "the read-model tables stayed in use: the rebuilt tables were not swapped in "
            "(the live ones are unchanged); run the rebuild again"
        ) from e
    conn.exec_driver_sql("SET LOCAL statement_timeout TO DEFAULT")


class AnchorsLost(RuntimeError):
    """A rebuilt ``event_index`` would drop or change anchors of the live one."""


def _check_anchors_kept(conn: Connection) -> None:
    """Raise :class:`AnchorsLost` unless every row of the live ``event_index`` is in the
    rebuilt one unchanged (position, stream, version, digest). The live rows are what
    ``verify`` checks the store against: swapping in an index rebuilt from a store whose
    tail was cut would erase the evidence."""
    shadow = "event_index" + REBUILD_SUFFIX
    missing = conn.execute(text(
        f'SELECT o.position, o.stream_id, o.version FROM event_index o LEFT JOIN "{shadow}" n '
        "ON n.position = o.position AND n.stream_id = o.stream_id AND n.version = o.version "
        "AND n.digest = o.digest WHERE n.position IS NULL ORDER BY o.position"
    )).all()
    if missing:
        position, stream, version = missing[0]
        raise AnchorsLost(
            f"not swapped in: the rebuilt event_index lacks {len(missing)} of the live one's "
            f"anchors (first: stream {stream} v{version} at position {position}); the store "
            "lost or changed events since they were projected. Run `hookledger verify`; "
            "if the store was restored from an older backup on purpose, delete the read "
            "models (views.db) instead of rebuilding them."
        )


def _catch_up(
    ledger: Ledger,
    models: ReadModels,
    projections: Sequence[Projection],
    tracking: Table,
    stop: int | None,
    max_sections: int | None,
    section: int,
    read_ahead: bool = False,
) -> int:
    """Apply sections of the log until the end (or ``stop``); returns events applied
    (log positions passed, summed over the projections).

    Only the events some projection consumes are decoded (:class:`LogReader`). With
    ``read_ahead`` (see :attr:`ProjectionRunner.read_ahead`), the next section is read
    and decoded in a second thread while one is applied.
    """
    applied = 0
    sections = 0
    classes = [type(p) for p in projections]
    reader = LogReader(
        ledger,
        lambda cls: any(c.consumes(cls) for c in classes),
        nul_free=models.engine.dialect.name == "postgresql",
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookledger-read") as pool:
        ahead: tuple[int, Future[Section]] | None = None
        while max_sections is None or sections < max_sections:
            with models.engine.connect() as conn:
                found = dict(conn.execute(select(tracking.c.name, tracking.c.position)).all())
            positions = {p.name: int(found.get(p.name, 0)) for p in projections}
            start = min(positions.values())
            if stop is not None and start >= stop:
                break
            if ahead is not None and ahead[0] == start:
                read = ahead[1].result()
            else:
                read = reader.read(start, section, stop)
            ahead = None
            if not read.positions:
                break
            more = max_sections is None or sections + 1 < max_sections
            if read_ahead and len(read.positions) == section and more:
                ahead = (read.last, pool.submit(reader.read, read.last, section, stop))
            try:
                applied += _apply_section(models, projections, tracking, read, positions, found)
            except TrackingConflict:
                continue
            sections += 1
        if ahead is not None:
            ahead[1].cancel()
    return applied


def _apply_section(
    models: ReadModels,
    projections: Sequence[Projection],
    tracking: Table,
    read: Section,
    positions: dict[str, int],
    found: dict[str, int],
) -> int:
    """Each projection's rows and tracking position for one section, in one transaction."""
    applied = 0
    last = read.last
    with models.engine.begin() as conn:
        for projection in projections:
            pos = positions[projection.name]
            if pos >= last:
                continue
            todo = read.events
            if todo and todo[0][0] <= pos:  # part of the section was applied already
                todo = [(p, e) for p, e in todo if p > pos]
            if projection.kinds is not None:
                consumes = {cls: projection.consumes(cls) for cls in read.classes}
                todo = [pe for pe in todo if consumes[type(pe[1])]]
            if todo:
                rows = RowCache(conn, projection.tables)
                projection.prefetch(rows, todo)
                projection.apply_all(rows, todo)
                projection.flush(rows)
            _advance(conn, tracking, projection.name, pos, last, projection.name in found)
            applied += len(read.positions) - bisect.bisect_right(read.positions, pos)
    return applied


def _companions(conn, name: str, suffix: str) -> list[Companion]:  # type: ignore[no-untyped-def]
    return PROJECTION_CLASSES[name].companions(conn.dialect.name, suffix)


def _create_companions(conn, name: str, suffix: str) -> None:  # type: ignore[no-untyped-def]
    for c in _companions(conn, name, suffix):
        conn.execute(text(c.create))


def _drop_companions(conn, name: str, suffix: str) -> None:  # type: ignore[no-untyped-def]
    for c in reversed(_companions(conn, name, suffix)):
        conn.execute(text(c.drop_sql()))


def _rename_companions(conn, name: str) -> None:  # type: ignore[no-untyped-def]
    """Shadow companions take the live names (after their tables were swapped)."""
    live = _companions(conn, name, "")
    for shadow, target in zip(_companions(conn, name, REBUILD_SUFFIX), live, strict=True):
        if shadow.kind == "column":
            continue  # renamed with its table
        if shadow.kind == "index" and conn.dialect.name == "sqlite":  # no ALTER INDEX
            conn.execute(text(shadow.drop_sql()))
            conn.execute(text(target.create))  # on the swapped-in table, by its live name
            continue
        conn.execute(text(f'ALTER {shadow.kind.upper()} "{shadow.name}" RENAME TO "{target.name}"'))


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
