"""The DuckDB analytics model equals the relational read models, catches up exactly once
(also after a kill or an error between sections), and readers never fight the writer.

Runs on both event stores (``settings``/``services`` fixtures: SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from api.bootstrap import Services
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.quarantine import Quarantine
from ledger.session import Session
from projections.analytics import catch_up, open_snapshot, rebuild, run_query
from projections.analytics.runner import position
from projections.analytics.store import analytics_path, open_writer, writer_lock

from conftest import FIXTURES, settings_env

SPOTTER = FIXTURES / "spotter-claude-transcripts"
AGENTCMD = FIXTURES / "agentcmd-claude-transcripts"
TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def relational_totals(services: Services) -> dict[str, Any]:
    """Counts and token totals of the relational read models (SQLAlchemy)."""
    s = services.models.table("sessions")
    with services.models.engine.connect() as c:
        row = c.execute(
            select(
                func.count(),
                *(func.sum(s.c[t]) for t in TOKENS),
                func.sum(s.c.prompt_count),
                func.sum(s.c.tool_call_count),
                func.sum(s.c.tool_error_count),
                func.sum(s.c.event_count),
                func.sum(s.c.cost_usd),
            )
        ).one()
        out = dict(zip(
            ["sessions", *TOKENS, "prompts", "session_tool_calls", "tool_errors", "events",
             "cost_usd"], row, strict=True))
        out["batches"] = c.execute(
            select(func.count()).select_from(services.models.table("prompt_batches"))
        ).scalar_one()
        out["tool_calls"] = c.execute(
            select(func.count()).select_from(services.models.table("tool_calls"))
        ).scalar_one()
        out["usage_messages"] = c.execute(
            select(func.count()).select_from(services.models.table("session_usage"))
        ).scalar_one()
    out["cost_usd"] = round(float(out["cost_usd"] or 0), 6)
    return {k: (int(v) if isinstance(v, int | float) and k != "cost_usd" else v)
            for k, v in out.items()}


def duckdb_totals(con: Any) -> dict[str, Any]:
    row = con.execute(
        "SELECT count(*), " + ", ".join(f"sum({t})" for t in TOKENS)
        + ", sum(prompt_count), sum(tool_call_count), sum(tool_error_count), sum(event_count),"
        " sum(cost_usd) FROM sessions"
    ).fetchone()
    out = dict(zip(
        ["sessions", *TOKENS, "prompts", "session_tool_calls", "tool_errors", "events",
         "cost_usd"], row, strict=True))
    out["batches"] = con.execute("SELECT count(*) FROM prompt_batches").fetchone()[0]
    out["tool_calls"] = con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]
    out["usage_messages"] = con.execute("SELECT count(*) FROM usage").fetchone()[0]
    out["cost_usd"] = round(float(out["cost_usd"] or 0), 6)
    return {k: (int(v) if isinstance(v, int | float) and k != "cost_usd" else v)
            for k, v in out.items()}


def session_events_in_store(services: Services) -> int:
    """Session events in the log, counted from the notifications' topics."""
    n = services.ledger.recorder.select_notifications(start=None, limit=10**9)
    return sum(1 for x in n if x.topic.startswith("ledger.session:Session."))


def tool_use_blocks(*dirs: Path) -> Counter[str]:
    """Independent count: distinct ``tool_use`` blocks per tool name, read with plain json."""
    seen: dict[tuple[Any, ...], str] = {}
    for d in dirs:
        for f in sorted(d.rglob("*.jsonl")):
            for line in f.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                msg = rec.get("message")
                content = msg.get("content") if isinstance(msg, dict) else None
                for b in content if isinstance(content, list) else []:
                    if isinstance(b, dict) and b.get("type") == "tool_use":
                        seen[(rec.get("sessionId"), rec.get("agentId"), b["id"])] = b["name"]
    return Counter(seen.values())


