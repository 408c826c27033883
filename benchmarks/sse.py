"""SSE publish-to-receive latency with the ledger behind it. See docs/benchmarks.md.

    .venv/bin/python benchmarks/sse.py --clients 100 500 --events 200

For each client count: a fresh data dir and a real ``hookledger serve`` (uvicorn); a
few separate client processes (``--client-procs``; a minimal asyncio reader by default,
``--client-impl httpx`` for httpx + httpx-sse, which costs ~100 µs CPU per message) open
N ``/v1/stream`` connections between them (``kinds=event.appended``; ``--kinds all``: every
kind, as the viewer asks, so the server also builds the derived messages) and record, per
connection, when each position was parsed (``time.monotonic_ns``, one clock for all
processes on Linux). This process then POSTs real Claude Code hook payloads one at a
time (``--interval`` apart), each appending one event, and records when each POST
returned. Latency of one event on one connection = parsed - POST returned ("publish" =
the POST answered, i.e. the event is committed); also reported from the POST start
(the whole ingest included). Each event's position comes from the POST answer.
``--baseline`` runs a bare sse-starlette broadcaster (``sse_baseline_app.py``) with the
same clients in the same run, to show what the machine itself allows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COORP = (
    ROOT
    / "tests"
    / "fixtures"
    / "coorp-serverless-plugins-hook-logs"
    / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payloads(count: int) -> list[dict[str, Any]]:
    """``count`` real PreToolUse payloads of one session, each made distinct
    (``tool_use_id`` suffixed; subagent fields dropped) so each appends one event. (A
    PostToolUse whose start was never seen also appends the start derived from it: two
    events, since ``a4a0d05``.)"""
    real = json.loads((COORP / "pre_tool_use.json").read_bytes())
    out = []
    for i in range(count):
        p = {k: v for k, v in real[i % len(real)].items() if k not in ("agent_id", "agent_type")}
        p["tool_use_id"] = f"{p['tool_use_id']}-bench{i}"
        out.append(p)
    return out


# -- the client process -------------------------------------------------------------


async def clients_main(url: str, n: int, events: int, deadline_s: float, kinds: str) -> None:
    """N connections; prints 'ready' when all are open, then one JSON line of
    ``{position: [receive ns, ...]}`` when each got ``events`` ``event.appended``
    messages or at the deadline. ``kinds``: the stream's ``kinds`` ("all": none given)."""
    from httpx_sse import aconnect_sse

    query = {} if kinds == "all" else {"kinds": kinds}

    received: dict[int, list[int]] = {}
    opened = 0
    all_open = asyncio.Event()
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal opened
        async with aconnect_sse(
            client, "GET", url + "/v1/stream", params=query
        ) as es:
            opened += 1
            if opened == n:
                all_open.set()
            got = 0
            async for sse in es.aiter_sse():
                if not sse.data or sse.event != "event.appended":
                    continue
                received.setdefault(int(sse.id), []).append(time.monotonic_ns())
                got += 1
                if got >= events:
                    return

    async with httpx.AsyncClient(
        timeout=httpx.Timeout(30, read=deadline_s), limits=limits
    ) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(n)]
        await asyncio.wait_for(all_open.wait(), 120)
        print("ready", flush=True)
        await asyncio.wait(tasks, timeout=deadline_s)
        for t in tasks:
            t.cancel()
    print(json.dumps({"cpu_s": time.process_time(), "received": received}), flush=True)


_ID_LINE = re.compile(rb"(?:^|\n)id: (\d+)\r?\nevent: event\.appended")


async def raw_clients_main(url: str, n: int, events: int, deadline_s: float, kinds: str) -> None:
    """Like :func:`clients_main`, with a minimal reader instead of httpx + httpx-sse: one
    asyncio stream per connection, a plain HTTP/1.1 GET, and the ``id:`` lines of the
    (chunked) SSE body found with one regex per read. It costs a few µs per message
    instead of ~100, so at 500 connections the clients no longer take the CPU the server
    needs and the latency measured is the server's. Same output."""
    host, port = url.removeprefix("http://").split(":")
    query = "" if kinds == "all" else f"?kinds={kinds}"
    request = (
        f"GET /v1/stream{query} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Accept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
    ).encode()
    received: dict[int, list[int]] = {}
    opened = 0
    all_open = asyncio.Event()

    async def one() -> None:
        nonlocal opened
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(head.decode(errors="replace"))
        opened += 1
        if opened == n:
            all_open.set()
        got, tail = 0, b""
        try:
            while got < events:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                now = time.monotonic_ns()
                buf = tail + chunk
                cut = buf.rfind(b"\n") + 1
                tail = buf[cut:]
                for m in _ID_LINE.finditer(buf, 0, cut):
                    received.setdefault(int(m.group(1)), []).append(now)
                    got += 1
        finally:
            writer.close()

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    await asyncio.wait_for(all_open.wait(), 120)
    print("ready", flush=True)
    await asyncio.wait(tasks, timeout=deadline_s)
    for t in tasks:
        t.cancel()
    print(json.dumps({"cpu_s": time.process_time(), "received": received}), flush=True)


