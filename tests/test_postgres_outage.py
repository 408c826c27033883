"""``hookledger serve`` on PostgreSQL while the database is unreachable, and after.

Real PostgreSQL and a real server process. The outage is made on a database of the
test's own (``ALTER DATABASE … ALLOW_CONNECTIONS false`` and its backends terminated:
what a restart or a network cut does to the server's connections), so the shared
server keeps running for everything else.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from ledger.config import Settings

from conftest import FIXTURES, PG_URL, Server, cli

pytestmark = pytest.mark.postgres

PAYLOADS = json.loads((FIXTURES / "attio-mcp-server-hook-logs" / "pre_tool_use.json").read_text())[:6]


@contextlib.contextmanager
def _own_database(data_dir: Path) -> Iterator[tuple[Settings, Callable[[bool], None]]]:
    """Settings on a new database, and ``reachable(flag)`` to cut it off or restore it."""
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {e}")
    name = f"hl_outage_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')

    def reachable(flag: bool) -> None:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(flag).lower()}')
        if not flag:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )

    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield Settings(data_dir, database_url=url), reachable
    finally:
        reachable(False)
        admin.execute(f'DROP DATABASE "{name}"')
        admin.close()


def _hook(settings: Settings, i: int) -> None:
    """One PreToolUse through the real hook hot path (local server: the spool journal)."""
    cli(settings, "hook", "claude-code", stdin=json.dumps({**PAYLOADS[i], "session_id": "outage"}).encode())


def _health(server: Server) -> tuple[int, dict]:
    r = httpx.get(server.url + "/healthz", timeout=30)
    return r.status_code, r.json()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_database_outage_is_reported_and_hooks_spooled_meanwhile_are_ingested(tmp_path: Path) -> None:
    """While the database is unreachable ``/healthz`` answers at once, 503, saying so
    (before: it hung for most of a minute, retrying the event store, then answered a bare
    500 "Internal Server Error"), and so does a read. Hooks keep being spooled; once the
    database is back the server reconnects and ingests them, each once."""
    with _own_database(tmp_path / "data") as (settings, reachable):
        server = Server(settings).start()
        try:
            _hook(settings, 0)
            _wait_for(lambda: _health(server)[1].get("head") == 2, "the first hook")  # Opened + 1
            reachable(False)
            for i in range(1, len(PAYLOADS)):
                _hook(settings, i)  # spooled; the hook exits 0 as always
            started = time.monotonic()
            status, body = _health(server)
            assert status == 503
            assert body["ok"] is False
            assert body["error"].startswith("database unavailable: ")
            assert "not currently accepting connections" in body["error"]
            read = httpx.get(server.url + "/v1/sessions", timeout=30)
            assert read.status_code == 503
            assert read.json()["error"].startswith("database unavailable: ")
            assert time.monotonic() - started < 10
            reachable(True)

            def caught_up() -> bool:
                status, body = _health(server)
                return status == 200 and body["ok"] and body["head"] >= 1 + len(PAYLOADS) and not any(
                    p["lag"] for p in body["projections"].values()
                )

            _wait_for(caught_up, "the spooled hooks to be ingested")
            sessions = httpx.get(server.url + "/v1/sessions", timeout=30).json()["sessions"]
            assert [(s["external_id"], s["tool_call_count"]) for s in sessions] == [("outage", len(PAYLOADS))]
            assert not any((settings.data_dir / "spool").glob("*.aside"))
        finally:
            server.stop()
