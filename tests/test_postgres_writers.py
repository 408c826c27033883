"""Several writers on one PostgreSQL store (the server and a CLI import, two servers):
what a reader that tails the log sees.

Real PostgreSQL (the ``postgres`` backend of ``tests/conftest.py``); the SQLite store has
one writer at a time by its own lock, so these cases do not arise there.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import session_id
from projections import queries

from conftest import FIXTURES, PG_URL

PROMPT = json.loads((FIXTURES / "coorp-serverless-plugins-hook-logs" / "user_prompt_submit.json").read_text())[1]

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("settings", ["postgres"], indirect=True)]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _lock_waiters(schema: str) -> int:
    """Backends waiting for a lock on a table of this test's schema, or for a
    transaction while running a statement that names the schema."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return int(conn.execute(
            "SELECT count(DISTINCT pid) FROM ("
            " SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT l.granted AND n.nspname = %s"
            " UNION SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
            ") w",
            (schema, f"%{schema}%"),
        ).fetchone()[0])


def test_a_writer_that_commits_late_is_not_skipped_by_the_projections(settings: Settings) -> None:
    """Writer A takes its notification ids first but commits after writer B (here A waits
    on another session's uncommitted row for its stream's first version: any wait
    between taking ids and committing, e.g. a slow disk or a big transaction, does
    the same). A projection catching up in between must not pass A's ids for good:
    before, its tracking moved past them to B's, and A's session never reached the read
    models (no error anywhere; a later event of it stopped them with "before Opened")."""
    schema = settings.database_schema
    a, b = build(settings), build(settings)
    body_a = json.dumps({**PROMPT, "session_id": "writer-a"}).encode()
    body_b = json.dumps({**PROMPT, "session_id": "writer-b"}).encode()
    blocker = psycopg.connect(PG_URL)  # a transaction holding session A's first version
    errors: list[BaseException] = []

    def write(services, body: bytes, key: str) -> None:  # type: ignore[no-untyped-def]
        try:
            ingest_hook(services.ledger, "claude-code", body, key, datetime.now(UTC))
        except BaseException as e:
            errors.append(e)

    try:
        blocker.execute(
            f'INSERT INTO "{schema}".hookledger_events '
            "(originator_id, originator_version, topic, state) VALUES (%s, 1, 'x', '')",
            (session_id("claude-code", "writer-a"),),
        )
        ta = threading.Thread(target=write, args=(a, body_a, "a-1"))
        ta.start()
        _wait_for(lambda: _lock_waiters(schema) >= 1, "writer A to wait")
        tb = threading.Thread(target=write, args=(b, body_b, "b-1"))
        tb.start()
        _wait_for(lambda: not tb.is_alive() or _lock_waiters(schema) >= 2, "writer B")
        b.runner.catch_up()  # a reader tails the log while A has not committed
        blocker.rollback()
        ta.join(30)
        tb.join(30)
        assert errors == []
        b.runner.catch_up()
        found = {s["external_id"]: s["event_count"] for s in queries.list_sessions(b.models)}
        assert found == {"writer-a": 2, "writer-b": 2}  # Opened + the prompt, each
        with b.models.engine.connect() as conn:
            indexed = conn.exec_driver_sql("SELECT count(*) FROM event_index").scalar()
        assert indexed == 4
    finally:
        blocker.close()
        a.close()
        b.close()


def test_a_rebuild_swap_never_deadlocks_a_reader(settings: Settings) -> None:
    """A reader that holds one read-model table in its transaction and then reads
    another (the search query joins ``search_documents`` to ``sessions``; a request
    reads several tables) while ``projections rebuild`` swaps its tables in: before, the
    swap dropped the tables one by one and waited for the reader's while holding the
    others, the reader waited for one the swap held, and PostgreSQL's deadlock detector
    aborted one of them (seen as a 500 from ``/v1/search`` during a rebuild under load,
    and as the server's catch-up failing). Now the reader gets its answer from the live
    tables, and the rebuild swaps once the reader is done."""
    schema = settings.database_schema
    services = build(settings)
    import_paths(services.ledger, [FIXTURES / "agentcmd-claude-transcripts"])
    services.runner.catch_up()
    sessions_before = queries.stats(services.models)["sessions"]
    reader = psycopg.connect(PG_URL, options=f"-csearch_path={schema}")
    errors: list[BaseException] = []

    def rebuild() -> None:
        try:
            services.runner.rebuild()
        except BaseException as e:
            errors.append(e)

    try:
        reader.execute("SELECT count(*) FROM search_documents").fetchone()  # held till commit
        swap = threading.Thread(target=rebuild)
        swap.start()
        _wait_for(lambda: _lock_waiters(schema) >= 1, "the rebuild to wait for the reader")
        (seen,) = reader.execute("SELECT count(*) FROM sessions").fetchone()
        reader.commit()
        swap.join(60)
        assert not swap.is_alive()
        assert errors == []
        assert seen == sessions_before
        assert queries.stats(services.models)["sessions"] == sessions_before
    finally:
        reader.close()
        services.close()
