"""hookledger benchmarks: import, projection rebuild, hook round trip. See docs/benchmarks.md."""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import auto_workers, discover, import_paths
from projections.runner import PROJECTION_CLASSES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIX = ROOT / "tests" / "fixtures"
COORP = FIX / "coorp-serverless-plugins-hook-logs" / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
SOURCES = [
    *sorted((FIX / "spotter-claude-transcripts").rglob("*.jsonl")),  # incl. <sid>/subagents/
    *sorted((FIX / "agentcmd-claude-transcripts").glob("*.jsonl")),
    FIX / "attio-mcp-server-hook-logs" / "chat.json",
    COORP / "chat.json",
]
HOOKS = [*json.loads((COORP / "pre_tool_use.json").read_bytes()),  # one payload per element
         *json.loads((COORP / "post_tool_use.json").read_bytes())]
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
TARGETS = {"sqlite:import": 20_000, "sqlite:catch_up_all": 60_000}
TARGETS |= {f"sqlite:rebuild:{name}": 60_000 for name in ("all", *PROJECTION_CLASSES)}
TARGETS |= {f"sqlite:rebuild_process:{name}": 60_000 for name in PROJECTION_CLASSES}


def rewrite(rec: object, tag: str) -> object:
    """Suffix one record's ids with ``tag`` so each copy holds distinct sessions and records."""
    if isinstance(rec, dict):
        for key in ("sessionId", "uuid", "agentId", "parentUuid", "leafUuid"):
            if isinstance(rec.get(key), str):
                rec[key] = f"{rec[key]}-{tag}"
        for outer, key in (("message", "id"), ("toolUseResult", "agentId")):  # Task→subagent
            inner = rec.get(outer)
            if isinstance(inner, dict) and isinstance(inner.get(key), str):
                inner[key] = f"{inner[key]}-{tag}"
    return rec


def write_copy(dest: Path, k: int, sources: list[Path] = SOURCES) -> None:
    """Copy ``k`` of ``sources`` (default: :data:`SOURCES`) under ``dest/c<k>``, every id
    suffixed with ``-c<k>`` (:func:`rewrite`)."""
    tag = f"c{k:03d}"
    for src in sources:
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
    """Write K copies, K from the events one copy appends to an empty store; returns K."""
    write_copy(dest, 0)
    with tempfile.TemporaryDirectory() as probe:
        services = build(Settings(Path(probe)))
        per_copy = import_paths(services.ledger, [dest]).result.appended
        services.close()
    k = -(-min_events // per_copy)
    for i in range(1, k):
        write_copy(dest, i)
    return k


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have ended
    (a parallel import's worker processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def store_run(
    corpus: Path, settings: Settings, alone: Settings, min_events: int, tag: str
) -> dict[str, float]:
    """Import into an empty store as ``hookledger import`` does (``auto_workers``
    parsing processes beside this one) and, into a second empty store, in this process
    alone (``import:one_process``);
    catch up all projections from empty views; rebuild all, then each.

    Each rate is given twice: per second of wall time, and per second of CPU time of
    this process and its import worker (``:cpu``), which other load on a shared machine
    disturbs much less."""
    out: dict[str, float] = {}

    def timed(name: str, count: Callable[[], int], call: Callable[[], object]) -> None:
        t0, c0 = time.perf_counter(), cpu_seconds()
        call()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        out[name], out[f"{name}:cpu"] = count() / wall, count() / cpu

    result: list[int] = []
    one = build(alone)
    timed("import:one_process", lambda: result[-1],
          lambda: result.append(import_paths(one.ledger, [corpus]).result.appended))
    one.close()
    services = build(settings)
    workers = auto_workers(discover([corpus]))
    timed("import", lambda: result[-1], lambda: result.append(
        import_paths(services.ledger, [corpus], workers=workers).result.appended))
    out["import_workers"] = workers
    out["events"] = result[-1]
    if min(result) < min_events or result[0] != result[1]:
        sys.exit(f"imports appended {result} events (at least {min_events}, the same twice)")
    head = services.ledger.max_position()  # rates below are log positions per second
    timed("catch_up_all", lambda: head, services.runner.catch_up)  # all projections, empty views
    timed("rebuild:all", lambda: head, services.runner.rebuild)  # one pass, all projections
    for name in PROJECTION_CLASSES:
        timed(f"rebuild:{name}", lambda: head, lambda n=name: services.runner.rebuild(n))
    services.close()
    for name in PROJECTION_CLASSES:  # as `hookledger projections rebuild NAME` does
        child = rebuild_in_child(settings, name)
        out[f"rebuild_process:{name}"] = child["positions"] / child["wall_s"]
        out[f"rebuild_process:{name}:cpu"] = child["positions"] / child["cpu_s"]
    return {f"{tag}:{m}": v for m, v in out.items()}


def rebuild_in_child(settings: Settings, name: str) -> dict[str, float]:
    """benchmarks/rebuild_child.py: one rebuild of ``name`` in a fresh process."""
    fields = {"data_dir": str(settings.data_dir), "database_url": settings.database_url,
              "database_schema": settings.database_schema}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rebuild_child.py"),
                           json.dumps(fields), name], check=True, capture_output=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def pg_run(corpus: Path, tmp: Path, min_events: int) -> dict[str, float]:
    schemas = [f"bench_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"CREATE SCHEMA {schema}")
    try:
        return store_run(corpus, Settings(tmp, PG_URL, schemas[0]),
                         Settings(tmp, PG_URL, schemas[1]), min_events, "postgres")
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def hook_bodies(n: int, loop: int) -> Iterator[bytes]:
    """``n`` hook bodies; every pass over the payloads gives ``tool_use_id`` a new suffix."""
    for i in range(n):
        p = HOOKS[i % len(HOOKS)]
        tool_use_id = f"{p['tool_use_id']}-L{loop + i // len(HOOKS)}"
        yield json.dumps({**p, "tool_use_id": tool_use_id}).encode()


def post(client: httpx.Client, body: bytes) -> tuple[float, int]:
    headers = {"Content-Type": "application/json", "X-Hookledger-Capture-Key": str(uuid.uuid4())}
    t0 = time.perf_counter()
    r = client.post("/v1/hooks/claude-code", content=body, headers=headers)
    if r.status_code != 202:
        raise RuntimeError(f"POST returned {r.status_code}: {r.text[:300]}")
    return time.perf_counter() - t0, r.json()["appended"]


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}  # SQLite
    cmd = [Path(sys.executable).parent / "hookledger", "--data-dir", data, "serve", "--port", port]
    with data.with_suffix(".log").open("wb") as log:
        proc = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, env=env)
    base, deadline = f"http://127.0.0.1:{port}", time.perf_counter() + 60
    while proc.poll() is None and time.perf_counter() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not come up; see {data.with_suffix('.log')}")


