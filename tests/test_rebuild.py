"""Read models are disposable: a rebuild gives byte-identical output, and a catch-up
killed mid-way (the process dies between sections) resumes without double counting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import event, inspect

from api.bootstrap import build
from ledger.config import Settings
from projections.runner import ReadModels
from projections.store import make_engine

from conftest import FIXTURES, _fresh_store, cli, settings_env

KILL_MIDWAY = """
import os, sys
from api.bootstrap import build
from ledger.config import Settings
s = build(Settings.from_env())
s.runner.catch_up(max_sections=2, section=1000)   # two sections committed, then the process dies
os._exit(9)
"""


def test_rebuild_gives_byte_identical_sessions(settings: Settings) -> None:
    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts"), str(FIXTURES / "agentcmd-claude-transcripts"))
    before = cli(settings, "sessions", "--json").stdout
    show_before = cli(settings, "show", "258c7280-ae70-4798-800f-63464d01a85d", "--json").stdout
    cli(settings, "projections", "rebuild")
    assert cli(settings, "sessions", "--json").stdout == before
    assert cli(settings, "show", "258c7280-ae70-4798-800f-63464d01a85d", "--json").stdout == show_before
    named_twice = cli(settings, "projections", "rebuild", "sessions", "sessions")
    assert named_twice.stdout.startswith(b"rebuilt sessions:")
    assert cli(settings, "sessions", "--json").stdout == before
    status = cli(settings, "projections", "status", "--json").stdout
    assert b'"lag": 0' in status and b'"lag": 1' not in status


def test_catch_up_killed_midway_resumes_without_double_counting(settings: Settings) -> None:
    # Import without catching up: write events only, through the library API.
    code = (
        "from api.bootstrap import build; from ledger.config import Settings; "
        "from ledger.importer import import_paths; s = build(Settings.from_env()); "
        f"import_paths(s.ledger, [{str(FIXTURES / 'spotter-claude-transcripts')!r}])"
    )
    subprocess.run([sys.executable, "-c", code], env=settings_env(settings), check=True)
    died = subprocess.run([sys.executable, "-c", KILL_MIDWAY], env=settings_env(settings))
    assert died.returncode == 9
    status = cli(settings, "projections", "status", "--json").stdout
    assert b'"position": 2000' in status  # two sections of 1,000 applied before the kill
    resumed = cli(settings, "sessions", "--json").stdout  # catches up from 2,000
    cli(settings, "projections", "rebuild")  # from position 0, in one go
    assert cli(settings, "sessions", "--json").stdout == resumed
    assert b'"prompt_count": 2' in resumed  # 258c7280: two human prompts, not four


@pytest.mark.postgres
def test_opening_existing_read_models_reads_the_catalogue_in_a_few_queries(tmp_path: Path) -> None:
    # Every build() (each CLI command, each server and its projection child) opened the
    # read models with a has_table query per table, then has_table and get_columns per
    # table again for the upgrade check: on PostgreSQL 3 round trips per table, a tenth
    # of a second per start. The catalogue is now read once for all tables.
    with _fresh_store("postgres", tmp_path / "data") as settings:
        build(settings).close()  # the tables exist
        engine = make_engine(settings.views_url(), settings.database_schema)
        statements: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        try:
            models = ReadModels(engine)
        finally:
            engine.dispose()
    tables = [t for own in models.tables.values() for t in own.values()]
    assert len(tables) > 10
    assert len(statements) < len(tables), statements


def test_a_sessions_log_positions_are_found_through_an_index(settings: Settings) -> None:
    # The positions of one session's events (GET /v1/sessions/{id}/events, a stream
    # filtered on a session, a fork) were a scan of every event_index row: 0.3 s per
    # request at 580k events, whatever the session's size. The index on (stream_id,
    # version) is there in a new store, after a rebuild swapped the table, and in a
    # store whose event_index was made before it.
    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts"))

    def indexed() -> bool:
        engine = make_engine(settings.views_url(), settings.database_schema)
        try:
            found = inspect(engine).get_indexes("event_index")
            plan = ""
            if engine.dialect.name == "sqlite":  # and the query uses it
                with engine.connect() as conn:
                    plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
                        "EXPLAIN QUERY PLAN SELECT version, position FROM event_index "
                        "WHERE stream_id = 'x' AND version > 7"))
        finally:
            engine.dispose()
        return "SCAN" not in plan and any(ix["column_names"] == ["stream_id", "version"] for ix in found)

    assert indexed()
    cli(settings, "projections", "rebuild", "event_index")
    assert indexed()
    engine = make_engine(settings.views_url(), settings.database_schema)
    try:
        with engine.begin() as conn:
            for ix in inspect(conn).get_indexes("event_index"):
                conn.exec_driver_sql(f'DROP INDEX "{ix["name"]}"')
    finally:
        engine.dispose()
    assert not indexed()
    cli(settings, "stats", "--json")  # opens the read models
    assert indexed()
