"""Many hook payloads per request: ``POST /v1/journal``, and a remote hook forwarding
what it spooled while its server was unreachable (``forward_spool``), with real hook
processes, a real server and the real hook-log fixtures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient
from test_access import TOKEN, non_loopback_ip
from test_hook_journal import HOOK_RUN, PYTHON, event_keys, fixture_payloads, run_hook

from api.app import create_app
from api.bootstrap import build
from api.hot_path import hook_fast
from api.hot_path.hook_fast import forward_spool, journal_append, record_bytes, uuid7
from ledger.config import Settings
from ledger.journal import JOURNAL, JournalIngester
from projections import queries

from conftest import Server, free_port

AT = "2026-06-20T00:00:00.000Z"


def journal_of(bodies: list[bytes]) -> bytes:
    return b"".join(record_bytes("claude-code", b, uuid7(), AT) for b in bodies)


def prompt(n: int, session: int = 1) -> bytes:
    return json.dumps({
        "session_id": f"00000000-0000-4000-8000-{session:012d}",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work/forward",
        "hook_event_name": "UserPromptSubmit",
        "prompt": f"forwarded prompt {n}",
    }).encode()


def test_post_journal_records_every_payload_once(settings: Settings, tmp_path: Path) -> None:
    bodies = [json.dumps(p).encode() for p in fixture_payloads()]
    half = len(bodies) // 2
    broken = b"this is not a record\n" + b'HLJ1 k 2026 claude-code 999\n{"short": 1}\n'
    body = journal_of(bodies[:half]) + broken + journal_of(bodies[half:])

    # Reference: the same records drained from a spool directory into another store.
    reference = Settings(tmp_path / "reference")
    spool = tmp_path / "copy"
    spool.mkdir()
    (spool / JOURNAL).write_bytes(body)
    ref = build(reference)
    try:
        JournalIngester(spool, ref.ledger.record).drain()
    finally:
        ref.close()

    services = build(settings, cache_size=256)
    try:
        with TestClient(create_app(services)) as client:
            headers = {"Content-Type": hook_fast.JOURNAL_CONTENT_TYPE}
            r = client.post("/v1/journal", content=body, headers=headers)
            assert r.status_code == 202, r.text
            first = r.json()
            assert first["records"] == len(bodies)
            assert first["rejected"] == 2  # no header; body shorter than its header says
            assert first["appended"] == len(first["positions"]) > len(bodies)

            again = client.post("/v1/journal", content=body, headers=headers).json()
            # only the broken records again: rejected input is kept each time it arrives
            assert again["appended"] == again["rejected"] == 2
            assert again["duplicates"] >= len(bodies) - first["rejected"]

            r = client.post("/v1/journal", content=b"", headers=headers)
            assert r.status_code == 400 and "empty" in r.json()["error"]
            r = client.post("/v1/journal", content=b"\xff\xfe not a journal", headers=headers)
            assert r.status_code == 400 and r.json()["rejected"] == 1
        services.runner.catch_up()
        stats = queries.stats(services.models)
    finally:
        services.close()
    def accepted(keys: Counter[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        return {k for k in keys if k[1] != "InputRejected"}

    got = event_keys(settings)
    assert max(got.values()) == 1
    assert accepted(got) == accepted(event_keys(reference))
    # the two broken records of the first POST, the same two again (rejected input is
    # kept every time it arrives), and the body that was no journal at all
    assert stats["rejected"] == 5


def _spooled(spool: Path) -> list[str]:
    if not spool.exists():
        return []
    return sorted(p.name for p in spool.iterdir() if p.name != hook_fast.FORWARD_LOCK)


def _prompts(url: str, session: int = 1, headers: dict[str, str] | None = None) -> list[str]:
    sid = f"00000000-0000-4000-8000-{session:012d}"
    r = httpx.get(f"{url}/v1/sessions/{sid}", headers=headers, timeout=30)
    return [b["prompt"] for b in r.json()["batches"]] if r.status_code == 200 else []


def test_forward_spool_resumes_where_it_stopped_and_sends_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hook_fast, "FORWARD_PIECE_BYTES", 2000)  # several pieces
    spool = tmp_path / "laptop" / "spool"
    records = [record_bytes("claude-code", prompt(n), uuid7(), AT) for n in range(60)]
    for rec in records:
        journal_append(str(spool), rec)
    original = (spool / JOURNAL).read_bytes()

    dead = f"http://127.0.0.1:{free_port()}"
    assert forward_spool(dead, str(spool)) == (0, False)
    asides = _spooled(spool)
    assert len(asides) == 1 and asides[0].endswith(".aside"), asides
    assert (spool / asides[0]).read_bytes() == original, "nothing is lost while unreachable"

    # As if a forward had sent the first 20 records and been cut off: resume after them.
    (spool / (asides[0] + ".sent")).write_bytes(b"%d" % sum(map(len, records[:20])))
    srv = Server(Settings(tmp_path / "server")).start()
    try:
        sent, done = forward_spool(srv.url, str(spool))
        assert done and sent == len(original) - sum(map(len, records[:20]))
        assert _spooled(spool) == [], "the spool is trimmed"
        assert _prompts(srv.url) == [f"forwarded prompt {n}" for n in range(20, 60)]

        # The whole journal once more (e.g. a forward that died before its .sent write):
        # only the 20 the server never had are appended.
        (spool / JOURNAL).write_bytes(original)
        assert forward_spool(srv.url, str(spool)) == (len(original), True)
    finally:
        srv.stop()
    got = event_keys(Settings(tmp_path / "server"))
    assert sum(1 for k in got if k[1] == "PromptSubmitted") == 60
    assert max(got.values()) == 1


def test_remote_hook_forwards_what_it_spooled_once_the_server_is_back(tmp_path: Path) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    remote = f"http://{ip}:{srv.port}"
    laptop = tmp_path / "laptop"  # the hook's own data directory: no server reads it
    env = {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": TOKEN}
    for n in range(5):  # the server is down
        out = run_hook(laptop, prompt(n), env)
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
    assert hook_fast.spool_pending(str(laptop / "spool"))  # the journal, or set aside

    srv.start()
    try:
        out = run_hook(laptop, prompt(5), env)  # POSTed; the spool follows in the background
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
        ok = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_prompts(remote, headers=ok)) < 6:
            time.sleep(0.05)
        assert sorted(_prompts(remote, headers=ok)) == sorted(
            f"forwarded prompt {n}" for n in range(6)
        )
        while time.monotonic() < deadline and _spooled(laptop / "spool"):
            time.sleep(0.05)
        assert _spooled(laptop / "spool") == []
    finally:
        srv.stop()
    got = event_keys(Settings(tmp_path / "server"))
    assert sum(1 for k in got if k[1] == "PromptSubmitted") == 6
    assert max(got.values()) == 1


def test_forward_spool_cli_reports_what_is_left(tmp_path: Path) -> None:
    import subprocess
    import sys

    spool = tmp_path / "laptop" / "spool"
    journal_append(str(spool), record_bytes("claude-code", prompt(1), uuid7(), AT))
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    cmd = [sys.executable, "-m", "api.cli", "--data-dir", str(tmp_path / "laptop"),
           "forward-spool", "--url", f"http://127.0.0.1:{free_port()}"]
    out = subprocess.run(cmd, env=base, capture_output=True, timeout=120)
    assert out.returncode == 1 and b"NOT empty" in out.stdout, out
    srv = Server(Settings(tmp_path / "server")).start()
    try:
        cmd[-1] = srv.url
        out = subprocess.run(cmd, env=base, capture_output=True, timeout=120)
        assert out.returncode == 0 and b"spool empty" in out.stdout, out
        assert _prompts(srv.url) == ["forwarded prompt 1"]
    finally:
        srv.stop()
    shutil.rmtree(tmp_path / "laptop")


def test_only_hookledgers_own_answers_count_as_delivered(tmp_path: Path) -> None:
    # A 4xx from something that is not hookledger (here a wrong base path: Starlette's
    # plain 404; behind a proxy, say, its 413) must keep the payload in the spool.
    spool = tmp_path / "laptop" / "spool"
    journal_append(str(spool), record_bytes("claude-code", prompt(1), uuid7(), AT))
    original = (spool / JOURNAL).read_bytes()
    srv = Server(Settings(tmp_path / "server")).start()
    try:
        wrong = srv.url + "/typo"
        assert forward_spool(wrong, str(spool)) == (0, False)
        kept = [n for n in _spooled(spool) if n.endswith(".aside")]
        assert [(spool / n).read_bytes() for n in kept] == [original], "nothing is lost"
        assert not hook_fast.post_hook(wrong, "claude-code", prompt(2), uuid7(), AT)
        # hookledger's own 400 means it kept the body as rejected input: delivered
        assert hook_fast.post_hook(srv.url, "claude-code", b"{not json", uuid7(), AT)
        assert hook_fast.post_hook(srv.url, "claude-code", prompt(3), uuid7(), AT)
        assert forward_spool(srv.url, str(spool)) == (len(original), True)
        assert sorted(_prompts(srv.url)) == ["forwarded prompt 1", "forwarded prompt 3"]
    finally:
        srv.stop()


def test_a_body_over_the_limit_is_kept_cut_as_rejected_input_and_answered_413(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server never holds a body over its limit: the first 16 MiB, the size and the
    # sha256 are recorded as rejected input; the hook client counts the 413 as delivered.
    # A forwarded spool sends a record that large alone, so its neighbours are recorded.
    import hashlib

    from api.hooks_ingest import MAX_JOURNAL_BODY_BYTES
    from ledger.ingest import MAX_BODY_BYTES
    from ledger.quarantine import MAX_KEPT_BYTES, quarantine_id

    huge = b'{"session_id": "00000000-0000-4000-8000-000000000001", "prompt": "'
    huge += b"x" * (MAX_JOURNAL_BODY_BYTES + 1) + b'"}'
    settings = Settings(tmp_path / "server")
    srv = Server(settings).start()
    try:
        r = httpx.post(srv.url + "/v1/hooks/claude-code", content=huge[: MAX_BODY_BYTES + 1],
                       headers={"X-Hookledger-Capture-Key": "too-big"}, timeout=120)
        assert r.status_code == 413 and r.json()["rejected"] is True and r.json()["positions"]
        assert str(MAX_BODY_BYTES) in r.json()["error"]
        monkeypatch.setattr(hook_fast, "POST_TIMEOUT_S", 60.0)  # on the hot path, 2 s: spooled
        assert hook_fast.post_hook(srv.url, "claude-code", huge, uuid7(), AT), "413 is delivered"

        spool = tmp_path / "laptop" / "spool"
        for body in (prompt(1), prompt(2), huge, prompt(3)):
            journal_append(str(spool), record_bytes("claude-code", body, uuid7(), AT))
        size = (spool / JOURNAL).stat().st_size
        assert forward_spool(srv.url, str(spool)) == (size, True)
        assert _prompts(srv.url) == ["forwarded prompt 1", "forwarded prompt 2", "forwarded prompt 3"]
    finally:
        srv.stop()
    services = build(settings)
    try:
        hook = list(services.ledger.events.get(quarantine_id("hook:claude-code")))[1:]
        journal = list(services.ledger.events.get(quarantine_id("spool:journal")))[1:]
    finally:
        services.close()
    cut = [e for e in hook if e.location == "capture too-big"]
    assert len(cut) == 1 and len(hook) == 2, [e.location for e in hook]
    assert cut[0].size == MAX_BODY_BYTES + 1 and cut[0].truncated
    assert cut[0].sha256 == hashlib.sha256(huge[: MAX_BODY_BYTES + 1]).hexdigest()
    assert cut[0].text.encode() == huge[:MAX_KEPT_BYTES]
    assert [e.truncated for e in journal] == [True] and journal[0].size > MAX_JOURNAL_BODY_BYTES


def test_a_server_url_without_a_scheme_is_plain_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HOOKLEDGER_URL=host:port (or install-hooks --url host:port) took "host:port" for the
    # scheme and no host: every POST failed, so the hook spooled every payload for good,
    # and SessionStart never got its context, all without a word
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    laptop = tmp_path / "laptop"
    env = {"HOOKLEDGER_URL": f"{ip}:{srv.port}", "HOOKLEDGER_TOKEN": TOKEN}
    out = run_hook(laptop, prompt(0), env)  # the server is down: spooled
    assert out.returncode == 0 and hook_fast.spool_pending(str(laptop / "spool"))
    srv.start()
    monkeypatch.setenv("HOOKLEDGER_TOKEN", TOKEN)  # forward_spool, here in this process
    try:
        assert forward_spool(f"{ip}:{srv.port}", str(laptop / "spool"))[1]
        out = run_hook(laptop, prompt(1), env)
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
        assert _spooled(laptop / "spool") == [], "the payload was POSTed, not spooled"
        ok = {"Authorization": f"Bearer {TOKEN}"}
        assert _prompts(f"http://{ip}:{srv.port}", headers=ok) == [
            "forwarded prompt 0", "forwarded prompt 1"
        ]
    finally:
        srv.stop()


def _request(conn: socket.socket) -> bytes:
    """One HTTP request's bytes as they came over the wire (headers and body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_remote_hook_killed_mid_post_loses_nothing(tmp_path: Path) -> None:
    # The hook POSTed first and journalled only when the POST failed: a server that
    # accepts the connection and never answers (or a DNS lookup that hangs) keeps the
    # hook waiting, the agent kills it after its own timeout, and the payload was gone.
    # Now it is journalled (fsync) before anything is sent, then forwarded from there.
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    laptop = tmp_path / "laptop"
    secret = b"the words that stay on this laptop"
    body = prompt(0).replace(b"forwarded prompt 0", b"forwarded prompt 0<private>" + secret + b"</private>")
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    with socket.socket() as hang:  # accepts, reads, never answers
        hang.bind(("0.0.0.0", 0))
        hang.listen()
        hang.settimeout(60)
        env = {**base, "HOOKLEDGER_URL": f"http://{ip}:{hang.getsockname()[1]}",
               "HOOKLEDGER_TOKEN": TOKEN}
        hook = subprocess.Popen([PYTHON, "-S", str(HOOK_RUN), "claude-code", str(laptop)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        try:
            assert hook.stdin is not None
            hook.stdin.write(body)
            hook.stdin.close()
            conn, _ = hang.accept()
            with conn:
                conn.settimeout(60)
                wire = _request(conn)
                hook.kill()  # mid-POST: the request is sent, the answer never comes
                hook.wait(timeout=60)
        finally:
            if hook.poll() is None:
                hook.kill()
                hook.wait()
    assert hook.returncode == -signal.SIGKILL
    assert secret not in wire and b"[private]" in wire, wire
    assert f"Authorization: Bearer {TOKEN}".encode() in wire

    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    srv.start()
    remote = f"http://{ip}:{srv.port}"
    try:
        out = run_hook(laptop, prompt(1), {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": TOKEN})
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
        ok = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_prompts(remote, headers=ok)) < 2:
            time.sleep(0.05)
        while time.monotonic() < deadline and _spooled(laptop / "spool"):
            time.sleep(0.05)
        assert _spooled(laptop / "spool") == []
        assert sorted(_prompts(remote, headers=ok)) == [
            "forwarded prompt 0[private]", "forwarded prompt 1"
        ]
    finally:
        srv.stop()
    got = event_keys(Settings(tmp_path / "server"))
    assert sum(1 for k in got if k[1] == "PromptSubmitted") == 2
    assert max(got.values()) == 1


def test_a_remote_hook_whose_journal_cannot_be_written_sends_directly(tmp_path: Path) -> None:
    # Journal first must not make a remote hook depend on its disk: with no journal to
    # write (disk full; here a file where the data directory should be), the payload is
    # POSTed as before, and stderr says it was not spooled.
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data dir should be")
    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    srv.start()
    remote = f"http://{ip}:{srv.port}"
    try:
        out = run_hook(blocked, prompt(0), {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": TOKEN})
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
        assert b"not spooled" in out.stderr and b"sent directly" in out.stderr, out
        assert _prompts(remote, headers={"Authorization": f"Bearer {TOKEN}"}) == [
            "forwarded prompt 0"
        ]
    finally:
        srv.stop()


class _SizeLimitedProxy:
    """A reverse proxy in front of the server that answers its own 413 to a body over
    1 MiB without reading it (nginx's default ``client_max_body_size 1m``)."""

    LIMIT = 1 << 20

    def __init__(self, upstream: str) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        limit = self.LIMIT

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                if size > limit:
                    page = b"<html><h1>413 Request Entity Too Large</h1></html>"
                    self.send_response(413)
                    self.send_header("Content-Length", str(len(page)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(page)
                    return
                up = http.client.HTTPConnection(upstream, timeout=60)
                up.request("POST", self.path, self.rfile.read(size),
                           {k: v for k, v in self.headers.items() if k.lower() != "host"})
                answer = up.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.getheader("Content-Type") or "")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("0.0.0.0", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_record_a_proxy_refuses_for_its_size_does_not_hold_up_later_ones(
    tmp_path: Path,
) -> None:
    # Journal first put every later payload behind the spool's oldest record: one that a
    # proxy in front of the server refuses for its size (a large tool output past
    # nginx's 1 MiB default) held up every later hook for good. It is now kept in
    # spool/hooks.refused, the rest goes on, and forward-spool sends it again.
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    import subprocess
    import sys

    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    srv.start()
    proxy = _SizeLimitedProxy(f"127.0.0.1:{srv.port}")
    laptop = tmp_path / "laptop"
    big = prompt(1).replace(b"forwarded prompt 1", b"forwarded prompt 1 " + b"y" * (2 << 20))
    ok = {"Authorization": f"Bearer {TOKEN}"}
    try:
        env = {"HOOKLEDGER_URL": f"http://{ip}:{proxy.port}", "HOOKLEDGER_TOKEN": TOKEN}
        outs = [run_hook(laptop, body, env) for body in (prompt(0), big, prompt(2), prompt(3))]
        assert all(o.returncode == 0 and o.stdout.strip() == b"{}" for o in outs), outs
        assert b"(HTTP 413); kept in" in outs[1].stderr, outs[1]
        remote = f"http://{ip}:{srv.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_prompts(remote, headers=ok)) < 3:
            time.sleep(0.05)
        assert _prompts(remote, headers=ok) == [
            "forwarded prompt 0", "forwarded prompt 2", "forwarded prompt 3"
        ]
        assert _spooled(laptop / "spool") == [hook_fast.REFUSED_FILE]
        kept = (laptop / "spool" / hook_fast.REFUSED_FILE).read_bytes()
        assert kept.startswith(b"HLJ1 ") and kept.endswith(big + b"\n")

        # The proxy's limit raised (here: the server without it): forward-spool sends it.
        base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
        out = subprocess.run(
            [sys.executable, "-m", "api.cli", "--data-dir", str(laptop), "forward-spool",
             "--url", remote], env={**base, "HOOKLEDGER_TOKEN": TOKEN},
            capture_output=True, timeout=120,
        )
        assert out.returncode == 0 and b"spool empty" in out.stdout, out
        assert sorted(p[:18] for p in _prompts(remote, headers=ok)) == [
            f"forwarded prompt {n}" for n in range(4)
        ]
    finally:
        proxy.close()
        srv.stop()
    got = event_keys(Settings(tmp_path / "server"))
    assert sum(1 for k in got if k[1] == "PromptSubmitted") == 4
    assert max(got.values()) == 1


def test_a_remote_hook_offline_keeps_one_journal_not_a_file_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every remote hook renamed the journal aside before trying the server, so while it
    # was unreachable each call left one more aside file, and every later call listed
    # and stat'ed them all. Aside files left by a forward that stopped go first now.
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    laptop = tmp_path / "laptop"
    env = {"HOOKLEDGER_URL": f"http://{ip}:{free_port()}", "HOOKLEDGER_TOKEN": TOKEN}
    for n in range(6):
        out = run_hook(laptop, prompt(n), env)
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
    spooled = _spooled(laptop / "spool")
    assert len(spooled) == 2 and JOURNAL in spooled, spooled
    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    srv.start()
    try:
        remote = f"http://{ip}:{srv.port}"
        monkeypatch.setenv("HOOKLEDGER_TOKEN", TOKEN)  # forward_spool, in this process
        assert forward_spool(remote, str(laptop / "spool"))[1]
        ok = {"Authorization": f"Bearer {TOKEN}"}
        assert _prompts(remote, headers=ok) == [f"forwarded prompt {n}" for n in range(6)]
    finally:
        srv.stop()


def test_a_request_is_bounded_as_a_whole_not_per_socket_step() -> None:
    # A server that answers one byte at a time, each well inside the socket timeout:
    # http.client's per-operation timeout never fires, so the request lasted as long as
    # the server dribbled (and a name lookup that never answers, likewise unbounded by
    # it, held the hook until the agent killed it). The hook's request gives up at its
    # timeout in all.
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    done = threading.Event()

    def dribble() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")
            for byte in b"hello world!":
                if done.wait(0.25):
                    return
                conn.sendall(bytes([byte]))

    server = threading.Thread(target=dribble, daemon=True)
    server.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(TimeoutError):
            hook_fast.http("GET", url, "/v1/context", None, {}, 1.0)
    finally:
        done.set()
        server.join()
        listener.close()


def test_a_remote_hook_with_a_wrong_token_says_so_and_keeps_the_payload(tmp_path: Path) -> None:
    # A token the server refuses (401) spooled every payload without a word: the user
    # learnt it only from `hookledger doctor`. The hook says it on stderr, exits 0 with
    # valid output, and the payload reaches the server once the token is right.
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    srv = Server(Settings(tmp_path / "server"), env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0").start()
    remote = f"http://{ip}:{srv.port}"
    laptop = tmp_path / "laptop"
    try:
        wrong = run_hook(laptop, prompt(1), {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": "not-it"})
        assert hook_fast.spool_pending(str(laptop / "spool"))
        right = run_hook(laptop, prompt(2), {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": TOKEN})
        ok = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_prompts(remote, headers=ok)) < 2:
            time.sleep(0.05)
        got = sorted(_prompts(remote, headers=ok))
    finally:
        srv.stop()
    assert wrong.returncode == 0 and wrong.stdout.strip() == b"{}", wrong
    assert b"refused the token (HTTP 401)" in wrong.stderr, wrong.stderr
    assert right.returncode == 0 and b"refused" not in right.stderr, right.stderr
    assert got == ["forwarded prompt 1", "forwarded prompt 2"]
