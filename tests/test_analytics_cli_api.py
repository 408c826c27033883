"""``hookledger sql``, ``hookledger analytics`` and ``GET /v1/analytics/{query}`` against a
real store (CLI subprocesses, a real server), on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from ledger.config import Settings

from conftest import FIXTURES, Server, cli

AGENTCMD = FIXTURES / "agentcmd-claude-transcripts"


def test_sql_formats_and_read_only(settings: Settings, tmp_path: Path) -> None:
    cli(settings, "import", str(AGENTCMD))
    stats = json.loads(cli(settings, "stats", "--json").stdout)
    q = "SELECT count(*) AS n, count(DISTINCT stream_id) AS streams FROM events"
    rows = json.loads(cli(settings, "sql", q, "--format", "json").stdout)
    assert rows == [{"n": stats["events"], "streams": rows[0]["streams"]}]
    assert rows[0]["streams"] >= stats["sessions"]
    out = cli(settings, "sql", "SELECT id, agent FROM sessions ORDER BY id", "--format", "csv")
    table = list(csv.reader(io.StringIO(out.stdout.decode())))
    assert table[0] == ["id", "agent"] and len(table) == 1 + stats["sessions"]
    text = cli(settings, "sql", "SELECT count(*) AS n FROM tool_calls").stdout.decode()
    assert "n" in text.splitlines()[0] and "(1 rows)" in text
    target = tmp_path / "usage.parquet"
    cli(settings, "sql", "SELECT * FROM usage", "--format", "parquet", "--output", str(target))
    n_usage = json.loads(cli(settings, "sql", "SELECT count(*) AS n FROM usage",
                             "--format", "json").stdout)[0]["n"]
    assert pq.read_table(target).num_rows == n_usage > 0
    denied = cli(settings, "sql", "DELETE FROM events", check=False)
    assert denied.returncode == 1 and b"read-only" in denied.stderr
    after = json.loads(cli(settings, "sql", q, "--format", "json").stdout)
    assert after == rows  # nothing was deleted
    bad = cli(settings, "sql", "SELECT * FROM no_such_table", check=False)
    assert bad.returncode == 1 and b"no_such_table" in bad.stderr


def test_analytics_command(settings: Settings) -> None:
    cli(settings, "import", str(AGENTCMD))
    listing = cli(settings, "analytics").stdout.decode()
    for name in ("cost-per-day", "tool-usage", "session-durations", "error-rate",
                 "busiest-projects"):
        assert name in listing
    tools = json.loads(cli(settings, "analytics", "tool-usage", "--json").stdout)
    total = json.loads(cli(settings, "sql", "SELECT count(*) AS n FROM tool_calls",
                           "--format", "json").stdout)[0]["n"]
    assert sum(t["calls"] for t in tools) == total > 0
    unknown = cli(settings, "analytics", "nope", check=False)
    assert unknown.returncode == 2 and b"unknown query" in unknown.stderr
    bad = cli(settings, "analytics", "tool-usage", "--since", "last tuesday", check=False)
    assert bad.returncode == 2 and b"since" in bad.stderr
    # --since without a query listed the queries and ignored it
    alone = cli(settings, "analytics", "--since", "2025-01-01", check=False)
    assert alone.returncode == 2 and b"QUERY" in alone.stderr
    # a valid ISO time whose UTC instant is outside datetime's range: a usage error
    for edge in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+01:00"):
        bad = cli(settings, "analytics", "cost-per-day", "--since", edge, check=False)
        assert bad.returncode == 2 and b"since" in bad.stderr, bad.stderr[-400:]
        assert b"Traceback" not in bad.stderr
    rebuilt = cli(settings, "analytics", "--rebuild", "tool-usage", "--json")
    assert json.loads(rebuilt.stdout) == tools


def test_http_named_queries(settings: Settings) -> None:
    cli(settings, "import", str(AGENTCMD))
    expected = json.loads(cli(settings, "analytics", "error-rate", "--json").stdout)
    expected_days = json.loads(cli(settings, "analytics", "cost-per-day", "--json").stdout)
    srv = Server(settings).start()
    try:
        listing = httpx.get(srv.url + "/v1/analytics", timeout=30).json()
        assert "busiest-projects" in listing["queries"]
        r = httpx.get(srv.url + "/v1/analytics/error-rate", timeout=60)
        assert r.status_code == 200 and r.json()["rows"] == expected
        r = httpx.get(srv.url + "/v1/analytics/tool-usage", params={"limit": 2}, timeout=60)
        assert r.status_code == 200 and len(r.json()["rows"]) == 2
        # since after every usage record: no rows
        r = httpx.get(srv.url + "/v1/analytics/cost-per-day", params={"since": "2100-01-01"},
                      timeout=60)
        assert r.status_code == 200 and r.json()["rows"] == []
        # an offset with an unescaped '+' (decoded to a space) is still that offset
        latest = max(row["day"] for row in expected_days)
        for since in (f"{latest}T00:00:00+00:00", f"{latest}T01:00:00%2B01:00"):
            r = httpx.get(srv.url + f"/v1/analytics/cost-per-day?since={since}", timeout=60)
            assert r.status_code == 200, r.text
            assert {row["day"] for row in r.json()["rows"]} == {latest}
        assert httpx.get(srv.url + "/v1/analytics/nope", timeout=30).status_code == 404
        r = httpx.get(srv.url + "/v1/analytics/tool-usage", params={"since": "soon"}, timeout=60)
        assert r.status_code == 400 and "since" in r.json()["error"]
        r = httpx.get(srv.url + "/v1/analytics/tool-usage",
                      params={"since": "9999-12-31T23:00:00-05:00"}, timeout=60)
        assert r.status_code == 400 and "since" in r.json()["error"]  # was a 500
        r = httpx.get(srv.url + "/v1/analytics/tool-usage", params={"sql": "SELECT 1"},
                      timeout=60)
        assert r.status_code == 400  # no SQL over HTTP
        assert httpx.post(srv.url + "/v1/analytics/tool-usage", timeout=30).status_code == 405
        # a hook through the server shows up in the next answer
        hook = {"session_id": "analytics-http-1", "hook_event_name": "PreToolUse",
                "tool_name": "ZzzProbe", "tool_input": {}, "tool_use_id": "toolu_probe",
                "cwd": "/tmp", "transcript_path": "/tmp/x.jsonl"}
        posted = httpx.post(srv.url + "/v1/hooks/claude-code", json=hook, timeout=30)
        assert posted.status_code == 202
        rows = httpx.get(srv.url + "/v1/analytics/tool-usage", params={"limit": 1000},
                         timeout=60).json()["rows"]
        assert [r["calls"] for r in rows if r["tool_name"] == "ZzzProbe"] == [1]
    finally:
        srv.stop()


def test_time_zone_aware_results(settings: Settings) -> None:
    import tomllib

    # DuckDB's Python client needs pytz for any TIMESTAMPTZ value: it is a dependency
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert any(d.split(">")[0].split("=")[0].strip() == "pytz"
               for d in project["project"]["dependencies"])
    cli(settings, "import", str(AGENTCMD))
    q = "SELECT max(occurred_at)::TIMESTAMPTZ AS last, now() AS now FROM events"
    for fmt in ("table", "csv", "json"):
        out = cli(settings, "sql", q, "--format", fmt)
        assert b"2026" in out.stdout or b"2025" in out.stdout, out


def test_sql_json_of_nested_and_special_values(settings: Settings) -> None:
    cli(settings, "import", str(AGENTCMD))
    q = """SELECT session_id, list(tool_name ORDER BY started_at) AS tools,
                  list(started_at ORDER BY started_at)[1:2] AS starts,
                  {'id': any_value(session_id), 'n': count(*)} AS s,
                  MAP {'calls': count(*)} AS m,
                  TIME '12:00:01.5' AS t, '\\x00\\xFFhi'::BLOB AS b,
                  'NaN'::DOUBLE AS nan, 'inf'::DOUBLE AS inf, '-inf'::FLOAT AS ninf
           FROM tool_calls GROUP BY 1 ORDER BY 1 LIMIT 1"""
    text = cli(settings, "sql", q, "--format", "json").stdout.decode()
    (row,) = json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert row["tools"] and all(isinstance(t, str) for t in row["tools"])
    assert all(s.endswith("Z") for s in row["starts"])
    assert row["s"] == {"id": row["session_id"], "n": len(row["tools"])}
    assert row["m"] == {"calls": len(row["tools"])}
    assert row["t"] == "12:00:01.500000" and row["b"] == "AP9oaQ=="
    assert row["nan"] is None and row["inf"] is None and row["ninf"] is None


def test_sql_output_errors_are_clear(settings: Settings, tmp_path: Path) -> None:
    cli(settings, "import", str(AGENTCMD))
    target = tmp_path / "x.parquet"
    r = cli(settings, "sql", "SET threads = 2", "--format", "parquet", "--output", str(target),
            check=False)
    assert r.returncode == 1 and b"returns rows" in r.stderr and b"Traceback" not in r.stderr
    missing = tmp_path / "missing-dir" / "x.csv"
    r = cli(settings, "sql", "SELECT 1 AS x", "--format", "csv", "--output", str(missing),
            check=False)
    assert r.returncode == 1 and b"no directory" in r.stderr and b"Traceback" not in r.stderr
    assert not target.exists() and not missing.exists()
    for blank in ("", " ; ", "/* nothing */"):  # no statement at all: an error, no traceback
        r = cli(settings, "sql", blank, check=False)
        assert r.returncode == 1 and b"no SQL statement" in r.stderr, r.stderr[-400:]


def test_sql_runs_one_statement_on_the_model_and_touches_no_file(
    settings: Settings, tmp_path: Path
) -> None:
    # several statements ran them all and showed only the last one's rows; read_csv
    # read any file and COPY ... TO wrote one
    cli(settings, "import", str(AGENTCMD))
    r = cli(settings, "sql", "SELECT 1 AS a; SELECT 2 AS b", "--format", "json", check=False)
    assert r.returncode == 1 and b"2 statements" in r.stderr, r.stdout
    outside = tmp_path / "outside.csv"
    outside.write_text("secret\nvalue\n")
    r = cli(settings, "sql", f"SELECT * FROM read_csv('{outside}')", check=False)
    assert r.returncode == 1 and b"value" not in r.stdout, r.stdout
    copied = tmp_path / "copied.csv"
    r = cli(settings, "sql", f"COPY (SELECT 1 AS x) TO '{copied}'", check=False)
    assert r.returncode == 1 and not copied.exists()
    r = cli(settings, "sql", "SET enable_external_access = true", check=False)
    assert r.returncode == 1


def test_sql_csv_of_nested_values_and_booleans(settings: Settings) -> None:
    cli(settings, "import", str(AGENTCMD))
    q = """SELECT [1, 2] AS l, {'a': 'x', 'at': max(started_at)} AS s, true AS yes,
                  false AS no, NULL AS nothing, list(DISTINCT tool_name ORDER BY tool_name)[1:2]
                  AS tools FROM tool_calls"""
    out = cli(settings, "sql", q, "--format", "csv").stdout.decode()
    header, row = list(csv.reader(io.StringIO(out)))
    assert header == ["l", "s", "yes", "no", "nothing", "tools"]
    assert json.loads(row[0]) == [1, 2]
    s = json.loads(row[1])
    assert s["a"] == "x" and s["at"].endswith("Z")
    assert row[2:5] == ["true", "false", ""]
    assert len(json.loads(row[5])) == 2
