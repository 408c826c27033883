"""``hookledger import``: find agent files, detect their format, record them.

Files are read whole, parsed by the source module of their format and recorded with
:meth:`ledger.app.Ledger.record`; re-importing a file appends nothing (idempotency
keys), and a grown file appends only what is new.

A large import can run in several processes (``workers``), each recording whole
directories (:func:`unit_of`) into the same event store: parsing, privacy and the
aggregates' decisions are CPU-bound Python, so a second process nearly doubles the
rate on two cores (docs/benchmarks.md). Each session's facts keep their file order;
only the interleaving of different directories' sessions in the log differs from a
one-process import. Two processes that still touch one session are reconciled by the
ledger's optimistic concurrency (:meth:`ledger.app.Ledger.record`).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
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
BYTES_PER_WORKER = 8 << 20
"""``auto_workers`` adds a process per this many bytes of input (8 MiB, ~5k events:
about what one process imports in the time a second one takes to start)."""
MAX_AUTO_WORKERS = 4
"""``auto_workers`` never starts more than this many (they share one store's writes)."""
TASKS_PER_WORKER = 8
"""A parallel import splits the input into about this many tasks per process, so the
processes finish together and the progress callback advances during the import."""


@dataclass
class ImportSummary:
    files: int = 0
    metadata_files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    result: RecordResult = field(default_factory=RecordResult)
    recorded_by: set[int] = field(default_factory=set)
    """Process ids of the processes that recorded (this one, or the workers)."""

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
            "processes": len(self.recorded_by),
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
    """Observations and rejected lines of one file.

    Raises:
        ValueError: not a recognised agent file.
        OSError: the file cannot be read.
    """
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
    *,
    workers: int = 1,
) -> ImportSummary:
    """Import every agent file under ``paths``; a file of no known format, or one that
    cannot be read, is listed in ``skipped`` with the reason and never stops the rest.

    Facts of several files are recorded together, up to :data:`RECORD_BATCH` at a time
    (one ``Ledger.record`` call, so few transactions); each session's facts keep their
    file order. ``progress(path)`` is called once per file, after it was recorded.

    ``workers`` > 1 records in that many processes (spawned, each opening the store with
    ``Ledger(ledger.store_env)``), whole directories each (:func:`unit_of`); the read
    models come out the same as from one process. An in-memory store, or a single
    directory of input, is imported in this process. :func:`auto_workers` picks a
    number from the size of the input.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: ``workers`` < 1.
        Whatever the event store raises (a worker's error is raised here).
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    files = discover(paths)
    summary = ImportSummary()
    tasks = _tasks(files, workers) if workers > 1 and ledger.shared_store() else []
    if len(tasks) > 1:
        _import_parallel(ledger.store_env, tasks, min(workers, len(tasks)), summary, progress)
    else:
        with gc_paused():
            _import(ledger, files, summary, progress)
    return summary


def auto_workers(files: Iterable[Path]) -> int:
    """Processes for importing ``files``: one per :data:`BYTES_PER_WORKER` of input, at
    most one per CPU and :data:`MAX_AUTO_WORKERS`; 1 for small inputs."""
    size = sum(f.stat().st_size for f in files)
    return max(1, min(_usable_cpus(), MAX_AUTO_WORKERS, size // BYTES_PER_WORKER))


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def unit_of(path: Path) -> Path:
    """The directory whose files one worker of a parallel import records together: the
    file's directory, or for a Claude Code subagent transcript
    (``<project>/<session>/subagents/agent-*.jsonl``) its session's project directory.
    Agents keep a session's files, and the sessions that resume one another, in one
    directory (Claude Code: one per project; Codex: one per day; Gemini CLI: one per
    project), so one session is recorded by one process."""
    parent = path.parent
    return parent.parent.parent if parent.name == "subagents" else parent


def _tasks(files: list[Path], workers: int) -> list[list[Path]]:
    """``files`` cut into tasks of whole units (:func:`unit_of`) of about
    1/(``workers`` × :data:`TASKS_PER_WORKER`) of the input each; files keep their
    order within a unit."""
    units: dict[Path, list[Path]] = {}
    for f in files:
        units.setdefault(unit_of(f), []).append(f)
    sizes = {u: sum(f.stat().st_size for f in fs) for u, fs in units.items()}
    share = sum(sizes.values()) / (workers * TASKS_PER_WORKER)
    tasks: list[list[Path]] = []
    size = share
    for unit, unit_files in units.items():  # discover order: tasks cover adjacent units
        if size >= share:
            tasks.append([])
            size = 0
        tasks[-1].extend(unit_files)
        size += sizes[unit]
    return tasks


def _import_parallel(
    env: dict[str, str],
    tasks: list[list[Path]],
    workers: int,
    summary: ImportSummary,
    progress: Callable[[Path], None] | None,
) -> None:
    """Run ``tasks`` in ``workers`` spawned processes (not forked: this process may
    hold threads and open connections) and merge what they did into ``summary``."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        running = {pool.submit(_import_task, env, task): task for task in tasks}
        try:
            for done in as_completed(running):
                part = done.result()
                summary.files += part.files
                summary.metadata_files += part.metadata_files
                summary.skipped.extend(part.skipped)
                summary.result.add(part.result)
                summary.recorded_by |= part.recorded_by
                if progress is not None:
                    for path in running[done]:
                        progress(path)
        except BaseException:  # a worker failed, or Ctrl-C: start no further task
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    summary.skipped.sort()
    summary.result.positions.sort()
    summary.result.appended_keys.sort()


def _import_task(env: dict[str, str], files: list[Path]) -> ImportSummary:
    """One task of a parallel import, in a worker process."""
    ledger = Ledger(env)
    try:
        summary = ImportSummary()
        with gc_paused():
            _import(ledger, files, summary, None)
        return summary
    finally:
        ledger.close()


def _import(
    ledger: Ledger,
    files: list[Path],
    summary: ImportSummary,
    progress: Callable[[Path], None] | None,
) -> None:
    summary.recorded_by.add(os.getpid())
    batch: list[Observation | Rejected] = []
    for path in files:
        if path.name.endswith(".meta.json"):
            summary.metadata_files += 1  # read with its agent-*.jsonl (agentType)
        else:
            try:
                batch.extend(parse_file(path))
            except (ValueError, OSError) as e:  # unknown format, unreadable file
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
