"""hookledger benchmarks: import, projection rebuild and hook round trip.

    .venv/bin/python benchmarks/run.py [--repeats 3] [--min-events 100000] [--profile]

Reports the median over ``--repeats`` runs as a markdown table and writes
``benchmarks/results/latest.json`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import platform
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths
from projections.runner import PROJECTION_CLASSES

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
COORP = FIX / "coorp-serverless-plugins-hook-logs" / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
SOURCES = [
    *sorted((FIX / "spotter-claude-transcripts").rglob("*.jsonl")),  # incl. <session>/subagents/
    *sorted((FIX / "agentcmd-claude-transcripts").glob("*.jsonl")),
    FIX / "attio-mcp-server-hook-logs" / "chat.json",
    COORP / "chat.json",
]
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
IMPORT_TARGET, REBUILD_TARGET = 20_000, 60_000


# -- corpus -----------------------------------------------------------------------------

def rewrite(rec: object, tag: str) -> object:
    """Give one record per-copy ids, so each copy is distinct sessions and records."""
    if not isinstance(rec, dict):
        return rec
    for key in ("sessionId", "uuid", "agentId", "parentUuid", "leafUuid"):
        if isinstance(rec.get(key), str):
            rec[key] = f"{rec[key]}-{tag}"
    for nested, key in (("message", "id"), ("toolUseResult", "agentId")):  # keep Task→subagent links
        inner = rec.get(nested)
        if isinstance(inner, dict) and isinstance(inner.get(key), str):
            inner[key] = f"{inner[key]}-{tag}"
    return rec


def write_copy(dest: Path, k: int) -> None:
    tag = f"c{k:03d}"
    for src in SOURCES:
        out = dest / tag / src.relative_to(FIX)
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".json":
            out.write_text(json.dumps([rewrite(r, tag) for r in json.loads(src.read_bytes())]))
            continue
        lines = []
        for line in src.read_text(encoding="utf-8").split("\n"):
            try:
                lines.append(json.dumps(rewrite(json.loads(line), tag)))
            except ValueError:
                lines.append(line)  # blank or malformed lines stay as they are
        out.write_text("\n".join(lines), encoding="utf-8")


def make_corpus(dest: Path, min_events: int) -> int:
    """Write K copies, K chosen from the events one copy appends; returns K."""
    write_copy(dest, 0)
    with tempfile.TemporaryDirectory() as probe:
        services = build(Settings(Path(probe)))
        per_copy = import_paths(services.ledger, [dest]).result.appended
        services.close()
    k = math.ceil(min_events / per_copy)
    for i in range(1, k):
        write_copy(dest, i)
    return k


# -- 1 + 2: import and rebuild ----------------------------------------------------------

def store_run(corpus: Path, settings: Settings, min_events: int) -> dict[str, float]:
    """One import into an empty store, then catch-up from empty views, then each rebuild."""
    services = build(settings)
    try:
        t0 = time.perf_counter()
        summary = import_paths(services.ledger, [corpus])
        t_import = time.perf_counter() - t0
        appended = summary.result.appended
        if appended < min_events:
            sys.exit(f"import appended {appended} events < {min_events}; raise K")
        head = services.ledger.max_position()
        t0 = time.perf_counter()
        services.runner.catch_up()
        out = {"events": appended, "import": appended / t_import,
               "catch_up_all": head / (time.perf_counter() - t0)}
        for name in PROJECTION_CLASSES:
            t0 = time.perf_counter()
            services.runner.rebuild(name)
            out[f"rebuild:{name}"] = head / (time.perf_counter() - t0)
        return out
    finally:
        services.close()


def pg_reachable() -> bool:
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


def pg_run(corpus: Path, tmp: Path, min_events: int) -> dict[str, float]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        return store_run(corpus, Settings(tmp, database_url=PG_URL, database_schema=schema), min_events)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


# -- 3: hook round trip -----------------------------------------------------------------

def hook_bodies(n: int, loop0: int) -> list[bytes]:
    """``n`` hook bodies; each pass over the fixtures suffixes ``tool_use_id`` anew."""
    payloads = [*json.loads((COORP / "pre_tool_use.json").read_bytes()),
                *json.loads((COORP / "post_tool_use.json").read_bytes())]
    bodies: list[bytes] = []
    loop = loop0
    while len(bodies) < n:
        for p in payloads[: n - len(bodies)]:
            if isinstance(p.get("tool_use_id"), str):
                p = {**p, "tool_use_id": f"{p['tool_use_id']}-L{loop}"}
            bodies.append(json.dumps(p).encode())
        loop += 1
    return bodies


def post(client: httpx.Client, body: bytes) -> tuple[float, int]:
    headers = {"Content-Type": "application/json", "X-Hookledger-Capture-Key": str(uuid.uuid4())}
    t0 = time.perf_counter()
    r = client.post("/v1/hooks/claude-code", content=body, headers=headers)
    dt = time.perf_counter() - t0
    if r.status_code != 202:
        raise RuntimeError(f"POST returned {r.status_code}: {r.text[:300]}")
    return dt, r.json()["appended"]


def hook_run(tmp: Path, requests: int, senders: int) -> dict[str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    exe = Path(sys.executable).parent / "hookledger"
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen([str(exe), "--data-dir", str(tmp / "data"), "serve", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.perf_counter() + 60
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"server did not come up; see {tmp / 'serve.log'}")
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=60) as client:
            for body in hook_bodies(20, 10_000):  # warm-up, not measured
                post(client, body)
            times = [post(client, b)[0] * 1000 for b in hook_bodies(requests, 0)]
        q = statistics.quantiles(times, n=100, method="inclusive")
        bodies = hook_bodies(requests, 1_000)  # distinct tool_use_ids from the sequential pass
        appended = [0] * senders

        def sender(i: int) -> None:
            with httpx.Client(base_url=base, timeout=60) as c:
                appended[i] = sum(post(c, b)[1] for b in bodies[i::senders])

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        return {"hook_p50_ms": q[49], "hook_p99_ms": q[98],
                "hook_concurrent_events": sum(appended) / wall, "hook_concurrent_requests": requests / wall}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# -- driver -----------------------------------------------------------------------------

def profile_import(corpus: Path, tmp: Path) -> str:
    services = build(Settings(tmp))
    prof = cProfile.Profile()
    prof.runcall(import_paths, services.ledger, [corpus])
    prof.runcall(services.runner.catch_up)
    services.close()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-events", type=int, default=100_000)
    ap.add_argument("--hook-requests", type=int, default=1000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also cProfile one import + catch-up")
    args = ap.parse_args()
    results_dir = ROOT / "benchmarks" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hookledger-bench-") as tmpname:
        tmp = Path(tmpname)
        k = make_corpus(tmp / "corpus", args.min_events)
        use_pg = not args.no_postgres and pg_reachable()
        for r in range(args.repeats):
            measured = {f"sqlite:{m}": v for m, v in store_run(tmp / "corpus", Settings(tmp / f"s{r}"),
                                                               args.min_events).items()}
            if use_pg:
                measured |= {f"postgres:{m}": v for m, v in pg_run(tmp / "corpus", tmp / f"p{r}",
                                                                   args.min_events).items()}
            measured |= hook_run(Path(tempfile.mkdtemp(dir=tmp)), args.hook_requests, args.senders)
            for m, v in measured.items():
                runs.setdefault(m, []).append(v)
            print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr)
            shutil.rmtree(tmp / f"s{r}", ignore_errors=True)
        if args.profile:
            (results_dir / "profile-import.txt").write_text(profile_import(tmp / "corpus", tmp / "prof"))
    targets = {"sqlite:import": IMPORT_TARGET, "sqlite:catch_up_all": REBUILD_TARGET}
    targets |= {f"sqlite:rebuild:{n}": REBUILD_TARGET for n in PROJECTION_CLASSES}
    rows = []
    for m, vals in runs.items():
        med = statistics.median(vals)
        target = targets.get(m)
        rows.append({"metric": m, "median": med, "runs": vals, "target": target,
                     "met": None if target is None else med >= target,
                     "unit": "ms" if m.endswith("_ms") else "events" if m.endswith(":events")
                     else "requests/s" if m.endswith("requests") else "events/s"})
    report = {"machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "params": vars(args) | {"copies": k, "postgres": use_pg}, "results": rows}
    (results_dir / "latest.json").write_text(json.dumps(report, indent=2))
    print(f"\n{k} copies of the Claude fixtures; medians of {args.repeats} run(s)\n")
    print("| metric | median | unit | runs | target | met |\n|---|---:|---|---|---:|---|")
    for row in rows:
        fmt = "{:,.2f}" if row["unit"] == "ms" else "{:,.0f}"
        t = "—" if row["target"] is None else f"≥ {row['target']:,}"
        met = "—" if row["met"] is None else ("yes" if row["met"] else "**no**")
        print(f"| {row['metric']} | {fmt.format(row['median'])} | {row['unit']} | "
              f"{', '.join(fmt.format(v) for v in row['runs'])} | {t} | {met} |")


if __name__ == "__main__":
    main()
