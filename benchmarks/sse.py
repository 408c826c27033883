"""SSE publish-to-receive latency with the ledger behind it. See docs/benchmarks.md.

    .venv/bin/python benchmarks/sse.py --clients 100 500 --events 200

For each client count: a fresh data dir and a real ``hookledger serve`` (uvicorn); a
separate client process (asyncio + httpx + httpx-sse) opens N ``/v1/stream``
connections (``kinds=event.appended``) and records, per connection, when each position
was parsed (``time.monotonic_ns``, one clock for all processes on Linux). This process
then POSTs real Claude Code hook payloads one at a time (``--interval`` apart), each
appending one event, and records when each POST returned. Latency of one event on one
connection = parsed - POST returned ("publish" = the POST answered, i.e. the event is
committed); also reported from the POST start (the whole ingest included). Each
event's position comes from the POST answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COORP = ROOT / "tests" / "fixtures" / "coorp-serverless-plugins-hook-logs" / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def payloads(count: int) -> list[dict[str, Any]]:
    """``count`` real PreToolUse/PostToolUse payloads of one session, each made distinct
    (``tool_use_id`` suffixed; subagent fields dropped) so each appends one event."""
    real = [*json.loads((COORP / "pre_tool_use.json").read_bytes()),
            *json.loads((COORP / "post_tool_use.json").read_bytes())]
    out = []
    for i in range(count):
        p = {k: v for k, v in real[i % len(real)].items() if k not in ("agent_id", "agent_type")}
        p["tool_use_id"] = f"{p['tool_use_id']}-bench{i}"
        out.append(p)
    return out


# -- the client process -------------------------------------------------------------


async def clients_main(url: str, n: int, events: int, deadline_s: float) -> None:
    """N connections; prints 'ready' when all are open, then one JSON line of
    ``{position: [receive ns, ...]}`` when each got ``events`` messages or at the deadline."""
    from httpx_sse import aconnect_sse

    received: dict[int, list[int]] = {}
    opened = 0
    all_open = asyncio.Event()
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal opened
        async with aconnect_sse(client, "GET", url + "/v1/stream", params={"kinds": "event.appended"}) as es:
            opened += 1
            if opened == n:
                all_open.set()
            got = 0
            async for sse in es.aiter_sse():
                if not sse.data:
                    continue
                received.setdefault(int(sse.id), []).append(time.monotonic_ns())
                got += 1
                if got >= events:
                    return

    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=deadline_s), limits=limits) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(n)]
        await asyncio.wait_for(all_open.wait(), 120)
        print("ready", flush=True)
        await asyncio.wait(tasks, timeout=deadline_s)
        for t in tasks:
            t.cancel()
    print(json.dumps(received), flush=True)


# -- the publisher ------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def run(n: int, events: int, interval: float, backend_env: dict[str, str]) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="hookledger-sse-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")},
           "HOOKLEDGER_DATA_DIR": str(data), **backend_env}
    server = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port)],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    clients = None
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
            clients = subprocess.Popen(
                [sys.executable, __file__, "--client", url, str(n), str(events), str(events * interval + 60)],
                cwd=ROOT, stdout=subprocess.PIPE, text=True,
            )
            assert clients.stdout is not None
            assert clients.stdout.readline().strip() == "ready"
            time.sleep(1)
            published: dict[int, tuple[int, int]] = {}
            for i, payload in enumerate(hooks[1 : events + 1], 1):
                start = time.monotonic_ns()
                r = http.post("/v1/hooks/claude-code", json=payload, headers={"X-Hookledger-Capture-Key": f"b{i}"})
                done = time.monotonic_ns()
                positions = r.json()["positions"]
                assert r.status_code == 202 and len(positions) == 1, r.text
                published[positions[0]] = (start, done)
                time.sleep(interval)
        out, _ = clients.communicate(timeout=events * interval + 120)
        received = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
    finally:
        if clients and clients.poll() is None:
            clients.kill()
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
        "clients": n, "events": len(published), "deliveries": len(after_commit), "missing": missing,
        "p50_ms": round(pct(after_commit, 0.5), 2), "p99_ms": round(pct(after_commit, 0.99), 2),
        "max_ms": round(max(after_commit), 2),
        "from_post_start_p50_ms": round(pct(after_start, 0.5), 2),
        "from_post_start_p99_ms": round(pct(after_start, 0.99), 2),
        "mean_ms": round(statistics.fmean(after_commit), 2),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        url, n, events, deadline = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
        asyncio.run(clients_main(url, n, events, deadline))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--events", type=int, default=200, help="events published per run")
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between POSTs")
    ap.add_argument("--postgres", default=None, help="PostgreSQL URL (default: SQLite)")
    args = ap.parse_args()
    backend_env: dict[str, str] = {}
    if args.postgres:
        import uuid

        import psycopg

        schema = f"bench_sse_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        backend_env = {"HOOKLEDGER_DATABASE_URL": args.postgres, "HOOKLEDGER_DATABASE_SCHEMA": schema}
    rows = []
    try:
        for n in args.clients:
            row = run(n, args.events, args.interval, backend_env)
            row["backend"] = "postgres" if args.postgres else "sqlite"
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if args.postgres:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{backend_env["HOOKLEDGER_DATABASE_SCHEMA"]}" CASCADE')
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (RESULTS / "sse.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2))
    print("| backend | clients | events | deliveries | missing | p50 ms | p99 ms | max ms | p50 / p99 from POST start |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} | {r['clients']} | {r['events']} | {r['deliveries']} | {r['missing']} | {r['p50_ms']} "
              f"| {r['p99_ms']} | {r['max_ms']} | {r['from_post_start_p50_ms']} / {r['from_post_start_p99_ms']} |")


if __name__ == "__main__":
    main()
