"""The ledger's recorders: ``PollingSQLiteApplicationRecorder`` (``subscribe()`` on
SQLite, by polling) and ``OrderedPostgresApplicationRecorder`` (PostgreSQL inserts
under the table lock, in one unpipelined statement).

The library's own recorder contract (``eventsourcing.tests.persistence``) is run
against both, plus a subscription fed by a ``Ledger`` writing in the same process.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests import persistence
from eventsourcing.utils import resolve_topic

from api.bootstrap import build
from ledger.app import Ledger
from ledger.config import Settings
from ledger.ingest import ingest_hook
from ledger.pg_recorder import OrderedPostgresApplicationRecorder
from ledger.recorders import PAGE_SIZE, PollingSQLiteApplicationRecorder
from projections.queries import list_sessions
from projections.store import SQLITE_PAGE_SIZE

from conftest import _PG_SKIP, PG_URL


class TestPollingSQLiteApplicationRecorder(persistence.ApplicationRecorderTestCase):
    test_performance = None  # timing-only tests of the base class
    test_concurrent_throughput = None

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def create_recorder(self) -> PollingSQLiteApplicationRecorder:
        recorder = PollingSQLiteApplicationRecorder(
            SQLiteDatastore(str(Path(self.tmp.name) / "events.db"))
        )
        recorder.create_table()
        return recorder

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


def prompt(n: int) -> bytes:
    return json.dumps(
        {
            "session_id": "recorder-test",
            "hook_event_name": "UserPromptSubmit",
            "prompt": f"prompt {n}",
        }
    ).encode()


def test_subscription_receives_what_a_ledger_appends_after_it_started(tmp_path: Path) -> None:
    ledger = Ledger(Settings(tmp_path).event_store_env())
    try:
        assert isinstance(ledger.recorder, PollingSQLiteApplicationRecorder)
        before = ingest_hook(ledger, "claude-code", prompt(1), "cap-1", None).result.positions
        start = max(before)
        with ledger.recorder.subscribe(gt=start) as subscription:
            after = ingest_hook(ledger, "claude-code", prompt(2), "cap-2", None).result.positions
            received = []
            for notification in subscription:
                received.append(notification)
                if len(received) == len(after):
                    break
        assert after and min(after) > start
        assert [n.id for n in received] == after
        assert all(n.originator_id == received[0].originator_id for n in received)
        assert b"prompt 2" in received[-1].state
    finally:
        ledger.close()


def _page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def test_new_stores_get_large_pages_and_existing_files_keep_theirs(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh", tmp_path / "old"
    old.mkdir()
    for name in ("events.db", "views.db"):  # files made by an earlier version: 4 KiB pages
        conn = sqlite3.connect(old / name)
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    for data in (fresh, old):
        services = build(Settings(data))
        try:
            result = ingest_hook(services.ledger, "claude-code", prompt(1), "cap-1").result
            assert result.appended == 2  # Opened, PromptSubmitted
            services.runner.catch_up()
            assert [s["prompt_count"] for s in list_sessions(services.models)] == [1]
        finally:
            services.close()
    assert _page_size(fresh / "events.db") == PAGE_SIZE == 65536
    assert _page_size(fresh / "views.db") == SQLITE_PAGE_SIZE == 65536
    assert _page_size(old / "events.db") == _page_size(old / "views.db") == 4096


class _PostgresRecorder:
    """A fresh schema on the test PostgreSQL server per test, and the ledger's
    :class:`OrderedPostgresApplicationRecorder` on it (skipped when unreachable)."""

    def setUp(self) -> None:
        if _PG_SKIP:
            self.skipTest(_PG_SKIP)
        self.schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.datastores: list[PostgresDatastore] = []

    def tearDown(self) -> None:
        for datastore in self.datastores:
            datastore.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')

    def create_recorder(self) -> OrderedPostgresApplicationRecorder:
        env = Settings(Path("."), database_url=PG_URL, database_schema=self.schema).event_store_env()
        datastore = PostgresDatastore(
            env["POSTGRES_DBNAME"], env["POSTGRES_HOST"], env["POSTGRES_PORT"],
            env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], schema=self.schema,
            lock_timeout=int(env["POSTGRES_LOCK_TIMEOUT"]), pool_size=4,
        )
        self.datastores.append(datastore)
        recorder = OrderedPostgresApplicationRecorder(datastore, events_table_name="hookledger_events")
        recorder.create_table()
        return recorder


@pytest.mark.postgres
class TestOrderedPostgresApplicationRecorder(_PostgresRecorder, persistence.ApplicationRecorderTestCase):
    """The library's recorder contract, on the recorder ``Settings`` selects for PostgreSQL."""

    test_performance = None  # timing-only tests of the base class
    test_concurrent_throughput = None

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()

    def test_a_large_event_is_inserted(self) -> None:
        """One event of 20 MB (the library's pipelined insert never returned from ~2 MB)."""
        recorder = self.create_recorder()
        state = b"x" * 20_000_000
        (position,) = recorder.insert_events([StoredEvent(uuid.uuid4(), 1, "big", state)])
        (found,) = recorder.select_notifications(position, 1)
        assert found.state == state


@pytest.mark.postgres
class TestOrderedPostgresNonInterleaving(_PostgresRecorder, persistence.NonInterleavingNotificationIDsBaseCase):
    """Two transactions inserting at once never interleave their ids."""


def test_settings_select_the_ordered_postgres_recorder() -> None:
    env = Settings(Path("."), database_url=PG_URL).event_store_env()
    assert resolve_topic(env["APPLICATION_RECORDER_TOPIC"]) is OrderedPostgresApplicationRecorder
