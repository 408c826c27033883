"""Server side of the spool journal written by the hook client when the server is down.

:func:`drain` renames each ``<agent>.jsonl`` journal aside (new hook writes go to a
fresh file), waits for any writer still holding its lock, ingests every line with its
original capture key (so a crash and a second drain append nothing twice) and then
deletes it. A line that is not a journal entry is recorded as rejected input.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from datetime import datetime
from pathlib import Path

import orjson

from ledger.app import Ledger, RecordResult
from ledger.ingest import ingest_hook
from ledger.observation import Rejected
from ledger.sources.claude_common import parse_time


def drain(ledger: Ledger, spool_dir: Path) -> RecordResult:
    """Ingest and remove every journal in ``spool_dir``; returns what was appended."""
    total = RecordResult()
    if not spool_dir.is_dir():
        return total
    for journal in sorted(spool_dir.glob("*.jsonl")):
        aside = journal.with_name(f"{journal.name}.{uuid.uuid4().hex}.ingesting")
        try:
            os.rename(journal, aside)
        except FileNotFoundError:
            continue
    for aside in sorted(spool_dir.glob("*.ingesting")):
        with open(aside, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            data = f.read()
        for i, line in enumerate(data.split(b"\n"), start=1):
            if line.strip():
                total.add(_ingest_line(ledger, str(aside), i, line))
        aside.unlink()
    return total


def _ingest_line(ledger: Ledger, source: str, lineno: int, line: bytes) -> RecordResult:
    try:
        entry = orjson.loads(line)
        agent, key, body = entry["agent"], entry["key"], entry["body"]
        at: datetime | None = parse_time(entry.get("at"))
        edge = entry.get("redactions") or []
        edge = [r for r in edge if isinstance(r, dict) and {"kind", "path", "count"} <= set(r)]
        raw = body.encode("utf-8", "surrogateescape")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        return ledger.record([Rejected(f"spool:{Path(source).name.split('.')[0]}", f"line {lineno}",
                                       f"not a spool journal entry: {e}", line)])
    return ingest_hook(ledger, agent, raw, key, at, edge_redactions=edge).result
