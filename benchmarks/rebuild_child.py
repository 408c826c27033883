"""Projection rebuilds in a process of their own, as ``hookledger projections rebuild
NAME`` runs them (run by benchmarks/run.py; interpreter start and store open are not
timed). Prints one JSON line per rebuild: ``{"positions": N, "wall_s": …, "cpu_s": …}``.

    python benchmarks/rebuild_child.py '{"data_dir": "/tmp/d"}' sessions
    python benchmarks/rebuild_child.py '{"data_dir": "/tmp/d"}' sessions --repeats 7

The second form, run in two checkouts one after the other (``PYTHONPATH=.`` in each),
is how docs/benchmarks.md compares rebuild speeds of two commits on one store.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from api.bootstrap import build
from ledger.config import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("settings", help="Settings fields as JSON (data_dir, database_url, ...)")
    ap.add_argument("name", help="projection to rebuild")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    fields = json.loads(args.settings)
    services = build(Settings(**{**fields, "data_dir": Path(fields["data_dir"])}))
    positions = services.ledger.max_position()
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        services.runner.rebuild(args.name)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"positions": positions, "wall_s": wall, "cpu_s": cpu}), flush=True)
    services.close()


if __name__ == "__main__":
    main()