def write_renamed_copy(src: Path, dest: Path, tag: str) -> None:
    """Copy transcripts with ``-tag`` on every id, so they are new sessions and records."""
    for f in sorted(src.rglob("*.jsonl")):
        out = dest / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                lines.append(line)
                continue
            for k in ("sessionId", "uuid", "parentUuid", "agentId", "leafUuid"):
                if isinstance(rec.get(k), str):
                    rec[k] = f"{rec[k]}-{tag}"
            msg = rec.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("id"), str):
                msg["id"] = f"{msg['id']}-{tag}"
            lines.append(json.dumps(rec))
        out.write_text("\n".join(lines), encoding="utf-8")


def test_duckdb_equals_relational_models_and_catches_up(services: Services, tmp_path: Path) -> None:
    import_paths(services.ledger, [SPOTTER, AGENTCMD])
    services.runner.catch_up()
    data = services.settings.data_dir
    catch_up(services.ledger, data)
    con = open_snapshot(data)
    assert duckdb_totals(con) == relational_totals(services)
    expected = relational_totals(services)
    assert expected["sessions"] > 10 and expected["tool_calls"] > 200  # real data, not empty
    # events: every notification once, session events as counted from the log's topics
    assert con.execute("SELECT count(*), max(position) FROM events").fetchone() == (
        services.ledger.max_position(), services.ledger.max_position())
    assert con.execute("SELECT count(*) FROM events WHERE stream_type = 'Session'").fetchone()[
        0] == session_events_in_store(services)
    # tool usage per tool equals the tool_use blocks counted with plain json
    by_tool = {r["tool_name"]: r["calls"] for r in run_query(con, "tool-usage", limit=1000)}
    assert by_tool == dict(tool_use_blocks(SPOTTER, AGENTCMD))
    con.close()

    # 1,000+ more events: the model catches up and still equals the relational one
    write_renamed_copy(SPOTTER, tmp_path / "copy", "more")
    before = services.ledger.max_position()
    appended = import_paths(services.ledger, [tmp_path / "copy"]).result.appended
    assert appended >= 1000
    services.runner.catch_up()
    applied = catch_up(services.ledger, data)
    assert applied == services.ledger.max_position() - before
    con = open_snapshot(data)
    after = duckdb_totals(con)
    assert after == relational_totals(services)
    assert after["sessions"] > expected["sessions"]
    con.close()
    assert catch_up(services.ledger, data) == 0  # nothing new: nothing applied twice


KILL_AFTER_TWO_SECTIONS = """
import os, signal
from ledger.app import Ledger
from ledger.config import Settings
from projections.analytics import catch_up
s = Settings.from_env()
ledger = Ledger(s.event_store_env())
done = []
def die(pos):
    done.append(pos)
    if len(done) == 2:
        os.kill(os.getpid(), signal.SIGKILL)   # mid catch-up: two sections committed
catch_up(ledger, s.data_dir, section=500, after_section=die)
"""


def test_catch_up_killed_midway_does_not_double_count(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER, AGENTCMD])
    services.runner.catch_up()
    assert services.ledger.max_position() > 1500
    died = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_TWO_SECTIONS], env=settings_env(services.settings),
        capture_output=True,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()
    data = services.settings.data_dir
    with writer_lock(data):  # the kernel released the dead process's lock
        con = open_writer(data)
        assert position(con) == 1000
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 1000
        con.close()
    catch_up(services.ledger, data)
    con = open_snapshot(data)
    assert duckdb_totals(con) == relational_totals(services)
    assert con.execute("SELECT count(*), count(DISTINCT position) FROM events").fetchone() == (
        services.ledger.max_position(), services.ledger.max_position())
    con.close()


