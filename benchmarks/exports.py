"""Export benchmark: ``hookledger export`` (Parquet, JSONL) of a large store and
``hookledger verify PATH`` of each export: events/s and peak RSS. See docs/benchmarks.md.

    .venv/bin/python benchmarks/exports.py --events 1000000 --work /tmp/hl-exports-bench

The store is built once in ``--work`` (reused when it already holds ``--events``): K
copies of the Claude fixtures with distinct ids (``benchmarks/run.py:make_corpus``),
imported in-process. Each export and verify then runs as the real CLI in its own
process; wall time and that process's peak RSS (``os.wait4`` rusage) are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from run import RESULTS, ROOT, make_corpus

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths


def build_store(work: Path, events: int) -> tuple[Settings, int, float | None]:
    """The store in ``work/data`` with at least ``events`` events (built when missing)."""
    settings = Settings(work / "data")
    services = build(settings)
    try:
        have = services.ledger.max_position()
        if have >= events:
            return settings, have, None
    finally:
        services.close()
    shutil.rmtree(settings.data_dir, ignore_errors=True)  # an interrupted build: start again
    shutil.rmtree(work / "corpus", ignore_errors=True)
    services = build(settings)
    try:
        k = make_corpus(work / "corpus", events)
        print(f"corpus: {k} copies; importing…", file=sys.stderr, flush=True)
        t = time.perf_counter()
        import_paths(services.ledger, [work / "corpus"])
        took = time.perf_counter() - t
        return settings, services.ledger.max_position(), took
    finally:
        services.close()


def timed(*args: str) -> tuple[float, int, str]:
    """Run the CLI; (wall seconds, peak RSS in MiB, stdout). Raises on a non-zero exit."""
    cmd = [sys.executable, "-m", "api.cli", *args]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {err.decode()[-2000:]}")
    return took, usage.ru_maxrss // 1024, out.decode().strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, required=True, help="directory for the store and exports")
    ap.add_argument("--formats", default="parquet,jsonl")
    ap.add_argument("--against-store", action="store_true",
                    help="also time `verify PATH --against-store` of the Parquet export")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    settings, n, import_s = build_store(args.work, args.events)
    data = str(settings.data_dir)
    rows = []
    if import_s is not None:
        rows.append({"step": "build store (import)", "seconds": import_s, "rss_mib": None,
                     "events": n})
    for fmt in args.formats.split(","):
        out = args.work / f"export-{fmt}"
        shutil.rmtree(out, ignore_errors=True)
        steps = [(f"export --format {fmt}", ["export", "--format", fmt, "--output", str(out)]),
                 (f"verify PATH ({fmt})", ["verify", str(out)])]
        if args.against_store and fmt == "parquet":
            steps.append(("verify PATH --against-store (parquet)",
                          ["verify", str(out), "--against-store"]))
        for name, cli_args in steps:
            took, rss, stdout = timed("--data-dir", data, *cli_args)
            print(f"{name}: {took:.1f} s, {rss} MiB — {stdout}", file=sys.stderr, flush=True)
            rows.append({"step": name, "seconds": took, "rss_mib": rss, "events": n})
        size = sum(p.stat().st_size for p in out.iterdir())
        rows[-1]["export_bytes"] = size
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"machine": {"nproc": os.cpu_count(), "python": platform.python_version()},
              "events": n, "rows": rows}
    (RESULTS / "exports.json").write_text(json.dumps(report, indent=2))
    print(f"\n{n:,} events in the store\n")
    print("| step | wall s | events/s | peak RSS MiB |\n|---|---:|---:|---:|")
    for r in rows:
        rss = "—" if r["rss_mib"] is None else f"{r['rss_mib']:,}"
        print(f"| {r['step']} | {r['seconds']:.1f} | {r['events'] / r['seconds']:,.0f} | {rss} |")


if __name__ == "__main__":
    main()
