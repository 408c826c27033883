"""``hookledger import``: find agent files, detect their format, record them.

Files are read whole, parsed by the source module of their format and recorded with
:meth:`ledger.app.Ledger.record`; re-importing a file appends nothing (idempotency
keys), and a grown file appends only what is new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ledger.app import Ledger, RecordResult
from ledger.gcpause import gc_paused
from ledger.observation import Observation, Rejected
from ledger.sources import agent_files, claude_transcript, stream_formats

SUFFIXES = (".jsonl", ".json")
RECORD_BATCH = 20_000
"""Facts recorded per ``Ledger.record`` call during an import."""


@dataclass
class ImportSummary:
    files: int = 0
    metadata_files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    result: RecordResult = field(default_factory=RecordResult)

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "metadata_files": self.metadata_files,
            "sessions_added": self.result.sessions_created,
            "sessions_touched": len(self.result.sessions),
            "events_appended": self.result.appended,
            "duplicates_skipped": self.result.duplicates,
            "rejected": self.result.rejected,
            "files_skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Files under ``paths`` (recursively for directories) with a known suffix, sorted."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in SUFFIXES)
        elif p.is_file():
            found.append(p)
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return found


def detect(path: Path, head: bytes) -> str | None:
    """Format of a file from its name and first bytes; None when not an agent file."""
    if path.name.endswith(".meta.json"):
        return None
    if (other := agent_files.detect(path, head)) is not None:  # Gemini CLI, Cursor, OpenClaw
        return other
    stream = stream_formats.detect(path, head)  # Claude stream-json, Codex exec / rollouts
    if stream is not None:
        return stream
    if path.suffix == ".jsonl":
        lines = head.split(b"\n")
        return "claude-code.transcript" if _looks_like_claude(_objects(lines[:-1] or lines)) else None
    if head.lstrip().startswith(b"["):
        return "claude-code.transcript-array"
    return None


_CLAUDE_TYPES = {"user", "assistant", "system", "summary", "progress", "file-history-snapshot",
                 "queue-operation", "attachment"}


def _objects(lines: Iterable[bytes]) -> Iterator[Any]:
    for line in lines:
        try:
            yield orjson.loads(line)
        except orjson.JSONDecodeError:
            continue


def _looks_like_claude(records: Iterable[Any]) -> bool:
    """Claude Code transcript records carry ``sessionId`` (camelCase) and a known ``type``;
    Gemini JSONL carries ``projectHash``/``$set``, Codex ``payload``; stream-json uses
    ``session_id``."""
    seen = False
    for rec in records:
        if not isinstance(rec, dict):
            continue
        if "projectHash" in rec or "$set" in rec or "payload" in rec:
            return False
        if "sessionId" in rec and rec.get("type") in _CLAUDE_TYPES:
            seen = True
    return seen


def parse_file(path: Path) -> Iterator[Observation | Rejected]:
    """Observations and rejected lines of one file (raises ValueError if unknown)."""
    data = path.read_bytes()
    fmt = detect(path, data[: 1 << 20])
    source = str(path)
    if fmt in agent_files.FORMATS:
        yield from agent_files.parse(fmt, path, data)
    elif fmt in stream_formats.FORMATS:
        yield from stream_formats.parse(fmt, path, data)
    elif fmt == "claude-code.transcript":
        meta = path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")
        agent_type = _meta_agent_type(meta) if path.name.startswith("agent-") else None
        yield from claude_transcript.parse_records(data.split(b"\n"), source, agent_type)
    elif fmt == "claude-code.transcript-array":
        try:
            records = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            fmt_name = claude_transcript.SOURCE_FORMAT
            yield Rejected(source, "file", f"not valid JSON: {e}", data, "claude-code", fmt_name)
            return
        if not isinstance(records, list):
            raise ValueError("a JSON document that is not an array")
        if records and isinstance(records[0], dict) and "hook_event_name" in records[0]:
            raise ValueError("a JSON array of hook payloads (replay it with POST /v1/hooks/…)")
        if not _looks_like_claude(records[:50]):
            raise ValueError("a JSON array that is not a Claude Code transcript")
        yield from claude_transcript.parse_array(records, source)
    else:
        raise ValueError("not a recognised agent transcript")


def _meta_agent_type(meta: Path) -> str | None:
    """``agentType`` from a subagent's ``agent-<id>.meta.json`` (CC 2.1), if present."""
    try:
        value = orjson.loads(meta.read_bytes()).get("agentType")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def import_paths(
    ledger: Ledger,
    paths: Iterable[str | Path],
    progress: Callable[[Path], None] | None = None,
) -> ImportSummary:
    """Import every agent file under ``paths``; one bad file never stops the rest.

    Facts of several files are recorded together, up to :data:`RECORD_BATCH` at a time
    (one ``Ledger.record`` call, so few transactions); each session's facts keep their
    file order.
    """
    summary = ImportSummary()
    with gc_paused():
        _import(ledger, discover(paths), summary, progress)
    return summary


def _import(
    ledger: Ledger,
    files: list[Path],
    summary: ImportSummary,
    progress: Callable[[Path], None] | None,
) -> None:
    batch: list[Observation | Rejected] = []
    for path in files:
        if path.name.endswith(".meta.json"):
            summary.metadata_files += 1  # read with its agent-*.jsonl (agentType)
        else:
            try:
                batch.extend(parse_file(path))
            except ValueError as e:
                summary.skipped.append((str(path), str(e)))
            else:
                summary.files += 1
            if len(batch) >= RECORD_BATCH:
                summary.result.add(ledger.record(batch))
                batch = []
        if progress is not None:
            progress(path)
    if batch:
        summary.result.add(ledger.record(batch))