def test_error_between_sections_then_rerun_does_not_double_count(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    data = services.settings.data_dir

    def fail(pos: int) -> None:
        if pos >= 600:
            raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        catch_up(services.ledger, data, section=300, after_section=fail)
    with writer_lock(data):
        con = open_writer(data)
        assert position(con) == 600
        con.close()
    catch_up(services.ledger, data, section=300)
    con = open_snapshot(data)
    resumed = duckdb_totals(con)
    con.close()
    assert resumed == relational_totals(services)
    rebuild(services.ledger, data)  # delete and replay, in one go
    con = open_snapshot(data)
    assert duckdb_totals(con) == resumed
    con.close()


READER = """
import sys, threading, time
from projections.analytics import open_snapshot
con = open_snapshot(sys.argv[1])
print("open", flush=True)
done = threading.Event()  # set when the test closes our stdin
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
counts = set()
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and not done.is_set():
    counts.add(con.execute("SELECT count(*) FROM events").fetchone()[0])
    time.sleep(0.01)
print(sorted(counts), flush=True)
"""


def test_reader_while_the_writer_catches_up(services: Services, tmp_path: Path) -> None:
    import_paths(services.ledger, [AGENTCMD])
    data = services.settings.data_dir
    catch_up(services.ledger, data)
    first = services.ledger.max_position()
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(data), "30"], env=settings_env(services.settings),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "open"
        # the writer catches up (and publishes) while the reader holds its snapshot open
        import_paths(services.ledger, [SPOTTER])
        t0 = time.monotonic()
        applied = catch_up(services.ledger, data, section=500)
        assert applied == services.ledger.max_position() - first
        assert time.monotonic() - t0 < 30, "the writer waited for the reader"
        con = open_snapshot(data)  # a new reader sees the new position
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == (
            services.ledger.max_position())
        con.close()
        # the reader still reads its old snapshot (it reads until told, up to 30 s): the
        # writer did not wait for it to end
        assert reader.poll() is None
        out, err = reader.communicate(timeout=60)  # closes its stdin: it stops reading
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, err
    assert json.loads(out.strip()) == [first]  # the old snapshot stayed whole and readable


def test_readers_cannot_write(services: Services) -> None:
    import duckdb

    import_paths(services.ledger, [AGENTCMD])
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("DELETE FROM events")
    con.close()
    assert analytics_path(services.settings.data_dir).exists()


def test_the_sql_constants_agree_with_the_code() -> None:
    from ledger.lifecycle import ENDED_STATES, NOT_ACTIVITY
    from projections.analytics import extract

    assert "(" + ", ".join(sorted(f"'{s}'" for s in ENDED_STATES)) + ")" == extract._ENDED_STATES
    assert "(" + ", ".join(sorted(f"'{k}'" for k in NOT_ACTIVITY)) + ")" == extract._NOT_ACTIVITY
    assert extract.INSERT_PRICES.count("?") == len(extract.PRICE_COLUMNS)
    assert f"({', '.join(extract.PRICE_COLUMNS)})" in extract.INSERT_PRICES
    assert all(len(r) == len(extract.PRICE_COLUMNS)
               for r in extract.price_rows(["claude-sonnet-4", "no-such-model"]))


MIRRORED_VERSIONS = {"Summarised": 2, "UsageRecorded": 2}
"""Classes above version 1 whose upcasts extract.py was checked against: Summarised v2
only adds ``tokens_estimated`` (False for v1), a field the extraction does not read;
UsageRecorded v2 adds ``cache_creation_1h_input_tokens`` (0 for v1), read as 0 when NULL."""


def test_every_event_class_is_at_version_one() -> None:
    # The SQL extraction reads stored JSON directly (projections/analytics/extract.py):
    # an upcast (class_version 2) must be mirrored there before this is changed.
    for outer in (Session, Quarantine):
        for name, cls in vars(outer).items():
            if isinstance(cls, type) and hasattr(cls, "class_version"):
                expected = MIRRORED_VERSIONS.get(name, 1)
                assert cls.class_version == expected, f"{outer.__name__}.{name}: update extract.py"


