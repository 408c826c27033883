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
import sys, time
from projections.analytics import open_snapshot
con = open_snapshot(sys.argv[1])
print("open", flush=True)
counts = set()
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
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
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
        out, err = reader.communicate(timeout=60)
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


MIRRORED_VERSIONS = {"Summarised": 2}
"""Classes above version 1 whose upcasts extract.py was checked against: Summarised v2
only adds ``tokens_estimated`` (False for v1), a field the extraction does not read."""


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
