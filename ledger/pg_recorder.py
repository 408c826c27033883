"""PostgreSQL event recorder whose notification ids are issued in commit order.

eventsourcing 9.5's ``PostgresApplicationRecorder`` serialises writers with ``LOCK TABLE
... IN EXCLUSIVE MODE`` before each insert, so that a transaction takes its notification
ids from the sequence and commits before the next one takes any: a reader that tails
the log (``WHERE notification_id > last``) then never passes an id that commits later.
Its stored-function insert (``POSTGRES_ENABLE_DB_FUNCTIONS``, which hookledger uses: the
pipelined insert never returned for one event of ~2 MB or more with psycopg 3.3) runs
``es_insert_events`` alone in autocommit mode and takes no such lock. Two writers (the
server and a CLI import, or two servers) then interleave ids and commit out of order;
the projections, which read the log in id order, skipped the events that committed
late: a session missing from the read models, or "event v713 before Opened" stopping
them for good.

:class:`OrderedPostgresApplicationRecorder` calls the same stored function inside a
transaction that takes the library's own table lock first (with its ``lock_timeout``).
Selected with ``APPLICATION_RECORDER_TOPIC`` (:meth:`ledger.config.Settings.event_store_env`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry


class OrderedPostgresApplicationRecorder(PostgresApplicationRecorder):
    """``PostgresApplicationRecorder`` whose stored-function insert holds the events
    table's ``EXCLUSIVE`` lock until it commits (module docstring)."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not self.datastore.enable_db_functions:
            return super().insert_events(stored_events, **kwargs)
        return self._insert_locked(stored_events)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _insert_locked(self, stored_events: Sequence[StoredEvent]) -> Sequence[int]:
        """The library's stored-function insert, in one transaction after the lock
        (retried on a lost connection, as the library's ``insert_events`` is: a commit
        whose answer was lost then clashes on the version, which ``Ledger.record``
        handles)."""
        rows = [
            self.construct_pg_stored_event(
                originator_id=e.originator_id,
                originator_version=e.originator_version,
                topic=e.topic,
                state=e.state,
            )
            for e in stored_events
        ]
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._lock_table(curs)
            curs.execute(self.sql_invoke_pg_function_insert_events, (rows,), prepare=True)
            return [r[self.pg_function_name_insert_events] for r in curs.fetchall()]