def test_named_query_parameters(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER, AGENTCMD])
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    days = run_query(con, "cost-per-day")
    assert len({(r["day"], r["model"]) for r in days}) == len(days)  # one row per day, model
    latest = max(r["day"] for r in days)
    since = run_query(con, "cost-per-day", since=latest)
    assert {r["day"] for r in since} == {latest}
    n_usage = con.execute("SELECT count(*) FROM usage").fetchone()[0]
    assert sum(r["responses"] for r in days) == n_usage
    assert len(run_query(con, "tool-usage", limit=2)) == 2
    with pytest.raises(ValueError, match="since"):
        run_query(con, "tool-usage", since="yesterday")
    with pytest.raises(ValueError, match="limit"):
        run_query(con, "tool-usage", limit=0)
    with pytest.raises(KeyError):
        run_query(con, "DROP TABLE events")
    buckets = run_query(con, "session-durations")
    assert sum(b["sessions"] for b in buckets) == con.execute(
        "SELECT count(*) FROM sessions WHERE started_at IS NOT NULL").fetchone()[0]
    con.close()


def test_a_session_terminated_later_keeps_its_duration(services: Services) -> None:
    from datetime import UTC, datetime
    from uuid import UUID

    from ledger.commands import run_command

    import_paths(services.ledger, [AGENTCMD])  # real sessions of 2025, none ended
    data = services.settings.data_dir
    catch_up(services.ledger, data)
    con = open_snapshot(data)
    before = run_query(con, "session-durations")
    sid, lasted = con.execute(
        "SELECT id, epoch(last_activity_at - started_at) FROM sessions WHERE ended_at IS NULL"
        " AND started_at IS NOT NULL ORDER BY last_activity_at - started_at DESC LIMIT 1"
    ).fetchone()
    con.close()
    assert 60 <= lasted < 14400
    # an operator terminates it now, long after its last activity: the command's (ledger)
    # time is its end, but not its duration
    run_command(services.ledger, UUID(str(sid)), "terminate", "t1", datetime.now(UTC))
    catch_up(services.ledger, data)
    con = open_snapshot(data)
    try:
        ended = con.execute("SELECT ended_at FROM sessions WHERE id = ?", [sid]).fetchone()[0]
        assert ended.year >= 2026  # the command's time
        assert run_query(con, "session-durations") == before  # was: one session in ">= 4 h"
    finally:
        con.close()


def test_connect_catches_up_from_a_data_dir(settings: Settings) -> None:
    from projections.analytics import connect

    env = settings_env(settings)
    code = (
        "from api.bootstrap import build; from ledger.config import Settings; "
        "from ledger.importer import import_paths; s = build(Settings.from_env()); "
        f"import_paths(s.ledger, [{str(AGENTCMD)!r}]); print(s.ledger.max_position())"
    )
    head = int(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                              capture_output=True, text=True).stdout)
    con = connect(settings)
    assert con.execute("SELECT max(position) FROM events").fetchone()[0] == head
    con.close()
    assert os.path.exists(analytics_path(settings.data_dir))


