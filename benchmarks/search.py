"""Search benchmarks (issue 6 item 5). See the "Search" section of docs/benchmarks.md.

1. Hook -> searchable: against a real ``hookledger serve`` on ``--store``, run the exact
   command ``install-hooks`` writes (the journal hot path) with a UserPromptSubmit whose
   prompt holds a new word, then poll ``GET /v1/search?q=<word>`` every 5 ms until the
   prompt is a hit. Timed from the start of the hook process. Target: ≤ 1 s.
2. Indexing: ``projections rebuild search`` over the whole store (events/s).
3. Queries over the store (built like benchmarks/analytics.py: copies of the real
   fixtures): median and p95 of each query, and of the SessionStart digest.

    .venv/bin/python benchmarks/search.py --store /tmp/hookledger-bench-search --min-events 200000
    .venv/bin/python benchmarks/search.py --store /tmp/hookledger-bench-search-pg --min-events 200000 \\
        --database-url postgresql://postgres@127.0.0.1:5432/test   # schema hookledger_bench_search
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import func, select

from api.bootstrap import build
from api.hook_install import hook_command, precompile
from ledger.config import Settings
from projections.context import project_digest
from projections.search_query import search_models

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analytics import build_store
from hooks import PROMPT, Serve, clean_env, pct
from run import RESULTS

TARGET_VISIBLE_MS = 1000.0
PG_SCHEMA = "hookledger_bench_search"
QUERIES = {
    "one common word": {"query": "test"},
    "two words": {"query": "mix test"},
    "rare word": {"query": "quokka"},
    "prompts only": {"query": "implement", "kinds": ("prompt",)},
    "any of 12 words (digest)": {
        "query": "task summary conversation requests actions spotter migration test push annotations plan review",
        "any_term": True, "kinds": ("observation", "summary"),
    },
    "newest first": {"query": "test", "order": "recent"},
}


def hook_to_searchable(store: Path, n: int, env: dict[str, str]) -> dict[str, float]:
    precompile()
    command = shlex.split(hook_command(store))
    srv = Serve(store, env)
    lat: list[float] = []
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for i in range(n + 3):
                word = "zq" + uuid.uuid4().hex[:10]
                body = json.dumps({**PROMPT, "session_id": str(uuid.uuid4()), "prompt": f"look for {word} please"})
                t0 = time.perf_counter()
                subprocess.run(command, input=body.encode(), env=clean_env(), capture_output=True, check=True)
                while not client.get("/v1/search", params={"q": word}).json()["hits"]:
                    if time.perf_counter() - t0 > 30:
                        raise RuntimeError("the prompt never became searchable")
                    time.sleep(0.005)
                if i >= 3:  # warm-up
                    lat.append((time.perf_counter() - t0) * 1000)
    finally:
        srv.stop()
    return {"p50_ms": statistics.median(lat), "p99_ms": pct(lat, 99), "max_ms": max(lat), "n": n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--store", type=Path, required=True, help="data directory (built once, reused)")
    p.add_argument("--min-events", type=int, default=200_000)
    p.add_argument("--hooks", type=int, default=50, help="hook -> searchable samples")
    p.add_argument("--repeats", type=int, default=21, help="runs per query")
    p.add_argument("--database-url", help="a PostgreSQL store instead of SQLite (schema "
                   f"{PG_SCHEMA}, kept for reruns)")
    args = p.parse_args()

    settings = Settings(args.store, database_url=args.database_url,
                        database_schema=PG_SCHEMA if args.database_url else None)
    env = {"HOOKLEDGER_DATABASE_URL": args.database_url, "HOOKLEDGER_DATABASE_SCHEMA": PG_SCHEMA} \
        if args.database_url else {}
    head = build_store(args.store, args.min_events, settings)
    services = build(settings)
    services.runner.catch_up()
    t0 = time.perf_counter()
    applied = services.runner.rebuild("search")
    rebuild_s = time.perf_counter() - t0
    docs = services.models.table("search_documents")
    with services.models.engine.connect() as conn:
        n_docs = conn.execute(select(func.count()).select_from(docs)).scalar_one()
    print(f"rebuild search: {applied:,} events, {n_docs:,} documents in {rebuild_s:.1f} s", flush=True)
    results: dict[str, object] = {"events": head, "documents": n_docs, "rebuild_s": rebuild_s}

    query_ms: dict[str, list[float]] = {}
    for name, options in QUERIES.items():
        times = []
        for _ in range(args.repeats):
            t1 = time.perf_counter()
            hits = search_models(services.models, **options)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t1) * 1000)
        query_ms[name] = times
        print(f"{name}: median {statistics.median(times):.1f} ms ({len(hits)} hits)", flush=True)
    cwd = "/home/USER/projects/spotter-worktrees/spotter-gqc"
    times = []
    for _ in range(args.repeats):
        t1 = time.perf_counter()
        digest = project_digest(services.models, cwd)
        times.append((time.perf_counter() - t1) * 1000)
    query_ms["SessionStart digest (memory + sessions)"] = times
    print(f"digest: median {statistics.median(times):.1f} ms ({len(digest)} chars)", flush=True)
    services.close()
    results["query_ms"] = query_ms

    visible = hook_to_searchable(args.store, args.hooks, env)
    results["hook_to_searchable"] = visible
    print()
    print("| metric | median | p95 / p99 | target | met |")
    print("|---|---:|---:|---:|---|")
    print(f"| rebuild `search` ({head:,} events, {n_docs:,} documents) | {rebuild_s:.1f} s "
          f"({applied / rebuild_s:,.0f} events/s) | | | |")
    for name, t in query_ms.items():
        print(f"| query: {name} | {statistics.median(t):.1f} ms | {pct(t, 95):.1f} ms | | |")
    ok = visible["p99_ms"] <= TARGET_VISIBLE_MS
    print(f"| hook → searchable ({visible['n']} prompts, journal path) | {visible['p50_ms']:.0f} ms "
          f"| p99 {visible['p99_ms']:.0f} ms (max {visible['max_ms']:.0f}) | ≤ {TARGET_VISIBLE_MS:.0f} ms "
          f"| {'yes' if ok else '**no**'} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "search-postgres.json" if args.database_url else "search.json"
    (RESULTS / name).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