def hook_run(data: Path, requests: int, senders: int) -> dict[str, float]:
    """Sequential round trips (p50/p99), then ``senders`` concurrent threads (throughput)."""
    proc, base = start_server(data)
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            for body in hook_bodies(20, 10_000):  # warm-up, not measured
                post(client, body)
            ms = [post(client, b)[0] * 1000 for b in hook_bodies(requests, 0)]
        q = statistics.quantiles(ms, n=100, method="inclusive")
        bodies = list(hook_bodies(requests, 1_000))  # tool_use_ids distinct from the pass above
        def sender(i: int) -> int:  # one client (connection) per thread
            with httpx.Client(base_url=base, timeout=60) as c:
                return sum(post(c, b)[1] for b in bodies[i::senders])
        t0 = time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            events = sum(pool.map(sender, range(senders)))
        wall = time.perf_counter() - t0
        return {"hook_p50_ms": q[49], "hook_p99_ms": q[98], "hook_concurrent_events": events / wall,
                "hook_concurrent_requests": requests / wall}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def profile(corpus: Path, tmp: Path) -> None:
    services = build(Settings(tmp))
    for name, call in (("import", lambda: import_paths(services.ledger, [corpus])),
                       ("catch-up", services.runner.catch_up)):
        prof = cProfile.Profile()
        prof.runcall(call)
        with (RESULTS / f"profile-{name}.txt").open("w") as out:
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
    services.close()


def table_row(r: dict) -> str:  # type: ignore[type-arg]
    fmt = "{:,.2f}" if r["unit"] == "ms" else "{:,.0f}"
    runs = ", ".join(fmt.format(v) for v in r["runs"])
    target = "—" if r["target"] is None else f"≥ {r['target']:,}"
    met = "—" if r["met"] is None else ("yes" if r["met"] else "**no**")
    return (f"| {r['metric']} | {fmt.format(r['median'])} | {r['unit']} | {runs} | {target} "
            f"| {met} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-events", type=int, default=100_000)
    ap.add_argument("--hook-requests", type=int, default=1000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also cProfile one import + catch-up "
                    "(top 40 by cumulative time to benchmarks/results/profile-*.txt)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hookledger-bench-") as name:
        tmp = Path(name)
        k = make_corpus(tmp / "corpus", args.min_events)
        try:
            use_pg = not args.no_postgres and not psycopg.connect(PG_URL, connect_timeout=3).close()
        except psycopg.Error:
            use_pg = False
        for r in range(args.repeats):
            got = store_run(tmp / "corpus", Settings(tmp / f"s{r}"), Settings(tmp / f"a{r}"),
                            args.min_events, "sqlite")
            if use_pg:
                got |= pg_run(tmp / "corpus", tmp / f"p{r}", args.min_events)
            got |= hook_run(tmp / f"h{r}", args.hook_requests, args.senders)
            for m, v in got.items():
                runs.setdefault(m, []).append(v)
            print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr)
        if args.profile:
            profile(tmp / "corpus", tmp / "prof")
    rows = [{"metric": m, "median": statistics.median(v), "runs": v, "target": TARGETS.get(m),
             "met": None if m not in TARGETS else statistics.median(v) >= TARGETS[m],
             "unit": "ms" if m.endswith("_ms") else "events" if m.endswith(":events")
             else "workers" if m.endswith("import_workers")
             else "requests/s" if m.endswith("requests")
             else "events/CPU-s" if m.endswith(":cpu") else "events/s"}
            for m, v in runs.items()]
    report = {"machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "params": vars(args) | {"copies": k, "postgres": use_pg}, "results": rows}
    (RESULTS / "latest.json").write_text(json.dumps(report, indent=2))
    print(f"\n{k} copies of the Claude fixtures; median of {args.repeats} run(s)\n")
    print("| metric | median | unit | runs | target | met |\n|---|---:|---|---|---:|---|")
    print("\n".join(map(table_row, rows)))


if __name__ == "__main__":
    main()
