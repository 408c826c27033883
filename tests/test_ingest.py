"""Hook ingestion: exactly once under concurrency, bad input kept with a reason, and a
hook client that never fails its agent (spool when the server is down)."""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

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


def test_a_data_directory_that_cannot_be_used_is_one_line_of_error_and_the_hook_still_exits_0(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from conftest import settings_env

    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for data_dir in (afile, afile / "below"):
        env = settings_env(Settings(tmp_path / "unused"))
        for args in (["sessions"], ["import", str(FIXTURES / "spotter-claude-transcripts")]):
            out = subprocess.run(
                [sys.executable, "-m", "api.cli", "--data-dir", str(data_dir), *args],
                env=env, capture_output=True, text=True, timeout=120,
            )
            assert out.returncode == 1, out
            assert out.stderr.startswith(f"Error: cannot open data directory {data_dir}: ")
            assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
        hook = subprocess.run(
            [sys.executable, "-m", "api.cli", "--data-dir", str(data_dir), "hook", "claude-code"],
            env=env, input=json.dumps(PROMPT), capture_output=True, text=True, timeout=120,
        )
        assert hook.returncode == 0 and hook.stdout.strip() == "{}", hook


def test_edge_redactions_header_is_recorded_and_a_malformed_one_ignored_with_a_reason(
    settings: Settings, server: Server
) -> None:
    """A hook client that removed ``<private>`` spans before sending says so in
    ``X-Hookledger-Redactions``; the recorded event carries it. A malformed header is
    logged and ignored: the body is recorded all the same."""
    url = server.url + "/v1/hooks/claude-code"
    said = [{"kind": "private_tag", "path": "$.prompt", "count": 2}]
    cases = [
        ("carried [private] and [private]", json.dumps(said, separators=(",", ":")), said),
        ("malformed header", "private_tag=2", []),
        ("a count of zero", '[{"kind":"private_tag","path":"$.prompt","count":0}]', []),
        ("no header", None, []),
    ]
    for i, (prompt, header, _) in enumerate(cases):
        headers = {"X-Hookledger-Capture-Key": f"edge-{i}"}
        if header is not None:
            headers["X-Hookledger-Redactions"] = header
        r = httpx.post(url, json={**PROMPT, "prompt": prompt}, headers=headers, timeout=30)
        assert r.status_code == 202, r.text
    events = httpx.get(f"{server.url}/v1/sessions/{PROMPT['session_id']}/events", timeout=30)
    recorded = {
        e["raw"]["prompt"]: e["redactions"]
        for e in events.json()["events"]
        if e["kind"] == "PromptSubmitted"
    }
    assert recorded == {prompt: expected for prompt, _, expected in cases}
    server.stop()
    assert server.proc is not None and server.proc.stderr is not None
    log = server.proc.stderr.read().decode()
    assert "ignoring X-Hookledger-Redactions of capture edge-1: not JSON" in log, log
    assert "ignoring X-Hookledger-Redactions of capture edge-2: entry 0: bad count 0" in log


def test_edge_redactions_are_checked_strictly() -> None:
    import pytest

    from ledger.ingest import (
        MAX_EDGE_REDACTIONS,
        MAX_EDGE_REDACTIONS_BYTES,
        EdgeRedactionsError,
        check_edge_redactions,
        parse_edge_redactions,
    )

    good = '[{"kind":"private_tag","path":"$.prompt","count":2},{"kind":"jwt","path":"$","count":1}]'
    assert parse_edge_redactions(good) == json.loads(good)
    assert parse_edge_redactions("[]") == []
    bad = {
        "private_tag=2": "not JSON",
        '{"kind":"private_tag","path":"$","count":1}': "not a list",
        '[{"kind":"private_tag","path":"$","count":1,"text":"x"}]': "not exactly",
        '[{"kind":"Private Tag","path":"$","count":1}]': "bad kind",
        '[{"kind":"private_tag","path":"prompt","count":1}]': "bad path",
        '[{"kind":"private_tag","path":"$","count":true}]': "bad count",
        '[{"kind":"private_tag","path":"$","count":"2"}]': "bad count",
        '[{"kind":"private_tag","path":"$","count":-1}]': "bad count",
        "[" + " " * MAX_EDGE_REDACTIONS_BYTES + "]": "longer than",
    }
    for text, reason in bad.items():
        with pytest.raises(EdgeRedactionsError, match=reason):
            parse_edge_redactions(text)
    with pytest.raises(EdgeRedactionsError, match="more than"):  # a journal record's list
        check_edge_redactions([{"kind": "a", "path": "$", "count": 1}] * (MAX_EDGE_REDACTIONS + 1))


def test_a_sessions_events_come_whole_or_in_pages_by_stream_version(settings: Settings) -> None:
    # A real transcript's session: pages of 7 events after each page's cursor give
    # exactly the whole list, in order; the last page says there is no next one.
    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts"))
    srv = Server(settings).start()
    try:
        top = httpx.get(f"{srv.url}/v1/sessions?limit=1000", timeout=30).json()["sessions"]
        sid = max(top, key=lambda s: s["tool_call_count"])["id"]
        url = f"{srv.url}/v1/sessions/{sid}/events"
        whole = httpx.get(url, timeout=30).json()
        pages, after = [], 0
        while after is not None:
            page = httpx.get(url, params={"after_version": after, "limit": 7}, timeout=30).json()
            assert len(page["events"]) <= 7
            pages.extend(page["events"])
            after = page["next_after_version"]
        bad = [
            httpx.get(url, params=p, timeout=30)
            for p in ({"limit": 0}, {"limit": "x"}, {"after_version": -1}, {"limit": 10_001})
        ]
    finally:
        srv.stop()
    assert "next_after_version" not in whole and len(whole["events"]) > 20
    assert [e["originator_version"] for e in whole["events"]] == list(range(1, len(whole["events"]) + 1))
    assert pages == whole["events"]
    assert [r.status_code for r in bad] == [400, 400, 400, 400]


def test_all_of_a_sessions_events_are_read_and_sent_a_chunk_at_a_time(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GET /v1/sessions/{id}/events without limit built the whole answer before sending
    # it: a 31k-event session's 50 MB answer peaked the server at 618 MB. It is now read,
    # encoded and sent EVENTS_CHUNK events at a time: the memory it takes is a chunk's.
    # Here (chunks of 20) the peak of what Python allocates while the whole body of a
    # real 2,000-event session is produced stays under the body's size (2.0 MB for 4.7 MB;
    # built whole, as before: 48.9 MB), and the body is the session's events, every
    # version once, as the paged list gives them.
    from api import app as app_module

    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"))
    monkeypatch.setattr(app_module, "EVENTS_CHUNK", 20)
    services = build(settings)
    try:
        services.runner.catch_up()
        sid = queries.find_session_id(services.models, "258c7280-ae70-4798-800f-63464d01a85d")
        assert sid is not None
        stored = sum(1 for _ in services.ledger.events.get(UUID(sid)))
        assert stored > 100 * app_module.EVENTS_CHUNK

        def body() -> Iterator[bytes]:
            return app_module._all_events(services, sid, app_module._events(services, sid, 0, 20))

        tracemalloc.start()
        try:
            size = sum(len(piece) for piece in body())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        whole = json.loads(b"".join(body()))
        pages = []
        while len(pages) < stored:
            pages.extend(app_module._events(services, sid, len(pages), 500))
    finally:
        services.close()
    assert [e["originator_version"] for e in whole["events"]] == list(range(1, stored + 1))
    assert whole == {"session_id": sid, "events": pages}
    assert peak < size, (peak, size)
