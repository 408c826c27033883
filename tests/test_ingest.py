"""Hook ingestion: exactly once under concurrency, bad input kept with a reason, and a
hook client that never fails its agent (spool when the server is down)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from uuid import UUID

import httpx

from api.bootstrap import build
from ledger.config import Settings
from projections import queries

from conftest import FIXTURES, Server, cli

PROMPT = json.loads((FIXTURES / "coorp-serverless-plugins-hook-logs" / "user_prompt_submit.json").read_text())[1]


def _stats(settings: Settings) -> dict[str, int]:
    return json.loads(cli(settings, "stats", "--json").stdout)


def test_eight_concurrent_deliveries_of_one_hook_append_one_event(settings: Settings, server: Server) -> None:
    body = json.dumps(PROMPT).encode()
    barrier = threading.Barrier(8)
    answers: list[dict] = []

    def deliver() -> None:
        barrier.wait()
        r = httpx.post(
            server.url + "/v1/hooks/claude-code",
            content=body,
            headers={"X-Hookledger-Capture-Key": "same-capture-key"},
            timeout=30,
        )
        answers.append(r.json())

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One delivery opened the session and appended the prompt; the others appended nothing.
    assert sorted(a["appended"] for a in answers) == [0] * 7 + [2]
    session = httpx.get(server.url + "/v1/sessions", timeout=30).json()["sessions"]
    assert [s["prompt_count"] for s in session] == [1]


def test_bad_input_is_rejected_with_a_reason_and_kept(settings: Settings, server: Server) -> None:
    url = server.url + "/v1/hooks/claude-code"
    cases = {
        b"{not json": "not valid JSON",
        b"\xff\xfe{}": "UTF-8",
        b"[1, 2]": "not an object",
        b'{"hook_event_name": "Stop"}': "no session_id",
    }
    for body, reason in cases.items():
        r = httpx.post(url, content=body, timeout=30)
        assert r.status_code == 400 and reason in r.json()["error"], (body, r.text)
        assert r.json()["positions"], "the rejected body must be recorded"
    r = httpx.post(server.url + "/v1/hooks/no-such-agent", content=b"{}", timeout=30)
    assert r.status_code == 404
    huge = {**PROMPT, "prompt": "x" * 5_000_000}
    assert httpx.post(url, json=huge, timeout=60).status_code == 202
    unknown = {**PROMPT, "hook_event_name": "FileChanged"}
    assert httpx.post(url, json=unknown, timeout=30).status_code == 202
    server.stop()
    stats = _stats(settings)
    assert stats["rejected"] == len(cases) + 1
    services = build(settings)
    try:
        sid = queries.find_session_id(services.models, PROMPT["session_id"])
        assert sid is not None
        events = list(services.ledger.events.get(UUID(sid)))
        assert "UnknownHookEvent" in [type(e).__name__ for e in events]
    finally:
        services.close()


def test_hook_client_spools_when_server_is_down_and_server_ingests_once(settings: Settings) -> None:
    payload = json.dumps(PROMPT).encode()
    env_url = "http://127.0.0.1:9"  # nothing listens on the discard port
    for _ in range(3):
        out = cli(settings, "hook", "claude-code", stdin=payload, check=False, extra_env={"HOOKLEDGER_URL": env_url})
        assert out.returncode == 0 and json.loads(out.stdout) == {}
    spool = settings.data_dir / "spool" / "hooks.journal"
    assert [line[:5] for line in spool.read_bytes().splitlines()].count(b"HLJ1 ") == 3
    srv = Server(settings).start()
    srv.stop()
    srv = Server(settings).start()  # a second start must not ingest anything twice
    srv.stop()
    assert not list((settings.data_dir / "spool").iterdir()), "the journal is trimmed"
    stats = _stats(settings)
    # Three separate hook calls (three capture keys): the same prompt typed three times.
    assert stats["prompts"] == 3


def test_hook_command_exits_zero_on_garbage(settings: Settings, tmp_path: Path) -> None:
    out = cli(settings, "hook", "claude-code", stdin=b"\x00garbage", check=False,
              extra_env={"HOOKLEDGER_URL": "http://127.0.0.1:9"})
    assert out.returncode == 0 and out.stdout.strip() == b"{}"
