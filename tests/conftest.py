"""Shared fixtures: a fresh store per test, on SQLite and (when reachable) PostgreSQL.

``backend`` is parametrised over ``sqlite`` and ``postgres``; the PostgreSQL variant
uses the server on 127.0.0.1:5432 (``HOOKLEDGER_TEST_PG_URL`` to override) with a
fresh schema per test, and is skipped — loudly, with the reason — when no server
answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.bootstrap import Services, build
from ledger.config import Settings

FIXTURES = Path(__file__).parent / "fixtures"
PG_URL = os.environ.get("HOOKLEDGER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL.replace("postgresql://", "postgresql://", 1), connect_timeout=3):
            return None
    except Exception as e:  # any failure means: skip with the reason
        return f"PostgreSQL not reachable at {PG_URL}: {e}"


_PG_SKIP = _pg_reachable()


def pytest_report_header(config: pytest.Config) -> str:
    return "postgres backend: " + ("SKIPPED — " + _PG_SKIP if _PG_SKIP else f"on ({PG_URL})")


@contextlib.contextmanager
def _fresh_store(backend: str, data_dir: Path) -> Iterator[Settings]:
    # transcripts named by hooks are followed only where a test asks (the follower is
    # timed by the wall clock): tests/test_transcript_follower.py
    if backend == "sqlite":
        yield Settings(data_dir, transcript_quiet_s=0)
        return
    if _PG_SKIP:
        pytest.skip(_PG_SKIP)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Settings(data_dir, database_url=PG_URL, database_schema=schema, transcript_quiet_s=0)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings for a fresh, empty store on the parametrised backend."""
    with _fresh_store(request.param, tmp_path / "data") as fresh:
        yield fresh


@pytest.fixture
def other_settings(settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    """A second fresh, empty store on the same backend as ``settings``."""
    with _fresh_store("postgres" if settings.is_postgres else "sqlite", tmp_path / "other") as fresh:
        yield fresh


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    s = build(settings)
    try:
        yield s
    finally:
        s.close()


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment for a subprocess (CLI or server) using ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    env["HOOKLEDGER_DATA_DIR"] = str(settings.data_dir)
    # liveness jobs run only when a test asks (clock-controlled), never on the wall clock
    env["HOOKLEDGER_JOBS_INTERVAL_S"] = str(settings.jobs_interval_s if settings.jobs_interval_s != 60 else 0)
    env["HOOKLEDGER_TRANSCRIPT_QUIET_S"] = str(settings.transcript_quiet_s)
    # nor the summary worker (every 5 s by default): its Summarised events are in no
    # POST's answer, so a test that counts positions would see them only on a slow run;
    # a test that wants it passes HOOKLEDGER_SUMMARIES_INTERVAL_S
    env["HOOKLEDGER_SUMMARIES_INTERVAL_S"] = str(
        settings.summaries_interval_s if settings.summaries_interval_s != 5 else 0
    )
    if settings.database_url:
        env["HOOKLEDGER_DATABASE_URL"] = settings.database_url
    if settings.database_schema:
        env["HOOKLEDGER_DATABASE_SCHEMA"] = settings.database_schema
    return env


def cli(
    settings: Settings,
    *args: str,
    check: bool = True,
    stdin: bytes | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``hookledger`` CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        env={**settings_env(settings), **(extra_env or {})},
        input=stdin,
        capture_output=True,
        check=check,
        timeout=300,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real ``hookledger serve`` process on a free loopback port."""

    def __init__(self, settings: Settings, env: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.settings = settings
        self.port = free_port()
        self.host = host
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to become healthy."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "serve", "--host", self.host, "--port", str(self.port)],
            env={**settings_env(self.settings), **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        return self.proc

    def start(self) -> Server:
        self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + (self.proc.stderr.read() if self.proc.stderr else b"").decode())
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # never leave a server behind a failed test
                self.proc.wait(timeout=30)
                raise


@pytest.fixture
def server(settings: Settings) -> Iterator[Server]:
    srv = Server(settings).start()
    try:
        yield srv
    finally:
        srv.stop()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plus_usage(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in ("input_tokens", "cached_input_tokens", "output_tokens")}


def resumed_exec_turn(tmp_path: Path) -> tuple[Path, Path, dict]:
    """Two ``codex exec`` processes of one thread, from real captures: the real
    ``stream-output-2`` (turn 1), and ``codex exec resume`` of its thread: the records of
    the real ``stream-output-3`` under turn 1's thread id, its ``turn.completed`` usage
    being the thread's running total (turn 1's total plus what stream 3 spent), as
    upstream reports it (``usage_from_last_total``; the total is seeded from the rollout
    on resume). Returns both files and the thread's last total."""
    first = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    own = _jsonl(FIXTURES / "agentcmd-codex-exec-json" / "stream-output-3.jsonl")
    thread = _jsonl(first)[0]["thread_id"]
    (before,) = [r["usage"] for r in _jsonl(first) if r["type"] == "turn.completed"]
    total = before
    lines = []
    for r in own:
        if r["type"] == "thread.started":
            r["thread_id"] = thread
        if r["type"] == "turn.completed":
            r["usage"] = total = _plus_usage(before, r["usage"])
        lines.append(json.dumps(r))
    second = tmp_path / "resume-turn-2.jsonl"
    second.write_text("\n".join(lines) + "\n")
    return first, second, total
