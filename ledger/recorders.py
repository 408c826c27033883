"""Closing eventsourcing 9.5's SQLite gap: ``subscribe()`` by polling.

``SQLiteApplicationRecorder.subscribe()`` raises ``NotImplementedError`` in 9.5.6
(only POPO and PostgreSQL implement it). :class:`PollingSQLiteApplicationRecorder`
returns a :class:`PollingSubscription`: the library's ``ListenNotifySubscription``
pull loop, woken every ``interval`` seconds (no NOTIFY exists in SQLite) and at once
when a writer in the same process calls :meth:`PollingSQLiteApplicationRecorder.nudge`.
Selected with ``APPLICATION_RECORDER_TOPIC`` (see :mod:`ledger.config`), so the
library's ``ProjectionRunner`` and ``ApplicationSubscription`` work on SQLite.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, ListenNotifySubscription, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

POLL_INTERVAL_S = 0.05
PAGE_SIZE = 65536
"""Page size (bytes) of a newly created event store file. Events carry their raw
record, so most rows span overflow pages: with 64 KiB pages instead of SQLite's default
4 KiB an import's system time halves (0.8-0.9 s -> 0.4 s per 100k events) and it runs
5-16 % faster. A single-event commit rewrites whole pages into the WAL (~200 KiB instead
of ~16 KiB); the POST benchmark (about 4 bodies per commit) showed no difference.
See docs/benchmarks.md."""


def create_database(db_name: str) -> None:
    """Create the SQLite file ``db_name`` (a path or ``file:`` URI) with
    :data:`PAGE_SIZE` pages in WAL mode, unless it exists or is in memory. An existing
    file keeps its page size (SQLite cannot change it in WAL mode).

    Raises:
        sqlite3.Error: the file cannot be created.
    """
    if ":memory:" in db_name or "mode=memory" in db_name:
        return
    path = db_name
    if path.startswith("file:"):  # a URI: its query string is not part of the path
        path = path.removeprefix("file:").split("?", 1)[0]
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    conn = sqlite3.connect(db_name, uri=True)
    try:  # the page size holds from the first write, which switching to WAL is
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


class PollingSubscription(ListenNotifySubscription[ApplicationRecorder]):
    """Pulls new notifications every ``interval`` seconds or when nudged."""

    def __init__(
        self,
        recorder: PollingSQLiteApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        interval: float = POLL_INTERVAL_S,
    ) -> None:
        self._interval = interval
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        recorder._subscriptions.add(self)
        self._poll_thread = threading.Thread(target=self._poll, daemon=True)
        self._poll_thread.start()

    def nudge(self) -> None:
        self._has_been_notified.set()

    def _poll(self) -> None:
        while not self._has_been_stopped:
            self._has_been_notified.set()
            threading.Event().wait(self._interval)

    def __exit__(self, *args: object, **kwargs: object) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._poll_thread.join()


class PollingSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    """SQLite application recorder whose ``subscribe()`` works (by polling); a new
    database file gets :data:`PAGE_SIZE` pages."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        create_database(self.datastore.pool.db_name)
        self._subscriptions: weakref.WeakSet[PollingSubscription] = weakref.WeakSet()

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> PollingSubscription:
        return PollingSubscription(self, gt=gt, topics=topics)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert with one ``executemany`` (the library runs one ``execute`` per event to
        read each ``lastrowid``). The transaction holds SQLite's write lock from its
        first insert, so the new rows get consecutive rowids ending at ``MAX(rowid)``:
        the notification ids are that range."""
        if len(stored_events) < 2:
            return super()._insert_events(c, stored_events, **kwargs)
        c.executemany(
            self.insert_events_statement,
            [
                (
                    s.originator_id.hex if isinstance(s.originator_id, UUID) else s.originator_id,
                    s.originator_version,
                    s.topic,
                    s.state,
                )
                for s in stored_events
            ],
        )
        c.execute(f"SELECT MAX(rowid) FROM {self.events_table_name}")
        last = int(c.fetchone()[0])
        return list(range(last - len(stored_events) + 1, last + 1))

    def select_rows(
        self, start: int, limit: int, stop: int | None = None, *, raw: bool = True
    ) -> list[tuple[int, str, int, str, bytes]]:
        """``(position, originator id hex, version, topic, state)`` of up to ``limit``
        events after position ``start`` (up to ``stop``, inclusive). With ``raw=False``
        the state is cut at the NUL byte that precedes an event's raw record
        (:data:`ledger.envelope.RAW_SEPARATOR`), so its bytes never reach Python.

        The rows ``select_notifications`` reads, without building a ``Notification`` and
        a ``UUID`` for each: a rebuild reads every row of the log, and those objects
        cost as much as reading the row itself.
        """
        state = (
            "state"
            if raw
            else "CASE WHEN instr(state, x'00') > 0 THEN substr(state, 1, instr(state, x'00') - 1)"
            " ELSE state END"
        )
        sql = (
            f"SELECT rowid, originator_id, originator_version, topic, {state} "
            f"FROM {self.events_table_name} WHERE rowid>? "
        )
        params: list[int] = [start]
        if stop is not None:
            sql += "AND rowid<=? "
            params.append(stop)
        sql += "ORDER BY rowid LIMIT ?"
        params.append(limit)
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None  # plain tuples, not sqlite3.Row
            cursor.execute(sql, params)
            return cursor.fetchall()  # type: ignore[no-any-return]

    def nudge(self) -> None:
        """Wake every subscription of this process now (called after each save)."""
        for subscription in list(self._subscriptions):
            subscription.nudge()
