"""Where a single-payload ``POST /v1/hooks/claude-code`` spends its CPU, stage by stage,
on the payloads ``benchmarks/hooks.py`` posts (its ``tool_bodies``: 323 distinct
Pre/PostToolUse bodies, ids suffixed per pass). See "stop 24" in docs/benchmarks.md.

    .venv/bin/python benchmarks/post_stages.py [--bodies 16000] [--tmp /dev/shm]

Prints, in µs of this process's CPU (user + system):

* ``parse``: :func:`ledger.ingest.parse_hook_body` per body (JSON, privacy, facts);
* ``record gN``: :meth:`ledger.app.Ledger.record` per event, the parsed bodies recorded
  N at a time into a fresh SQLite store (aggregate cache 1,024, as ``serve``); the group
  writer records about 8 bodies per call when 8 senders POST. From g1 and a large group,
  the fixed cost per call and the cost per event.

``--tmp`` puts the stores there (``/dev/shm``: no fsync).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from hooks import tool_bodies

from api.bootstrap import build
from api.hot_path.hook_fast import uuid7
from ledger.config import Settings
from ledger.ingest import parse_hook_body

GROUPS = (1, 8, 512)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bodies", type=int, default=16_000)
    ap.add_argument("--tmp", type=Path, default=None)
    args = ap.parse_args()
    bodies = list(tool_bodies(args.bodies))
    at = datetime.now(UTC)
    keys = [uuid7() for _ in bodies]
    c = time.process_time()
    parsed = [parse_hook_body("claude-code", b, k, at)[0] for b, k in zip(bodies, keys, strict=True)]
    print(f"parse      {1e6 * (time.process_time() - c) / len(bodies):7.1f} µs per body")
    per_event: dict[int, float] = {}
    counts: dict[int, int] = {}
    for g in GROUPS:
        with tempfile.TemporaryDirectory(dir=args.tmp) as d:
            services = build(Settings(Path(d)), cache_size=1024)
            try:
                events = 0
                c = time.process_time()
                for i in range(0, len(parsed), g):
                    events += services.ledger.record([f for p in parsed[i : i + g] for f in p]).appended
                per_event[g] = 1e6 * (time.process_time() - c) / events
                counts[g] = events
            finally:
                services.close()
        print(f"record g{g:<4} {per_event[g]:7.1f} µs per event ({events} events)")
    big = GROUPS[-1]
    fixed = (per_event[1] - per_event[big]) * counts[1] / len(parsed)  # g1: a call per body
    print(f"record: ~{fixed:.0f} µs fixed per call, ~{per_event[big]:.0f} µs per event")


if __name__ == "__main__":
    main()
