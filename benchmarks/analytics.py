"""DuckDB analytics benchmarks: catch-up of 1M events, named queries. See docs/benchmarks.md.

The 1M-event store is built once (``--store DIR``, reused when it is already there) by
importing K copies of the real Claude Code fixtures with distinct ids
(``benchmarks/run.py:write_copy``), one copy at a time, through
``ledger.importer.import_paths``: real events, not synthetic ones.

    .venv/bin/python benchmarks/analytics.py --store /tmp/hookledger-bench-1m --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, write_copy

TARGET_CATCH_UP_S = 15.0
TARGET_QUERY_MS = 50.0


def build_store(store: Path, min_events: int, settings: Settings | None = None) -> int:
    """Import copies of the fixtures until the log holds ``min_events``; returns the head.
    ``settings``: another backend for the store (default: SQLite in ``store``)."""
    store.mkdir(parents=True, exist_ok=True)
    services = build(settings or Settings(store))
    try:
        k = 0
        while (head := services.ledger.max_position()) < min_events:
            with tempfile.TemporaryDirectory() as tmp:
                # copies already imported are skipped by idempotency keys; find the next
                while (store / f".copy-{k:04d}").exists():
                    k += 1
                write_copy(Path(tmp), k)
                appended = import_paths(services.ledger, [Path(tmp)]).result.appended
                (store / f".copy-{k:04d}").write_text(str(appended))
                print(f"copy {k}: +{appended} events, head {head + appended:,}", flush=True)
        return head
    finally:
        services.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--store", type=Path, required=True, help="data directory of the 1M store")
    p.add_argument("--min-events", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3, help="catch-ups from empty (median)")
    p.add_argument("--query-repeats", type=int, default=21, help="runs per named query")
    p.add_argument("--build-only", action="store_true")
    args = p.parse_args()

    head = build_store(args.store, args.min_events)
    if args.build_only:
        return
    from projections.analytics import catch_up, named_queries, open_snapshot, run_query
    from projections.analytics.store import analytics_path

    services = build(Settings(args.store))
    results: dict[str, object] = {"events": head}
    runs, cpu = [], []
    for _ in range(args.repeats):
        for f in args.store.glob("analytics*"):
            f.unlink() if f.is_file() else shutil.rmtree(f)
        t0, c0 = time.perf_counter(), time.process_time()
        applied = catch_up(services.ledger, args.store)
        runs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)  # all threads of this process (DuckDB's too)
        print(f"catch-up: {applied:,} events in {runs[-1]:.2f} s wall, {cpu[-1]:.2f} s CPU",
              flush=True)
    results["catch_up_s"] = runs
    results["catch_up_cpu_s"] = cpu
    results["analytics_db_bytes"] = analytics_path(args.store).stat().st_size
    services.close()

    con = open_snapshot(args.store)
    query_ms: dict[str, list[float]] = {}
    for name in named_queries():
        times = []
        for _ in range(args.query_repeats):
            t0 = time.perf_counter()
            rows = run_query(con, name)
            times.append((time.perf_counter() - t0) * 1000)
        query_ms[name] = times
        print(f"{name}: median {statistics.median(times):.1f} ms ({len(rows)} rows)", flush=True)
    results["query_ms"] = query_ms
    con.close()

    print()
    print("| metric | median | runs | target | met |")
    print("|---|---:|---|---:|---|")
    med = statistics.median(runs)
    print(f"| catch-up {head:,} events | {med:.2f} s | {', '.join(f'{r:.2f}' for r in runs)} "
          f"| ≤ {TARGET_CATCH_UP_S:.0f} s | {'yes' if med <= TARGET_CATCH_UP_S else '**no**'} |")
    print(f"| catch-up CPU time (all threads) | {statistics.median(cpu):.2f} s "
          f"| {', '.join(f'{r:.2f}' for r in cpu)} | — | — |")
    for name, times in query_ms.items():
        m = statistics.median(times)
        print(f"| query `{name}` | {m:.1f} ms | min {min(times):.1f}, max {max(times):.1f} "
              f"| ≤ {TARGET_QUERY_MS:.0f} ms | {'yes' if m <= TARGET_QUERY_MS else '**no**'} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "analytics.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
