"""One projection rebuild in a process of its own, as ``hookledger projections rebuild
NAME`` runs it (run by benchmarks/run.py; interpreter start and store open are not
timed). Prints ``{"positions": N, "wall_s": …, "cpu_s": …}`` (JSON, one line).

    python benchmarks/rebuild_child.py '{"data_dir": "/tmp/d"}' sessions
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from api.bootstrap import build
from ledger.config import Settings


def main() -> None:
    fields, name = json.loads(sys.argv[1]), sys.argv[2]
    services = build(Settings(**{**fields, "data_dir": Path(fields["data_dir"])}))
    positions = services.ledger.max_position()
    t0, c0 = time.perf_counter(), time.process_time()
    services.runner.rebuild(name)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    services.close()
    print(json.dumps({"positions": positions, "wall_s": wall, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
