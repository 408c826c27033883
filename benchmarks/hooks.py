"""Hook benchmarks: hot-path cost, hook exit -> visible, ingest throughput. See the
"Hooks" section of docs/benchmarks.md.

1. Wall time per invocation of the exact command ``install-hooks`` writes
   (:func:`api.hook_install.hook_command`), for a PostToolUse and a SessionStart payload,
   interleaved round-robin with ``<same interpreter> -S -c pass`` (the floor), while a
   real ``hookledger serve`` runs on the same data directory (it ingests the journal and
   answers SessionStart's context request).
2. Hook exit -> visible: run the command with a UserPromptSubmit of a new session, then
   poll ``GET /v1/sessions/{id}`` every 2 ms until it answers 200.
3. Journal ingest: N distinct tool-call payloads (Pre/Post of the coorp fixture, ids
   suffixed per pass, spread over 16 sessions) framed by the hot path's own
   ``record_bytes`` into one journal; timed: ``JournalIngester.drain()`` through a
   ``GroupWriter`` into a fresh SQLite store (aggregate cache 1024, as ``serve``). Zero
   loss: the distinct tool-call event keys in the log equal N. Then the same journal is
   renamed into a running server's spool, timed until the server has trimmed it.
4. POST ingest: the same kind of payloads sent by 8 concurrent senders (asyncio tasks)
   to the app in-process (``httpx.ASGITransport``, lifespan running); beside it the
   same harness against a bare Starlette route that only reads the body (the floor the
   harness itself sets); the same payloads ``--batch`` per ``POST /v1/journal`` request
   (what a remote hook forwards); and, for comparison, one per request by 8 threads to
   a real ``hookledger serve`` over TCP. ``post_in_process*_cpu_us``: this process's CPU
   (user + system) per request while the in-process senders ran; ``*_loop_cpu_us``: the
   event-loop thread's share (senders, route, parse, answer), the rest being mostly the
   group writer's. ``--tmp /dev/shm``
   puts the stores on tmpfs, where a commit's fsync costs nothing: the difference to a
   run on disk is what waiting for the disk costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

from api.app import create_app
from api.bootstrap import build
from api.hook_install import hook_command, precompile
from api.hot_path.hook_fast import record_bytes, uuid7
from ledger.config import Settings
from ledger.journal import JOURNAL, JournalIngester
from ledger.writer import GroupWriter

ROOT = Path(__file__).resolve().parents[1]
COORP = ROOT / "tests" / "fixtures" / "coorp-serverless-plugins-hook-logs"
SESSION_DIR = COORP / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
TOOL_HOOKS = [
    *json.loads((SESSION_DIR / "pre_tool_use.json").read_bytes()),
    *json.loads((SESSION_DIR / "post_tool_use.json").read_bytes()),
]
POST_TOOL = next(  # of the main session (a subagent's call belongs to its child session)
    p
    for p in json.loads((SESSION_DIR / "post_tool_use.json").read_bytes())
    if not p.get("agent_id")
)
SESSION_START = {  # a new session in the PostToolUse payload's project: it gets context
    **json.loads((COORP / "session_start.json").read_bytes())[0],
    "session_id": "0b1e6c35-1d3c-4a53-9a8e-5a3c0b0c0de5",
    "cwd": POST_TOOL["cwd"],
}
PROMPT = json.loads((COORP / "user_prompt_submit.json").read_bytes())[1]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def tool_bodies(n: int, sessions: int = 16) -> Iterator[bytes]:
    """``n`` distinct tool-call payloads (each pass suffixes tool_use_id and session)."""
    for i in range(n):
        p = dict(TOOL_HOOKS[i % len(TOOL_HOOKS)])
        loop = i // len(TOOL_HOOKS)
        p["tool_use_id"] = f"{p['tool_use_id']}-L{loop}"
        p["session_id"] = f"{p['session_id'][:-4]}{(loop % sessions):04d}"
        yield json.dumps(p).encode()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}


class Serve:
    def __init__(self, data: Path, env: dict[str, str] | None = None) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "api.cli",
                "--data-dir",
                str(data),
                "serve",
                "--port",
                str(self.port),
            ],
            env={**clean_env(), **(env or {})},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not come up")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def hot_path(data: Path, n: int) -> dict[str, float]:
    precompile()  # as install-hooks does
    command = shlex.split(hook_command(data))
    floor_cmd = [command[0], "-S", "-c", "pass"]
    append = (  # the floor plus what the hot path must do at least: one fsync'd append
        "import os,fcntl,sys;fd=os.open(sys.argv[1],os.O_WRONLY|os.O_APPEND|os.O_CREAT);"
        "fcntl.flock(fd,2);os.write(fd,sys.stdin.buffer.read());os.fdatasync(fd)"
    )
    append_cmd = [command[0], "-S", "-c", append, str(data / "append-floor.bin")]
    env = clean_env()
    srv = Serve(data)
    env["HOOKLEDGER_URL"] = srv.url
    post = json.dumps(POST_TOOL).encode()
    start = json.dumps(SESSION_START).encode()
    times: dict[str, list[float]] = {
        "floor": [],
        "append_floor": [],
        "PostToolUse": [],
        "SessionStart": [],
    }
    try:
        for i in range(n + 10):
            for name, argv, body in (
                ("floor", floor_cmd, post),
                ("append_floor", append_cmd, post),
                ("PostToolUse", command, post),
                ("SessionStart", command, start),
            ):
                t0 = time.perf_counter()
                out = subprocess.run(argv, input=body, env=env, capture_output=True)
                dt = (time.perf_counter() - t0) * 1000
                if out.returncode != 0:
                    raise RuntimeError(f"{name} exited {out.returncode}: {out.stderr!r}")
                if name == "SessionStart" and b"additionalContext" not in out.stdout and i >= 10:
                    raise RuntimeError(f"SessionStart got no context: {out.stdout!r}")
                if i >= 10:  # warm-up
                    times[name].append(dt)
    finally:
        srv.stop()
    out: dict[str, float] = {}
    for name, vals in times.items():
        out[f"{name}_p50_ms"] = statistics.median(vals)
        out[f"{name}_p99_ms"] = pct(vals, 99)
    out["PostToolUse_p50_x_floor"] = out["PostToolUse_p50_ms"] / out["floor_p50_ms"]
    out["PostToolUse_p99_x_floor"] = out["PostToolUse_p99_ms"] / out["floor_p50_ms"]
    out["PostToolUse_p99_x_floor_p99"] = out["PostToolUse_p99_ms"] / out["floor_p99_ms"]
    out["SessionStart_p50_x_floor"] = out["SessionStart_p50_ms"] / out["floor_p50_ms"]
    out["SessionStart_p99_x_floor"] = out["SessionStart_p99_ms"] / out["floor_p50_ms"]
    out["command"] = " ".join(command)  # type: ignore[assignment]
    return out


def exit_to_visible(data: Path, n: int) -> dict[str, float]:
    command = shlex.split(hook_command(data))
    srv = Serve(data)
    lat: list[float] = []
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for i in range(n + 5):
                sid = str(uuid.uuid4())
                body = json.dumps({**PROMPT, "session_id": sid, "prompt": f"visible {i}"}).encode()
                subprocess.run(
                    command, input=body, env=clean_env(), capture_output=True, check=True
                )
                t0 = time.perf_counter()
                while client.get(f"/v1/sessions/{sid}").status_code != 200:
                    if time.perf_counter() - t0 > 10:
                        raise RuntimeError("event never became visible")
                    time.sleep(0.002)
                if i >= 5:
                    lat.append((time.perf_counter() - t0) * 1000)
    finally:
        srv.stop()
    return {
        "visible_p50_ms": statistics.median(lat),
        "visible_p99_ms": pct(lat, 99),
        "visible_max_ms": max(lat),
    }


def count_tool_keys(services) -> int:  # type: ignore[no-untyped-def]
    keys = set()
    start = 0
    while True:
        section = services.ledger.recorder.select_notifications(
            start, 5000, inclusive_of_start=False
        )
        if not section:
            return len(keys)
        for note in section:
            event = services.ledger.mapper.to_domain_event(note)
            # one per hook body (a start that came after its completion is kept as
            # ``tool:…:start:late``); not the starts the ledger derives for a completion
            # whose start it has not seen (record_key ``derived:…``)
            derived = (event.record_key or "").startswith("derived:")
            if event.event_key.startswith("tool:") and not derived:
                keys.add((note.originator_id, event.event_key))
        start = section[-1].id


def journal_ingest(tmp: Path, n: int) -> dict[str, float]:
    data = tmp / "journal-ingest"
    spool = data / "spool"
    spool.mkdir(parents=True)
    with open(spool / JOURNAL, "wb") as f:
        for body in tool_bodies(n):
            f.write(record_bytes("claude-code", body, uuid7(), "2026-06-20T00:00:00.000Z"))
    services = build(Settings(data), cache_size=1024)  # as `hookledger serve` builds them
    writer = GroupWriter(services.ledger)
    writer.start()
    try:
        t0 = time.perf_counter()
        result = JournalIngester(spool, submit=writer.submit).drain()
        dt = time.perf_counter() - t0
        keys = count_tool_keys(services)
    finally:
        writer.close()
        services.close()
    if keys != n or list(spool.iterdir()):
        raise RuntimeError(f"journal ingest lost records: {keys} tool events for {n} records")
    out = {
        "journal_events_per_s": result.appended / dt,
        "journal_records_per_s": n / dt,
        "journal_records": n,
        "journal_tool_events": keys,
    }

    # The same through a running server: the journal is renamed into its spool; timed
    # until the pump has recorded and trimmed it (projections catch up meanwhile).
    data = tmp / "journal-server"
    srv = Serve(data)
    staged = data / "staged.journal"
    with open(staged, "wb") as f:
        for body in tool_bodies(n):
            f.write(record_bytes("claude-code", body, uuid7(), "2026-06-20T00:00:00.000Z"))
    (data / "spool").mkdir(exist_ok=True)
    try:
        t0 = time.perf_counter()
        os.rename(staged, data / "spool" / JOURNAL)
        while any((data / "spool").iterdir()):
            time.sleep(0.005)
        dt = time.perf_counter() - t0
    finally:
        srv.stop()
    services = build(Settings(data))
    try:
        keys = count_tool_keys(services)
    finally:
        services.close()
    if keys != n:
        raise RuntimeError(f"journal via server lost records: {keys} for {n}")
    out["journal_server_records_per_s"] = n / dt
    return out


async def _post_in_process(  # type: ignore[no-untyped-def]
    app, bodies: list[bytes], senders: int, path: str = "/v1/hooks/claude-code",
    client: str = "httpx",
) -> float:
    """Seconds for ``senders`` concurrent tasks to POST every body, each waiting for its
    202. ``client``: ``httpx`` (``httpx.ASGITransport``) or ``asgi`` (:func:`_asgi_post`,
    the ASGI protocol called directly: no client-side HTTP model)."""
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://app") as http,
    ):
        # each body with its capture key, made before the clock starts: the hook client
        # makes it, in its own process, as it makes the body
        queue = [(body, uuid7()) for body in reversed(bodies)]

        async def post(body: bytes, key: str) -> tuple[int, bytes]:
            if client == "asgi":
                return await _asgi_post(app, path, body, key)
            r = await http.post(path, content=body, headers={"X-Hookledger-Capture-Key": key})
            return r.status_code, r.content

        async def sender() -> None:
            while queue:
                status, answer = await post(*queue.pop())
                if status != 202:
                    raise RuntimeError(answer)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        return time.perf_counter() - t0


async def _asgi_post(app, path: str, body: bytes, key: str) -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
    """One ``POST path`` as an ASGI ``http`` call (ASGI 3.0 spec); (status, body)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("app", 80),
        "headers": [
            (b"host", b"app"), (b"content-length", str(len(body)).encode()),
            (b"x-hookledger-capture-key", key.encode()),
        ],
    }
    request = {"type": "http.request", "body": body, "more_body": False}
    answer: dict[str, object] = {"status": 0, "body": b""}

    async def receive() -> dict[str, object]:
        nonlocal request
        if request is not None:
            message, request = request, None
            return message
        await asyncio.Future()  # no disconnect: the client waits for the answer
        raise AssertionError

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")  # type: ignore[operator]

    await app(scope, receive, send)
    return answer["status"], answer["body"]  # type: ignore[return-value]