def _norm(value: Any) -> Any:
    """One representation for both stores: times as UTC ISO with milliseconds, floats
    rounded, booleans as bools, UUIDs as strings."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:23]
    if isinstance(value, str) and len(value) >= 20 and value[4] == "-" and value[10] == "T":
        return value.removesuffix("Z").ljust(23, "0")[:23]
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, bool | int | str) or value is None:
        return value
    return str(value)


BOOLEAN_COLUMNS = {"is_error", "interrupted"}
COMPARED = {  # relational table -> (DuckDB table, key columns)
    "sessions": ("sessions", ("id",)),
    "session_usage": ("usage", ("session_id", "message_id")),
    "tool_calls": ("tool_calls", ("session_id", "tool_use_id")),
    "prompt_batches": ("prompt_batches", ("session_id", "batch")),
}


def _caught_up_and_equal(services: Services) -> Any:
    """Both models caught up; the DuckDB snapshot (the caller closes it), asserted equal
    to the relational read models row for row."""
    services.runner.catch_up()
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    found = differences(services, con)
    if found:
        con.close()
    assert found == {}, {t: (Counter(d[0] for d in diffs), diffs[:3]) for t, diffs in found.items()}
    return con


def differences(services: Services, con: Any) -> dict[str, list[Any]]:
    """Every row and every column the relational model and DuckDB share, compared."""
    found: dict[str, list[Any]] = {}
    for rel_name, (duck_name, key) in COMPARED.items():
        table = services.models.table(rel_name)
        with services.models.engine.connect() as c:
            rel = {tuple(str(r[k]) for k in key): dict(r) for r in c.execute(select(table)).mappings()}
        cur = con.execute(f"SELECT * FROM {duck_name}")
        names = [d[0] for d in cur.description]
        duck = {}
        for r in cur.fetchall():
            row = dict(zip(names, r, strict=True))
            duck[tuple(str(row[k]) for k in key)] = row
        shared = [n for n in names if n in table.c]
        assert len(shared) >= len(names) - 2, (duck_name, set(names) - set(shared))
        out = [("only relational", k) for k in rel.keys() - duck.keys()]
        out += [("only duckdb", k) for k in duck.keys() - rel.keys()]
        for k in rel.keys() & duck.keys():
            for col in shared:
                a, b = rel[k][col], duck[k][col]
                if col in BOOLEAN_COLUMNS:
                    a, b = bool(a), bool(b)
                if _norm(a) != _norm(b):
                    out.append((col, k, a, b))
        if out:
            found[duck_name] = sorted(out, key=str)
    return found


def test_duckdb_equals_relational_rows_after_jobs_commands_and_a_failed_run(
    services: Services,
) -> None:
    import io
    from datetime import UTC, datetime
    from uuid import UUID

    from api.jobs import run_jobs
    from ledger.agent_runner import run_agent
    from ledger.commands import run_command

    # every fixture but the recording the run below replays
    recording = FIXTURES / "claude_code-elixir-stream-json" / "read_file.jsonl"
    paths = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".md")
    import_paths(services.ledger, [p for p in paths if p != recording])
    # a `hookledger run` whose stream is cut before its result line and that exits 3:
    # RunEnded(failed) ends the session and its open batch
    fake = Path(__file__).parent / "tools" / "fake_agent.py"
    outcome = run_agent(
        services.ledger, [sys.executable, str(fake), str(recording), "--cut", "--exit", "3"],
        out=io.BytesIO(), prompt="read the file",
    )
    assert outcome.outcome == "failed"
    services.runner.catch_up()
    # an operator terminates a live session: CommandApplied into an ended state
    s = services.models.table("sessions")
    with services.models.engine.connect() as c:
        live = c.execute(
            select(s.c.id).where(s.c.ended_at.is_(None), s.c.status == "ACTIVE").order_by(s.c.id)
        ).scalars().first()
    assert live is not None
    run_command(services.ledger, UUID(live), "terminate", "t1", datetime.now(UTC))
    # the liveness jobs (the wall clock: long after the recordings): idle batches closed,
    # unbatched activity attached (recovery batches), sessions timed out and archived
    report = run_jobs(services)
    for rule in ("idle_batch", "unbatched_activity", "idle_session", "archive_after"):
        assert report.decisions.get(rule, 0) > 0, rule
    con = _caught_up_and_equal(services)
    try:
        # the cases the jobs and the run decide are there, not only agreeing empties
        reasons = dict(con.execute(
            "SELECT end_reason, count(*) FROM prompt_batches GROUP BY 1").fetchall())
        assert reasons.get("idle_timeout") and reasons.get("recovery") and reasons.get("run_failed")
        assert con.execute(
            "SELECT count(*) FROM sessions WHERE ended_at IS NOT NULL").fetchone()[0] > 10
    finally:
        con.close()


def test_a_file_of_an_older_schema_is_rebuilt(services: Services) -> None:
    import_paths(services.ledger, [AGENTCMD])
    data = services.settings.data_dir
    catch_up(services.ledger, data)
    with writer_lock(data):  # what a version without the lifecycle columns left behind
        con = open_writer(data)
        con.execute("DELETE FROM analytics_meta WHERE key = 'schema_version'")
        con.execute("ALTER TABLE events DROP COLUMN measured_from")
        con.execute("UPDATE sessions SET cost_usd = 0")
        con.close()
    assert catch_up(services.ledger, data) == services.ledger.max_position()  # replayed
    with writer_lock(data):
        con = open_writer(data)
        assert "measured_from" in {d[0] for d in con.execute("SELECT * FROM events").description}
        assert con.execute("SELECT sum(cost_usd) FROM sessions").fetchone()[0] > 0
        con.close()


def test_a_subagents_type_from_a_task_call_in_a_later_section(services: Services) -> None:
    # the subagent's transcript first: its link to the parent's Task call (from the
    # parent's file) is in the log before that call, whose input names subagent_type
    parent = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    child = parent.with_suffix("") / "subagents" / "agent-a881341.jsonl"
    import_paths(services.ledger, [child, parent])
    services.runner.catch_up()
    t = services.models.table("event_index")
    with services.models.engine.connect() as c:
        link, call = (
            c.execute(select(t.c.position).where(t.c.event_key == key)).scalar_one()
            for key in ("parent:toolu_01VmaERAwhb19LGUwu9GenaK",
                        "tool:toolu_01VmaERAwhb19LGUwu9GenaK:start")
        )
    assert link < call
    data = services.settings.data_dir
    catch_up(services.ledger, data, stop=link)  # a section with the link, not the call
    catch_up(services.ledger, data)  # the call's section recomputes the subagent's row
    con = open_snapshot(data)
    try:
        found = con.execute(
            "SELECT agent_type FROM sessions WHERE external_id = ?",
            [f"{parent.stem}/agent-a881341"],
        ).fetchall()
        assert found == [("claude-code-guide",)]
        assert differences(services, con) == {}
    finally:
        con.close()


def test_calls_that_never_finished_have_no_duration(services: Services) -> None:
    import statistics

    import_paths(services.ledger, [AGENTCMD])  # real transcripts with calls left open
    services.runner.catch_up()
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    open_calls = con.execute(
        "SELECT count(*), count(duration_ms) FROM tool_calls WHERE completed_at IS NULL"
    ).fetchone()
    assert open_calls[0] > 0 and open_calls[1] == 0
    # tool-usage times the finished calls only, as the relational tool_calls has them
    t = services.models.table("tool_calls")
    with services.models.engine.connect() as c:
        durations: dict[str, list[int]] = {}
        for name, ms in c.execute(select(t.c.tool_name, t.c.duration_ms)):
            durations.setdefault(name, [])
            if ms is not None:
                durations[name].append(ms)
    for row in run_query(con, "tool-usage", limit=1000):
        timed = durations[row["tool_name"]]
        assert row["timed_calls"] == len(timed), row
        assert row["p50_ms"] == (round(statistics.median(timed), 1) if timed else None), row
    con.close()


def test_long_context_responses_are_priced_at_the_long_context_rates(
    services: Services, tmp_path: Path
) -> None:
    from projections import pricing

    # a real transcript, its model set to one with a long-context tier (Sonnet 4 above
    # 200k prompt tokens) and one response's prompt pushed over that threshold
    model = "claude-sonnet-4-20250514"
    price = pricing.price_for(model)
    assert price is not None and price.above is not None and price.above_tokens is not None
    src = AGENTCMD / "full-session-two.jsonl"
    lines, pushed = [], None
    for line in src.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        msg = rec.get("message")
        if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
            msg["model"] = model
            pushed = pushed or msg["id"]
            if msg["id"] == pushed:  # every record of the first response (the last wins)
                msg["usage"]["cache_read_input_tokens"] += price.above_tokens
        lines.append(json.dumps(rec))
    assert pushed
    (tmp_path / "long.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_paths(services.ledger, [tmp_path / "long.jsonl"])
    services.runner.catch_up()
    catch_up(services.ledger, services.settings.data_dir)
    con = open_snapshot(services.settings.data_dir)
    rows = con.execute(
        "SELECT model, input_tokens, output_tokens, cache_creation_input_tokens, "
        "cache_read_input_tokens, cost_usd FROM usage").fetchall()
    long = [r for r in rows if r[1] + r[3] + r[4] > price.above_tokens]
    assert long and len(long) < len(rows)
    for r in rows:
        assert r[5] == pytest.approx(pricing.cost_usd(r[0], r[1], r[2], r[3], r[4]), rel=1e-12)
    found = differences(services, con)
    assert found == {}, found
    con.close()


def test_readers_see_a_rebuilt_or_repriced_model_at_the_same_position(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy

    import duckdb

    from projections import pricing
    from projections.analytics.store import snapshots

    import_paths(services.ledger, [AGENTCMD])
    data = services.settings.data_dir
    catch_up(services.ledger, data)
    con = open_snapshot(data)
    cost = con.execute("SELECT sum(cost_usd) FROM usage").fetchone()[0]
    con.close()
    assert cost > 0
    # a snapshot with wrong rows (as an older, buggy version wrote them): a rebuild at
    # the same log position replaces it for new readers
    w = duckdb.connect(str(snapshots(data)[-1][1]))
    w.execute("UPDATE usage SET cost_usd = 0")
    w.close()
    rebuild(services.ledger, data)
    con = open_snapshot(data)
    assert con.execute("SELECT sum(cost_usd) FROM usage").fetchone()[0] == pytest.approx(cost)
    con.close()
    # a new bundled price table (doubled prices) re-prices the model: readers see it
    table = copy.deepcopy(pricing.table())
    table["version"] = "test-doubled@2099-01-01"
    for m in table["models"].values():
        for k in ("input", "output", "cache_read", "cache_write"):
            if m.get(k) is not None:
                m[k] *= 2
    for cached in (pricing.table, pricing._prices, pricing.price_for):
        cached.cache_clear()
    monkeypatch.setattr(pricing, "table", lambda: table)
    try:
        assert catch_up(services.ledger, data) == 0  # the log did not move
        con = open_snapshot(data)
        assert con.execute("SELECT sum(cost_usd) FROM usage").fetchone()[0] == pytest.approx(
            2 * cost)
        con.close()
    finally:
        monkeypatch.undo()
        for cached in (pricing._prices, pricing.price_for):
            cached.cache_clear()


def test_one_data_dir_used_with_two_event_stores_never_mixes_them(
    services: Services, other_settings: Settings, tmp_path: Path
) -> None:
    from api.bootstrap import build

    other = build(other_settings)
    try:
        import_paths(services.ledger, [AGENTCMD])
        import_paths(other.ledger, [SPOTTER])
        shared = tmp_path / "shared-data-dir"  # e.g. the platform default, two schemas
        for ledger in (services.ledger, other.ledger, services.ledger):
            catch_up(ledger, shared)
            con = open_snapshot(shared)
            assert con.execute("SELECT count(*), max(position) FROM events").fetchone() == (
                ledger.max_position(), ledger.max_position())
            con.close()
    finally:
        other.close()


def test_duckdb_equals_relational_rows_when_starts_arrive_after_their_completions(
    services: Services,
) -> None:
    """Real hook logs replayed completions first (every ``PostToolUse`` file before its
    ``PreToolUse`` file, as a replay in name order delivers them): the coorp session's
    calls (with ``tool_use_id``, the agent's ``duration_ms``) and the attio 2025 ones
    (paired by tool and input, no duration). Each ``PreToolUse`` was captured an hour
    before the ``PostToolUse`` payloads, so its ``LateStartObserved`` moves the call's
    start (and the computed durations): DuckDB's ``tool_calls`` follow the same rules."""
    from datetime import UTC, datetime, timedelta

    from ledger.ingest import ingest_hook

    at = datetime(2026, 1, 2, tzinfo=UTC)
    folders = (FIXTURES / "coorp-serverless-plugins-hook-logs" / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe",
               FIXTURES / "attio-mcp-server-hook-logs")
    for folder in folders:
        for name, captured in (("post_tool_use", at + timedelta(hours=1)), ("pre_tool_use", at)):
            for i, payload in enumerate(json.loads((folder / f"{name}.json").read_text())):
                body = json.dumps(payload).encode()
                key = f"{folder.name}/{name}:{i}"
                assert ingest_hook(services.ledger, "claude-code", body, key, captured).error is None
    con = _caught_up_and_equal(services)
    try:
        moved = con.execute(
            "SELECT count(*), count(*) FILTER (duration_ms >= 3600 * 1000) FROM tool_calls"
            " WHERE started_at = TIMESTAMP '2026-01-02 00:00:00'").fetchone()
        assert moved[0] > 100 and moved[1] > 100, moved  # (the attio calls: computed)
    finally:
        con.close()


def _drop_store(settings: Settings) -> None:
    """Remove the event store (and the read models) from where ``settings`` reach it,
    leaving the data directory's analytics file: a store to be replaced in place."""
    if not settings.is_postgres:
        for name in ("events.db", "views.db"):
            for suffix in ("", "-wal", "-shm"):
                (settings.data_dir / f"{name}{suffix}").unlink(missing_ok=True)
        return
    import psycopg

    from conftest import PG_URL

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{settings.database_schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{settings.database_schema}"')


def test_a_store_replaced_in_place_by_another_is_not_mixed_into_its_analytics(
    settings: Settings,
) -> None:
    """The analytics file was matched to the store by its URL form only: a store
    replaced in place by another one (another ``events.db`` in the data directory, a
    PostgreSQL schema emptied and refilled) kept the first store's rows. A store with an
    id (:mod:`ledger.store_id`) is now told apart from another one by it."""
    from api.bootstrap import build
    from ledger.store_id import store_id

    data = settings.data_dir
    first = build(settings)
    try:
        import_paths(first.ledger, [SPOTTER])
        store_id(first.ledger.recorder)  # as the first export makes it
        catch_up(first.ledger, data)
    finally:
        first.close()
    _drop_store(settings)
    second = build(settings)
    try:
        import_paths(second.ledger, [SPOTTER / "short.jsonl"])
        store_id(second.ledger.recorder)
        catch_up(second.ledger, data)
        head = second.ledger.max_position()
        assert 0 < head < 1000
        con = open_snapshot(data)
        try:
            assert con.execute("SELECT count(*), max(position) FROM events").fetchone() == (
                head, head)
        finally:
            con.close()
    finally:
        second.close()


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_the_same_store_through_another_url_keeps_its_analytics(settings: Settings) -> None:
    """One PostgreSQL store reached through ``127.0.0.1`` and then ``localhost`` (its
    URL form differs): the analytics file was deleted and rebuilt from the whole log; a
    store with an id keeps it."""
    from dataclasses import replace

    from sqlalchemy.engine import make_url

    from api.bootstrap import build
    from ledger.store_id import store_id
    from projections.analytics.store import generation

    u = make_url(settings.database_url or "")
    host = "localhost" if u.host in ("127.0.0.1", None) else "127.0.0.1"
    other = replace(settings, database_url=u.set(host=host).render_as_string(hide_password=False))
    data = settings.data_dir
    for s in (settings, other):
        services = build(s)
        try:
            if s is settings:
                import_paths(services.ledger, [SPOTTER / "short.jsonl"])
                store_id(services.ledger.recorder)
            catch_up(services.ledger, data)
        finally:
            services.close()
        with writer_lock(data):
            con = open_writer(data)
            try:
                found = generation(con)
            finally:
                con.close()
        if s is settings:
            kept = found
    assert found == kept, "the analytics file was rebuilt"
