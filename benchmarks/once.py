"""One import and one catch-up of the benchmark corpus with the code of the current
directory — for A/B runs of two commits at the same moment on a noisy machine:

    .venv/bin/python benchmarks/once.py /tmp/corpus            # builds the corpus if missing
    git worktree add /tmp/old <commit>
    (cd /tmp/old && PYTHONPATH=. /work/main/.venv/bin/python /work/main/benchmarks/once.py /tmp/corpus)

Prints events appended, import events/s and events per CPU-second of this process (less
disturbed by other load than wall time) with its user and system seconds, and catch-up
(all projections) events/s.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout under test, not this file's

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths


def main() -> None:
    corpus = Path(sys.argv[1])
    if not corpus.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import run

        run.make_corpus(corpus, 100_000)
    data = Path(tempfile.mkdtemp())
    try:
        services = build(Settings(data))
        t, cpu, times = time.perf_counter(), time.process_time(), os.times()
        appended = import_paths(services.ledger, [corpus]).result.appended
        imported, imported_cpu = time.perf_counter() - t, time.process_time() - cpu
        user, system = os.times().user - times.user, os.times().system - times.system
        t = time.perf_counter()
        services.runner.catch_up()
        caught_up = time.perf_counter() - t
        services.close()
        print(
            f"{appended} events: import {appended / imported:,.0f}/s"
            f" ({appended / imported_cpu:,.0f}/CPU-s; user {user:.2f} s, system {system:.2f} s),"
            f" catch-up {appended / caught_up:,.0f}/s"
        )
    finally:
        shutil.rmtree(data)


if __name__ == "__main__":
    main()
