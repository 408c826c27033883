"""A session's activity times are the agent's: what the ledger appends to a session
itself — a summary, a liveness job's decision, an operator's command or fork — never
moves its ``started_at`` / ``last_activity_at`` nor its place in the sessions list, also
for sources with no clock (``codex exec --json``, Claude stream-json files: their
events' ledger time is their activity time). The relational read models, the API, the
CLI, search and the DuckDB analytics agree; ``last_recorded_at`` stays the ledger time
of the latest event of any kind. Runs on both event stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import select, text
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services, build
from api.jobs import run_jobs
from api.summaries import run_summaries
from ledger.commands import fork_session, run_command
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.observation import session_id
from projections import queries
from projections.analytics import catch_up, open_snapshot, run_query
from projections.analytics.store import open_writer, writer_lock
from projections.search_query import search_models

from conftest import FIXTURES, cli, resumed_exec_turn

STREAM_JSON = FIXTURES / "claude_code-elixir-stream-json"
CUT_STREAM = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-multi-1.TRUNCATED.jsonl"
"""A ``codex exec --json`` capture cut before its end: the session stays live."""
LATER = datetime(2030, 1, 1, tzinfo=UTC)
TIMES = ("started_at", "last_activity_at")


def _listed(services: Services) -> list[tuple[str, str | None, str | None]]:
    return [(s["id"], s["started_at"], s["last_activity_at"])
            for s in queries.list_sessions(services.models)]


def _last_recorded(services: Services, sid: str) -> str:
    """``last_recorded_at`` of a ``sessions`` row: the ledger time of its latest event."""
    s = services.models.table("sessions")
    with services.models.engine.connect() as conn:
        return conn.execute(select(s.c.last_recorded_at).where(s.c.id == sid)).scalar_one()


def _import_clockless(services: Services, tmp_path: Path) -> tuple[str, Path]:
    """Three sessions whose sources have no clock, imported one after the other (so
    their activity is ordered by the ledger's clock): a ``codex exec --json`` thread
    (the oldest) and two Claude stream-json captures. Returns the thread's session id
    and the file of its resumed turn (not imported)."""
    first, resumed, _ = resumed_exec_turn(tmp_path)
    for path in (first, STREAM_JSON / "simple_hello.jsonl", STREAM_JSON / "read_file.jsonl"):
        import_paths(services.ledger, [path])
    thread = json.loads(first.read_text().splitlines()[0])["thread_id"]
    services.runner.catch_up()
    return str(session_id("codex", thread)), resumed


def test_ledger_made_events_do_not_move_a_session_without_source_clock(
    services: Services, tmp_path: Path
) -> None:
    codex, resumed = _import_clockless(services, tmp_path)
    before = _listed(services)
    assert len(before) == 3 and before[-1][0] == codex  # imported first: the oldest
    lasts = [b[2] for b in before]
    assert all(lasts) and lasts == sorted(lasts, reverse=True) and len(set(lasts)) == 3
    head = _last_recorded(services, codex)
    assert head == before[-1][2]  # no source clock: the ledger's

    # the ledger appends: summaries of every session (written "in 2030"), then, to the
    # oldest session, an operator's archive and fork, and the liveness jobs' decisions
    assert run_summaries(services, now=LATER).positions
    result = run_command(services.ledger, UUID(codex), "archive", "a1", datetime.now(UTC))
    assert result.appended and result.to_status.value == "ARCHIVED"
    fork = fork_session(services.ledger, UUID(codex), "f1", datetime.now(UTC))
    assert run_jobs(services, LATER).positions
    services.runner.catch_up()

    rows = {s["id"]: s for s in queries.list_sessions(services.models)}
    fork_id = str(fork.fork_id)
    assert [r for r in _listed(services) if r[0] != fork_id] == before  # order and times
    assert rows[codex]["status"] == "ARCHIVED"
    # last_recorded_at still says when the ledger last appended to the session
    assert _last_recorded(services, codex) > head
    # a fork of the whole history has the parent's times: the fork is no activity
    assert [rows[fork_id][k] for k in TIMES] == [rows[codex][k] for k in TIMES]
    # a summary's hit carries its session's last activity, not when it was written
    # (read_file.jsonl's: "Read …/README.md")
    hits = search_models(services.models, "readme", kinds=("summary",), limit=50)
    assert hits and {(h.session_id, h.occurred_at) for h in hits} == {before[0][::2]}

    # the HTTP API and the CLI list them the same way
    with TestClient(create_app(services)) as client:
        listed = client.get("/v1/sessions").json()["sessions"]
    assert [(s["id"], s["started_at"], s["last_activity_at"]) for s in listed] == _listed(services)
    shown = json.loads(cli(services.settings, "sessions", "--json").stdout)
    assert [(s["id"], s["started_at"], s["last_activity_at"]) for s in shown] == _listed(services)

    # the DuckDB analytics has the same times
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    try:
        duck = dict(con.execute(
            "SELECT id::VARCHAR, strftime(coalesce(last_activity_at, last_activity_recorded_at,"
            " first_recorded_at), '%Y-%m-%dT%H:%M:%S.%gZ') FROM sessions").fetchall())
        projects = run_query(con, "busiest-projects")
    finally:
        con.close()
    assert duck == {s[0]: s[2] for s in _listed(services)}
    assert max(p["last_activity_at"] for p in projects) == lasts[0]

    # the agent's own activity still moves it: the thread's resumed turn, imported now
    import_paths(services.ledger, [resumed])
    services.runner.catch_up()
    top = _listed(services)[0]
    assert top[0] == codex and top[2] > lasts[0]
    assert top[2] == _last_recorded(services, codex)


def test_a_fork_of_nothing_but_the_first_event_was_last_active_when_made(
    services: Services, tmp_path: Path
) -> None:
    codex, _ = _import_clockless(services, tmp_path)
    ei = services.models.table("event_index")
    with services.models.engine.connect() as conn:
        opened = conn.execute(
            select(ei.c.position).where(ei.c.stream_id == codex, ei.c.version == 1)
        ).scalar_one()
    fork = fork_session(services.ledger, UUID(codex), "f0", datetime.now(UTC), at_position=opened,
                        at_version=1)
    services.runner.catch_up()
    row = next(s for s in queries.list_sessions(services.models) if s["id"] == str(fork.fork_id))
    s = services.models.table("sessions")
    with services.models.engine.connect() as conn:
        made = conn.execute(select(s.c.first_recorded_at).where(s.c.id == row["id"])).scalar_one()
    assert row["started_at"] == row["last_activity_at"] == made


def _drop_activity_columns(settings: Settings) -> None:
    """The relational ``sessions`` and the DuckDB file as a version before
    ``first/last_activity_recorded_at`` left them."""
    s = build(settings)
    try:
        with s.models.engine.begin() as conn:
            for column in ("first_activity_recorded_at", "last_activity_recorded_at"):
                conn.execute(text(f"ALTER TABLE sessions DROP COLUMN {column}"))
    finally:
        s.close()
    with writer_lock(settings.data_dir):
        con = open_writer(settings.data_dir)
        con.execute("UPDATE analytics_meta SET value = '3' WHERE key = 'schema_version'")
        for column in ("first_activity_recorded_at", "last_activity_recorded_at"):
            con.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        con.close()


def test_read_models_of_the_schema_before_are_rebuilt(settings: Settings, tmp_path: Path) -> None:
    s = build(settings)
    try:
        _import_clockless(s, tmp_path)
        want = _listed(s)
        run_summaries(s, now=LATER)
        catch_up(s.ledger, settings.data_dir)
    finally:
        s.close()
    _drop_activity_columns(settings)
    s = build(settings)
    try:
        status: dict[str, Any] = {p.name: p.position for p in s.runner.status()}
        assert status["sessions"] == 0  # reset by the upgrade, rebuilt by the catch-up
        s.runner.catch_up()
        assert _listed(s) == want
        assert catch_up(s.ledger, settings.data_dir) == s.ledger.max_position()  # replayed
        con = open_snapshot(settings.data_dir)
        try:
            [(n,)] = con.execute(
                "SELECT count(last_activity_recorded_at) FROM sessions").fetchall()
        finally:
            con.close()
        assert n == len(want)
    finally:
        s.close()


def test_a_command_does_not_delay_the_liveness_jobs(services: Services) -> None:
    """The jobs nominate sessions by their last activity (api/jobs.py): an operator's fork
    three minutes ago does not hide a session whose agent has been idle for an hour (a
    fork restarts no idle clock: the aggregate times the session out)."""
    import_paths(services.ledger, [CUT_STREAM])
    services.runner.catch_up()
    [row] = queries.list_sessions(services.models)
    assert row["status"] == "ACTIVE"
    last = datetime.fromisoformat(row["last_activity_at"])
    fork_session(services.ledger, UUID(row["id"]), "f1", last + timedelta(minutes=58))
    report = run_jobs(services, last + timedelta(minutes=61))
    assert report.sessions.get(row["id"]) == ["idle_session"]
    after = {s["id"]: s for s in queries.list_sessions(services.models)}[row["id"]]
    assert after["status"] == "COMPLETED"
    assert after["ended_at"] == after["last_activity_at"] == row["last_activity_at"]
