"""Recording cost per hook body by commit size: ``Ledger.record`` of 1, 8 or 64 parsed
hook bodies per call (one commit each), into a fresh SQLite store, no server. Shows the
fixed cost of a commit (``fsync``: the event store keeps ``synchronous=FULL``) and how
the event store's page size changes it. See the core-ledger section of
docs/benchmarks.md.

    .venv/bin/python benchmarks/record_groups.py --page-size 4096 65536 --rounds 2

Prints µs of wall time per body for each group size; page sizes alternate per round.
The store is created with the given page size before the ledger opens it (an existing
file keeps its page size, see ``ledger.recorders.create_database``).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from hooks import tool_bodies

from api.bootstrap import build
from api.hot_path.hook_fast import uuid7
from ledger.config import Settings
from ledger.ingest import parse_hook_body

GROUPS = (1, 8, 64)


def run(page_size: int, bodies_per_group: int) -> dict[int, float]:
    """µs per body for each of :data:`GROUPS`, ``bodies_per_group`` bodies each."""
    data = Path(tempfile.mkdtemp(prefix="hookledger-groups-"))
    conn = sqlite3.connect(data / "events.db")
    conn.execute(f"PRAGMA page_size={page_size}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    parsed = [
        parse_hook_body("claude-code", b, uuid7())[0]
        for b in tool_bodies(bodies_per_group * len(GROUPS))
    ]
    services = build(Settings(data), cache_size=1024)  # as serve
    out: dict[int, float] = {}
    try:
        for n, group in enumerate(GROUPS):
            chunk = parsed[n * bodies_per_group : (n + 1) * bodies_per_group]
            t0 = time.perf_counter()
            for i in range(0, len(chunk), group):
                services.ledger.record([item for items in chunk[i : i + group] for item in items])
            out[group] = (time.perf_counter() - t0) / len(chunk) * 1e6
    finally:
        services.close()
        shutil.rmtree(data)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--page-size", type=int, nargs="+", default=[65536])
    ap.add_argument("--bodies", type=int, default=1000, help="bodies per group size")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.rounds):
        for page_size in args.page_size:
            got = run(page_size, args.bodies)
            print(f"page {page_size:>6}: " + ", ".join(
                f"{group} per commit {us:.1f} µs/body" for group, us in got.items()))


if __name__ == "__main__":
    main()
