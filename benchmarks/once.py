"""One import and one catch-up of the benchmark corpus with the code of the current
directory — for A/B runs of two commits at the same moment on a noisy machine:

    .venv/bin/python benchmarks/once.py /tmp/corpus            # builds the corpus if missing
    .venv/bin/python benchmarks/once.py /tmp/corpus --workers 1   # one parsing worker
    .venv/bin/python benchmarks/once.py /tmp/corpus --rebuild sessions   # then one rebuild
    .venv/bin/python benchmarks/once.py /tmp/corpus --reimport   # then two re-imports
    git worktree add /tmp/old <commit>
    (cd /tmp/old && PYTHONPATH=. /work/main/.venv/bin/python /work/main/benchmarks/once.py /tmp/corpus)

Prints events appended, import events/s and events per CPU-second of this process and
its ended children, the import's parsing workers (less disturbed by other load than wall
time), with the user and system seconds of each, catch-up (all projections) events/s, and
with ``--rebuild NAME`` the events/s of rebuilding that projection, with ``--reimport``
the seconds of re-importing the unchanged corpus through the imported-files cache
(:mod:`ledger.imported_files`: nothing read) and without it (every file read again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout under test, not this file's

from api.bootstrap import build
from ledger.config import Settings
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--workers", type=int, default=0, help="parsing processes (import_paths)")
    ap.add_argument("--rebuild", metavar="NAME", action="append", default=[],
                    help="then time `projections rebuild NAME` (repeatable)")
    ap.add_argument("--reimport", action="store_true",
                    help="import through the imported-files cache, then time a second "
                    "import of the unchanged corpus with it and a third without it (--reread)")
    args = ap.parse_args()
    corpus = args.corpus
    if not corpus.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import run

        run.make_corpus(corpus, 100_000)
    data = Path(tempfile.mkdtemp())
    try:
        services = build(Settings(data))
        files_cache = ImportedFiles(data / FILE_NAME, services.ledger, "bench") if args.reimport else None
        t, before = time.perf_counter(), os.times()
        appended = import_paths(
            services.ledger, [corpus], workers=args.workers, imported=files_cache
        ).result.appended
        imported, after = time.perf_counter() - t, os.times()
        user, system = after.user - before.user, after.system - before.system
        child_user = after.children_user - before.children_user
        child_system = after.children_system - before.children_system
        imported_cpu = user + system + child_user + child_system
        t = time.perf_counter()
        services.runner.catch_up()
        caught_up = time.perf_counter() - t
        reimported = []
        if files_cache is not None:
            for label, cache in (("unchanged", files_cache), ("--reread", None)):
                t = time.perf_counter()
                again = import_paths(services.ledger, [corpus], workers=args.workers, imported=cache)
                assert again.result.appended == 0
                reimported.append(f", re-import ({label}) {time.perf_counter() - t:.2f} s")
            files_cache.close()
        rebuilt = []
        for name in args.rebuild:
            t = time.perf_counter()
            services.runner.rebuild(name)
            rebuilt.append(f", rebuild {name} {appended / (time.perf_counter() - t):,.0f}/s")
        services.close()
        print(
            f"{appended} events: import {appended / imported:,.0f}/s"
            f" ({appended / imported_cpu:,.0f}/CPU-s; user {user:.2f} s, system {system:.2f} s,"
            f" workers {child_user:.2f} s + {child_system:.2f} s),"
            f" catch-up {appended / caught_up:,.0f}/s" + "".join(reimported) + "".join(rebuilt)
        )
    finally:
        shutil.rmtree(data)


if __name__ == "__main__":
    main()
