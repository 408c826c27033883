"""Two writer processes' worth of ledgers on one store: optimistic concurrency resolves
their clashes by reloading, and nothing is lost or written twice.

The first ledger runs with the aggregate cache the server uses (``cache_size``), so a
version clash exercises the retry path over a cached aggregate.
"""

from __future__ import annotations

import contextlib
import json
import threading
from datetime import UTC, datetime

from api.bootstrap import build
from ledger.config import Settings
from ledger.ingest import ingest_hook
from projections import queries

from conftest import FIXTURES

PROMPT = json.loads((FIXTURES / "coorp-serverless-plugins-hook-logs" / "user_prompt_submit.json").read_text())[1]
PER_WRITER = 60


def test_two_ledgers_writing_one_session_lose_and_duplicate_nothing(settings: Settings) -> None:
    cached, plain = build(settings, cache_size=64), build(settings)
    errors: list[BaseException] = []

    def write(services, name: str) -> None:  # type: ignore[no-untyped-def]
        try:
            for i in range(PER_WRITER):
                body = json.dumps({**PROMPT, "prompt": f"{name} prompt {i}"}).encode()
                ingest_hook(services.ledger, "claude-code", body, f"{name}-{i}", datetime.now(UTC))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, n)) for s, n in ((cached, "a"), (plain, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        plain.runner.catch_up()
        (session,) = queries.list_sessions(plain.models)
        assert session["prompt_count"] == 2 * PER_WRITER
        assert session["event_count"] == 2 * PER_WRITER + 1  # + Opened
    finally:
        cached.close()
        plain.close()


def test_a_failed_command_leaves_nothing_in_the_aggregate_cache(settings: Settings) -> None:
    """Writers use the cached aggregate itself (no deep copy): a command that appends and
    then fails must not leave its half-applied event behind for the next writer."""
    from ledger.jobs import append_decision
    from ledger.session import Session

    services = build(settings, cache_size=64)
    try:
        body = json.dumps(PROMPT).encode()
        (sid,) = ingest_hook(services.ledger, "claude-code", body, "cache-1", datetime.now(UTC)).result.sessions
        before = services.ledger.session(sid).version

        def half_done(agg: Session) -> None:
            append_decision(agg, Session.Summarised, "half", datetime.now(UTC), "test", scope="session", through_version=1)
            raise RuntimeError("fails after appending")

        with contextlib.suppress(RuntimeError):
            services.ledger.update(sid, half_done)
        assert services.ledger.session(sid).version == before
        assert "half" not in services.ledger.session(sid).seen_keys
        again = json.dumps({**PROMPT, "prompt": "after the failure"}).encode()
        assert ingest_hook(services.ledger, "claude-code", again, "cache-2", datetime.now(UTC)).result.appended == 1
        assert [type(e).__name__ for e in services.ledger.events.get(sid)][-1] == "PromptSubmitted"
        assert services.ledger.session(sid).version == before + 1
    finally:
        services.close()


def test_reading_a_session_sees_what_another_writer_appended(settings: Settings) -> None:
    """The server's cache does not look for newer events on a hit; reading a session
    (``Ledger.session``, as ``fork`` does) goes to the store, and the cached writer's
    next save after the other writer's append lands at the right version."""
    cached, plain = build(settings, cache_size=64), build(settings)
    try:
        body = json.dumps({**PROMPT, "prompt": "first"}).encode()
        first = ingest_hook(cached.ledger, "claude-code", body, "c-1", datetime.now(UTC))
        (sid,) = first.result.sessions
        before = cached.ledger.session(sid)
        body = json.dumps({**PROMPT, "prompt": "from elsewhere"}).encode()
        ingest_hook(plain.ledger, "claude-code", body, "p-1", datetime.now(UTC))
        after = cached.ledger.session(sid)
        assert before is not None and after is not None
        assert after.version == before.version + 1
        body = json.dumps({**PROMPT, "prompt": "third"}).encode()
        ingest_hook(cached.ledger, "claude-code", body, "c-2", datetime.now(UTC))
        plain.runner.catch_up()
        (session,) = queries.list_sessions(plain.models)
        assert session["prompt_count"] == 3
    finally:
        cached.close()
        plain.close()


def test_processes_opening_a_new_data_directory_at_once_all_succeed(settings: Settings) -> None:
    # each creates the read-model tables it finds missing: without the schema lock two
    # of them create the same table and one fails ("table ... already exists")
    import subprocess
    import sys

    from conftest import settings_env

    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "api.cli", "stats", "--json"],
            env=settings_env(settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err.decode()[-300:] for _, err in outs]
    assert all(json.loads(out)["events"] == 0 for out, _ in outs)
