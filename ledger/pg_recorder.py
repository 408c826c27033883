"""PostgreSQL event recorder whose notification ids are issued in commit order, inserting
with one statement of typed arrays.

eventsourcing 9.5's ``PostgresApplicationRecorder`` serialises writers with ``LOCK TABLE
... IN EXCLUSIVE MODE`` before each insert, so that a transaction takes its notification
ids from the sequence and commits before the next one takes any: a reader that tails
the log (``WHERE notification_id > last``) then never passes an id that commits later.
Its two insert paths both fall short here:

* the default one pipelines the statements (psycopg pipeline mode), and never returned
  for one event of ~2 MB or more (psycopg 3.3);
* the stored-function one (``POSTGRES_ENABLE_DB_FUNCTIONS``, which hookledger used
  because of that) runs ``es_insert_events`` alone in autocommit mode and takes **no**
  table lock. Two writers (the server and a CLI import, or two servers) then
  interleaved ids and committed out of order; the projections, which read the log in
  id order, skipped the events that committed late: a session missing from the read
  models, or "event v713 before Opened" stopping them for good. It also passes the
  events as one array of a composite type, which psycopg dumps as text through a
  ``re.sub`` per event (a quarter of an import's time) and the server parses back.

:class:`OrderedPostgresApplicationRecorder` inserts in one transaction, not pipelined:
the library's lock statements (with its ``lock_timeout``), the library's ``NOTIFY``, then
``INSERT … SELECT FROM unnest(ids, versions, topics, states) RETURNING notification_id``
with four arrays of plain types, sent in binary. Same table, same rows, same ids.
Selected with ``APPLICATION_RECORDER_TOPIC`` (:meth:`ledger.config.Settings.event_store_env`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg.sql import SQL, Identifier


class OrderedPostgresApplicationRecorder(PostgresApplicationRecorder):
    """``PostgresApplicationRecorder`` whose insert holds the events table's
    ``EXCLUSIVE`` lock until it commits, in one unpipelined statement (module docstring)."""

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.insert_arrays_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(%b::{id_type}[], %b::bigint[], %b::text[], %b::bytea[]) "
            "RETURNING notification_id"
        ).format(
            schema=Identifier(datastore.schema),
            table=Identifier(self.events_table_name),
            id_type=Identifier(datastore.originator_id_type),
        )

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert ``stored_events`` (ids in their order), retried on a lost connection
        as the library's ``insert_events`` is: a commit whose answer was lost then
        clashes on the version, which ``Ledger.record`` handles."""
        if not stored_events:
            return []
        return retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)(
            self._insert
        )(stored_events)

    def _insert(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        params = (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events],
            [e.state for e in stored_events],
        )
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._lock_table(curs)
            self._notify_channel(curs)
            curs.execute(self.insert_arrays_statement, params, prepare=True)
            return [row["notification_id"] for row in curs.fetchall()]
