"""Rebuild of all projections with and without read-ahead, per backend: the evidence
for :attr:`projections.runner.ProjectionRunner.read_ahead` being off by
default. See "Read-ahead" in docs/benchmarks.md.

    .venv/bin/python benchmarks/read_ahead.py --rounds 4 [--each] [--no-postgres] [--corpus DIR]

Imports the benchmark corpus (``run.make_corpus``, >= 100k events; built in a temporary
directory unless ``--corpus`` names one) once per backend, then per round runs
``runner.rebuild()`` (and with ``--each`` then each projection's rebuild alone) with
read-ahead on and off, alternating which goes first. Prints
events/s of wall time and the process's user and system seconds for each run, then the
medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import run

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import import_paths
from projections.runner import PROJECTION_CLASSES


def rebuild(services, read_ahead: bool, names: tuple[str, ...]) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(events/s of wall time, user s, system s) of one rebuild of ``names`` (empty:
    all projections in one pass)."""
    services.runner.read_ahead = read_ahead
    before, t0 = os.times(), time.perf_counter()
    services.runner.rebuild(*names)
    wall, after = time.perf_counter() - t0, os.times()
    return (
        services.ledger.max_position() / wall,
        after.user - before.user,
        after.system - before.system,
    )


def backend(
    name: str, settings: Settings, corpus: Path, rounds: int, targets: list[tuple[str, ...]]
) -> None:
    services = build(settings)
    try:
        appended = import_paths(services.ledger, [corpus]).result.appended
        print(f"{name}: {appended} events imported", flush=True)
        for names in targets:
            what = "+".join(names) or "all"
            runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
            for r in range(rounds):
                for read_ahead in (True, False) if r % 2 == 0 else (False, True):
                    got = rebuild(services, read_ahead, names)
                    runs[read_ahead].append(got)
                    label = "on " if read_ahead else "off"
                    print(f"  {what} round {r + 1} read-ahead {label}: {got[0]:,.0f} events/s, "
                          f"user {got[1]:.2f} s, system {got[2]:.2f} s", flush=True)
            for read_ahead, got in runs.items():
                label = "on " if read_ahead else "off"
                rate, user, system = (statistics.median(g[i] for g in got) for i in range(3))
                print(f"  {what} median read-ahead {label}: {rate:,.0f} events/s, "
                      f"user {user:.2f} s, system {system:.2f} s", flush=True)
    finally:
        services.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--each", action="store_true",
                    help="also rebuild each projection alone (after the rebuild of all)")
    args = ap.parse_args()
    targets: list[tuple[str, ...]] = [()]
    if args.each:
        targets += [(n,) for n in PROJECTION_CLASSES]
    with tempfile.TemporaryDirectory(prefix="hookledger-read-ahead-") as name:
        tmp = Path(name)
        corpus = args.corpus or tmp / "corpus"
        if not corpus.exists():
            run.make_corpus(corpus, 100_000)
        backend("sqlite", Settings(tmp / "sqlite"), corpus, args.rounds, targets)
        if args.no_postgres:
            return
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(run.PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        try:
            backend("postgres", Settings(tmp / "pg", run.PG_URL, schema), corpus, args.rounds, targets)
        finally:
            with psycopg.connect(run.PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