def floor_app():  # type: ignore[no-untyped-def]
    """The same route on a bare Starlette app that reads the body and answers 202: what
    the in-process harness itself (httpx client + Starlette, one event loop) allows."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def take(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"appended": 1, "positions": [1]}, 202)

    return Starlette(routes=[Route("/v1/hooks/{agent}", take, methods=["POST"])])


def post_ingest(tmp: Path, n: int, senders: int, batch: int, process: bool) -> dict[str, float]:
    bodies = list(tool_bodies(n))
    out: dict[str, float] = {}
    for client, suffix in (("httpx", ""), ("asgi", "_asgi")):
        out[f"post_floor_in_process{suffix}_per_s"] = n / asyncio.run(
            _post_in_process(floor_app(), bodies, senders, client=client)
        )
        services = build(Settings(tmp / f"post-in-process{suffix}"), cache_size=1024)
        try:
            app = create_app(services, projection_process=process)
            before, loop_before = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
            dt = asyncio.run(_post_in_process(app, bodies, senders, client=client))
            after, loop_cpu = resource.getrusage(resource.RUSAGE_SELF), time.thread_time() - loop_before
            keys = count_tool_keys(services)
        finally:
            services.close()
        if keys != n:
            raise RuntimeError(f"POST lost events: {keys} for {n}")
        out[f"post_in_process{suffix}_per_s"] = n / dt
        # CPU of this process (server and in-process senders) per request, user + system
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        out[f"post_in_process{suffix}_cpu_us"] = 1e6 * cpu / n
        # of it, the event-loop thread's (senders, route, parse, answer); the rest is
        # mostly the group writer thread's
        out[f"post_in_process{suffix}_loop_cpu_us"] = 1e6 * loop_cpu / n

    # POST /v1/journal: ``batch`` payloads per request, framed as the spool journal
    # (what a remote hook forwards); events/s = distinct tool-call events in the log.
    records = [record_bytes("claude-code", b, uuid7(), "2026-06-20T00:00:00.000Z") for b in bodies]
    pieces = [b"".join(records[i : i + batch]) for i in range(0, n, batch)]
    services = build(Settings(tmp / "post-journal"), cache_size=1024)
    try:
        app = create_app(services, projection_process=process)
        dt = asyncio.run(_post_in_process(app, pieces, senders, "/v1/journal"))
        keys = count_tool_keys(services)
    finally:
        services.close()
    if keys != n:
        raise RuntimeError(f"POST /v1/journal lost events: {keys} for {n}")
    out["post_journal_in_process_per_s"] = n / dt

    data = tmp / "post-tcp"
    srv = Serve(data)
    chunks = [bodies[i::senders] for i in range(senders)]
    errors: list[str] = []

    def send(chunk: list[bytes]) -> None:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            for body in chunk:
                r = client.post(
                    "/v1/hooks/claude-code",
                    content=body,
                    headers={"X-Hookledger-Capture-Key": uuid7()},
                )
                if r.status_code != 202:
                    errors.append(r.text)

    try:
        threads = [threading.Thread(target=send, args=(c,)) for c in chunks]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
    finally:
        srv.stop()
    services = build(Settings(data))
    try:
        keys = count_tool_keys(services)
    finally:
        services.close()
    if errors or keys != n:
        raise RuntimeError(f"POST over TCP lost events: {keys} for {n}; {errors[:3]}")
    out["post_tcp_per_s"] = n / dt
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--invocations", type=int, default=200)
    ap.add_argument("--visible", type=int, default=200)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--projections", choices=["process", "thread"], default="process",
                    help="where the in-process app runs its projections (serve: process)")
    ap.add_argument("--batch", type=int, default=200,
                    help="hook payloads per POST /v1/journal request")
    ap.add_argument("--only", choices=["hot", "visible", "journal", "post"], default=None)
    ap.add_argument("--tmp", type=Path, default=None,
                    help="where the stores are made (default: the system's temp dir); "
                         "e.g. /dev/shm to take the disk's fsync out of the measurement")
    args = ap.parse_args()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        tmp = Path(d)
        if args.only in (None, "hot"):
            results |= hot_path(tmp / "hot", args.invocations)
        if args.only in (None, "visible"):
            results |= exit_to_visible(tmp / "visible", args.visible)
        if args.only in (None, "journal"):
            results |= journal_ingest(tmp, args.events)
        if args.only in (None, "post"):
            results |= post_ingest(
                tmp, args.events, args.senders, args.batch, args.projections == "process"
            )
    for k, v in results.items():
        print(f"{k:28} {v:.2f}" if isinstance(v, float) else f"{k:28} {v}")


if __name__ == "__main__":
    main()
