"""What ``serve`` pays to follow a long Claude Code transcript as it grows: each turn
appends a few lines, and the follower imports the file again. See "Following a long
transcript" in docs/benchmarks.md.

    .venv/bin/python benchmarks/follow.py [--copies 10] [--turns 20] [--lines 20]

Builds a transcript of ``--copies`` copies of the largest bundled one (spotter's
``258c7280…``, 2.9 MB and 1,863 lines each; uuids and message ids made distinct per
copy), writes all but the last ``turns x lines`` lines, imports it, then per turn appends
``--lines`` lines and imports again, two ways on two fresh stores:

* ``whole``: ``import_paths`` with the imported-files cache, as the follower did before
  (every line parsed again, every fact found a duplicate);
* ``tail``: :meth:`api.transcript_follower.TranscriptFollower.import_files`, which
  reads a Claude Code transcript from where its last read ended.

Prints, per way, the first import's seconds and the per-turn import's median and max in
ms, and checks that both stores end with the same events (stream, version, event class
and idempotency key): the tail must lose nothing. Then the memory a tail keeps for the
whole transcript (``tracemalloc``: what stays allocated after its first read, the facts
dropped): what the follower holds per transcript it follows.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

from api.bootstrap import build
from api.transcript_follower import TranscriptFollower
from ledger.config import Settings
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths
from ledger.transcript_tail import TranscriptTail

SOURCE = (
    Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "spotter-claude-transcripts"
    / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
)


def long_transcript(copies: int) -> list[bytes]:
    """The lines of ``copies`` copies of :data:`SOURCE`, each copy's uuids, parent uuids
    and message ids made its own (so every copy is new facts, as a long session's
    later turns are)."""
    out: list[bytes] = []
    for c in range(copies):
        for line in SOURCE.read_bytes().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            for k in ("uuid", "parentUuid"):
                if isinstance(rec.get(k), str):
                    rec[k] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{c}:{rec[k]}"))
            msg = rec.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("id"), str):
                msg["id"] = f"{msg['id']}-{c}"
            out.append(json.dumps(rec).encode())
    return out


def events(services) -> list[tuple[str, int, str, str]]:  # type: ignore[no-untyped-def]
    rows = services.ledger.recorder.select_rows(0, 10**9, raw=False)
    return sorted((r[1], r[2], r[3], json.loads(r[4])["event_key"]) for r in rows)


def run_way(way: str, lines: list[bytes], turns: int, per_turn: int, tmp: Path) -> dict:
    path = tmp / way / "projects" / "-home-me-project" / SOURCE.name
    path.parent.mkdir(parents=True)
    cut = len(lines) - turns * per_turn
    path.write_bytes(b"\n".join(lines[:cut]) + b"\n")
    settings = Settings(tmp / way / "data")
    services = build(settings, cache_size=1024)  # as serve builds it
    follower = TranscriptFollower(services.ledger, settings.data_dir, settings.store_identity(), 1.0)

    def once() -> None:
        if way == "whole":
            import_paths(services.ledger, [path], imported=imported)
        else:
            follower.import_files([str(path)], imported)
            if follower.error is not None:
                raise follower.error

    try:
        with ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, settings.store_identity()) as imported:
            t0 = time.perf_counter()
            once()
            first = time.perf_counter() - t0
            times = []
            for t in range(turns):
                chunk = lines[cut + t * per_turn : cut + (t + 1) * per_turn]
                with open(path, "ab") as f:
                    f.write(b"\n".join(chunk) + b"\n")
                t0 = time.perf_counter()
                once()
                times.append(time.perf_counter() - t0)
        found = events(services)
    finally:
        services.close()
    return {
        "first_s": first, "turn_median_ms": 1e3 * statistics.median(times),
        "turn_max_ms": 1e3 * max(times), "events": found,
        "tail_reads": follower.tail_reads, "whole_reads": follower.whole_reads,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--lines", type=int, default=20)
    args = ap.parse_args()
    lines = long_transcript(args.copies)
    size = sum(len(x) + 1 for x in lines)
    print(f"transcript: {size / 1e6:.1f} MB, {len(lines)} lines; "
          f"{args.turns} turns of {args.lines} lines")
    with tempfile.TemporaryDirectory() as d:
        results = {way: run_way(way, lines, args.turns, args.lines, Path(d)) for way in ("whole", "tail")}
    for way, r in results.items():
        print(f"{way:6s} first import {r['first_s']:.2f} s; per turn median {r['turn_median_ms']:.1f} ms,"
              f" max {r['turn_max_ms']:.1f} ms; {len(r['events'])} events")
    print(f"tail: {results['tail']['tail_reads']} tail reads, {results['tail']['whole_reads']} whole reads")
    if results["whole"]["events"] != results["tail"]["events"]:
        raise SystemExit("the stores differ: the tail lost or added events")
    print("same events in both stores")
    print(f"a tail's state after reading the whole transcript: {kept_bytes(lines) / 1e6:.1f} MB")


def kept_bytes(lines: list[bytes]) -> int:
    """Bytes a :class:`TranscriptTail` keeps allocated after reading ``lines``."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / SOURCE.name
        path.write_bytes(b"\n".join(lines) + b"\n")
        gc.collect()
        tracemalloc.start()
        try:
            tail = TranscriptTail(path)
            parsed = tail.read()
            assert parsed is not None
            del parsed
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    return kept


if __name__ == "__main__":
    main()