# -- the publisher ------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (Linux /proc), else NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def run(
    n: int,
    events: int,
    interval: float,
    backend_env: dict[str, str],
    baseline: bool = False,
    client_procs: int = 1,
    client_impl: str = "raw",
    kinds: str = "event.appended",
) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="hookledger-sse-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")},
        "HOOKLEDGER_DATA_DIR": str(data),
        **backend_env,
    }
    command = [sys.executable, "-m", "api.cli", "serve", "--port", str(port)]
    if baseline:
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(ROOT / "benchmarks"),
            "sse_baseline_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    server = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        hooks = payloads(events + 1)
        with httpx.Client(base_url=url, timeout=30) as http:
            http.post("/v1/hooks/claude-code", json=hooks[0])  # opens the session (2 events)
            for share in (n // client_procs + (i < n % client_procs) for i in range(client_procs)):
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
                            "--client",
                            client_impl,
                            url,
                            str(share),
                            str(events),
                            str(events * interval + 60),
                            kinds,
                        ],
                        cwd=ROOT,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
            time.sleep(1)
            published: dict[int, tuple[int, int]] = {}
            for i, payload in enumerate(hooks[1 : events + 1], 1):
                start = time.monotonic_ns()
                r = http.post(
                    "/v1/hooks/claude-code",
                    json=payload,
                    headers={"X-Hookledger-Capture-Key": f"b{i}"},
                )
                done = time.monotonic_ns()
                positions = r.json()["positions"]
                assert r.status_code == 202 and len(positions) == 1, r.text
                published[positions[0]] = (start, done)
                time.sleep(interval)
        server_cpu = cpu_seconds(server.pid)
        received: dict[int, list[int]] = {}
        client_cpu = 0.0
        for proc in procs:
            out, _ = proc.communicate(timeout=events * interval + 120)
            report = json.loads(out.strip().splitlines()[-1])
            client_cpu += report["cpu_s"]
            for k, v in report["received"].items():
                received.setdefault(int(k), []).extend(v)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    after_commit, after_start, missing = [], [], 0
    for pos, (start, done) in published.items():
        times = received.get(pos, [])
        missing += n - len(times)
        after_commit += [(t - done) / 1e6 for t in times]
        after_start += [(t - start) / 1e6 for t in times]
    return {
        "clients": n,
        "kinds": kinds,
        "events": len(published),
        "deliveries": len(after_commit),
        "missing": missing,
        "p50_ms": round(pct(after_commit, 0.5), 2),
        "p99_ms": round(pct(after_commit, 0.99), 2),
        "max_ms": round(max(after_commit), 2),
        "from_post_start_p50_ms": round(pct(after_start, 0.5), 2),
        "from_post_start_p99_ms": round(pct(after_start, 0.99), 2),
        "mean_ms": round(statistics.fmean(after_commit), 2),
        "server_cpu_s": round(server_cpu, 2),
        "client_cpu_s": round(client_cpu, 2),
        "client_procs": client_procs,
        "client_impl": client_impl,
        "load_avg_1m": os.getloadavg()[0],
    }


@contextlib.contextmanager
def backend(postgres_url: str | None) -> Iterator[dict[str, str]]:
    """Server environment for a fresh store: SQLite (the data dir) or a new PostgreSQL
    schema, dropped afterwards."""
    if not postgres_url:
        yield {}
        return
    import psycopg

    schema = f"bench_sse_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield {"HOOKLEDGER_DATABASE_URL": postgres_url, "HOOKLEDGER_DATABASE_SCHEMA": schema}
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        impl, url, n, events, deadline, kinds = (
            sys.argv[2],
            sys.argv[3],
            int(sys.argv[4]),
            int(sys.argv[5]),
            float(sys.argv[6]),
            sys.argv[7],
        )
        main_of = raw_clients_main if impl == "raw" else clients_main
        asyncio.run(main_of(url, n, events, deadline, kinds))
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--events", type=int, default=200, help="events published per run")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between POSTs")
    ap.add_argument(
        "--client-procs", type=int, default=2, help="client processes sharing the connections"
    )
    ap.add_argument(
        "--client-impl",
        choices=["raw", "httpx"],
        default="raw",
        help="raw: minimal asyncio reader (default); httpx: httpx + httpx-sse per connection",
    )
    ap.add_argument(
        "--kinds",
        choices=["event.appended", "all"],
        default="event.appended",
        help="what the clients subscribe to (all: as the viewer; latency of event.appended)",
    )
    ap.add_argument("--postgres", default=None, help="PostgreSQL URL (default: SQLite)")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="also run a bare sse-starlette broadcaster (no ledger) in the same run",
    )
    args = ap.parse_args()
    rows = []
    for n in args.clients:
        for baseline in [True, False] if args.baseline else [False]:
            with backend(None if baseline else args.postgres) as backend_env:
                row = run(
                    n, args.events, args.interval, backend_env, baseline, args.client_procs,
                    args.client_impl, args.kinds,
                )
            row["backend"] = (
                "bare sse-starlette" if baseline else "postgres" if args.postgres else "sqlite"
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (RESULTS / "sse.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2))
    print(
        "| server | kinds | clients | events | deliveries | missing | p50 ms | p99 ms | max ms "
        "| p50 / p99 from POST start | CPU s server / clients | load 1m |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['kinds']} | {r['clients']} | {r['events']} | {r['deliveries']} "
            f"| {r['missing']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} "
            f"| {r['from_post_start_p50_ms']} / {r['from_post_start_p99_ms']} "
            f"| {r['server_cpu_s']} / {r['client_cpu_s']} | {r['load_avg_1m']:.1f} |"
        )


if __name__ == "__main__":
    main()
