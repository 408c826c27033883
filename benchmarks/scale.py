"""A heavy Claude Code user's corpus: many sessions, one very long transcript, long lines.

Writes, under ``DEST``:

- ``full/``: ``--copies`` copies of the fixtures :mod:`benchmarks.run` imports
  (:func:`run.write_copy`, every id suffixed per copy): 17 sessions, ~4,200 events each;
- ``small/``: ``--small-copies`` copies of four short real transcripts (3 sessions each),
  so the store holds tens of thousands of sessions;
- ``big/<session>.jsonl``: one session of about ``--big-mb`` MB: the 1,863-line spotter
  transcript written again and again, as repeated auto-compaction re-writes a long
  session's history (FORMATS.md C9): each pass repeats the first quarter of the records
  with their original ``uuid`` and ``message.id`` (duplicates) and the rest with new ones;
  ``--long-lines`` attachment records of ~500 KB (C16) sit in it, one per pass at most.

Then measure with ``/usr/bin/time -v`` as docs/benchmarks.md ("A heavy user's store") says.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from run import FIX, SOURCES, rewrite, write_copy

SPOTTER = FIX / "spotter-claude-transcripts"
BIG_SOURCE = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
SMALL = [SPOTTER / "short.jsonl",
         *(FIX / "agentcmd-claude-transcripts" / n for n in
           ("user-image.jsonl", "user-slash-command-with-args.jsonl", "tool-result-image.jsonl"))]
LONG_LINE_BYTES = 500_000


def long_line(session_id: str, parent: str | None, n: int) -> dict:  # type: ignore[type-arg]
    """An ``attachment`` record holding a ~500 KB file, as Claude Code writes one."""
    text = "".join(f"def handler_{n}_{i}(event, context):\n    return {{'line': {i}}}\n"
                   for i in range(LONG_LINE_BYTES // 56))
    return {"parentUuid": parent, "isSidechain": False, "userType": "external",
            "cwd": "/home/USER/projects/spotter", "sessionId": session_id, "version": "2.1.39",
            "gitBranch": "master", "type": "attachment", "uuid": f"long-line-{n}-{session_id}",
            "timestamp": "2026-02-11T10:00:00.000Z",
            "attachment": {"type": "file", "filename": f"/home/USER/big_{n}.py",
                           "content": {"type": "text", "file": {"filePath": f"/home/USER/big_{n}.py",
                                                                "content": text}}}}


def write_big(dest: Path, megabytes: int, long_lines: int) -> Path:
    lines = [ln for ln in BIG_SOURCE.read_text(encoding="utf-8").split("\n") if ln.strip()]
    session = f"{json.loads(lines[1])['sessionId']}-big"
    out = dest / "big" / f"{session}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    size, rep, kept = 0, 0, len(lines) // 4
    with out.open("w", encoding="utf-8") as f:
        while size < megabytes << 20:
            last = None
            for i, line in enumerate(lines):
                rec = rewrite(json.loads(line), "big" if i < kept else f"big-r{rep}")
                if isinstance(rec, dict) and "sessionId" in rec:
                    rec["sessionId"] = session
                    last = rec.get("uuid", last)
                text = json.dumps(rec) + "\n"
                f.write(text)
                size += len(text)
            if rep < long_lines:
                text = json.dumps(long_line(session, last, rep)) + "\n"
                f.write(text)
                size += len(text)
            rep += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--small-copies", type=int, default=4500)
    ap.add_argument("--big-mb", type=int, default=60)
    ap.add_argument("--long-lines", type=int, default=4)
    args = ap.parse_args()
    for k in range(args.copies):
        write_copy(args.dest / "full", k, SOURCES)
    for k in range(args.small_copies):
        write_copy(args.dest / "small", args.copies + k, SMALL)  # tags distinct from full/
    big = write_big(args.dest, args.big_mb, args.long_lines)
    print(f"{args.copies} full copies, {args.small_copies} small copies, {big} "
          f"({big.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
