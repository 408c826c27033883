"""``hookledger import``: find agent files, detect their format, record them.

Files are read whole, parsed by the source module of their format and recorded with
:meth:`ledger.app.Ledger.record`; re-importing a file appends nothing (idempotency
keys), and a grown file appends only what is new.

A large import parses in worker processes (``workers``) while this process records:
reading, parsing and privacy at capture are about 40 % of an import's CPU, so on two
cores they overlap with recording (docs/benchmarks.md). The workers parse files in the
order they were found and this process records them in that order, so the log is the
same as without workers, position for position. Only this process writes.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from ledger import jsontext
from ledger.app import Ledger, RecordResult
from ledger.gcpause import gc_paused
from ledger.observation import Observation, Rejected
from ledger.privacy import redact_text
from ledger.sources import agent_files, claude_transcript, stream_formats

SUFFIXES = (".jsonl", ".json")
AUTO_WORKERS_BYTES = 8 << 20
"""``auto_workers`` starts a parsing process for inputs of at least this many bytes
(8 MiB, ~5k events: about what one process imports in the time a worker takes to
start)."""
RECORD_BYTES = 2 << 20
"""An import records the facts of consecutive files of about this many bytes (2 MiB,
~1,300 facts) in one ``Ledger.record`` call; a parsing worker parses a run at a time."""
RUNS_AHEAD = 3
"""Runs per worker parsed ahead of the recording (bounds the memory held)."""


@dataclass
class ImportSummary:
    """What :func:`import_paths` did: ``files`` imported, ``metadata_files`` read beside
    them (a subagent's ``agent-<id>.meta.json``), ``skipped`` ``(path, reason)`` pairs,
    the combined :class:`~ledger.app.RecordResult` (events appended, duplicates,
    rejected lines, sessions), and which processes parsed. :meth:`as_dict` is the
    ``hookledger import --json`` object."""

    files: int = 0
    metadata_files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    result: RecordResult = field(default_factory=RecordResult)
    parsed_by: set[int] = field(default_factory=set)
    """Process ids of the processes that parsed the files (this one, or the workers)."""

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
            "parse_processes": len(self.parsed_by),
        }


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Files under ``paths`` (recursively for directories) with a known suffix, sorted,
    each once, as normalised absolute paths (``os.path.abspath``; symlinks are kept as
    given): a file's path names the quarantine stream of its rejected lines
    (:func:`ledger.quarantine.quarantine_id`), so ``./x.jsonl`` and ``/home/me/x.jsonl``
    must be one name, or a re-import under the other spelling would append its rejected
    lines again."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            root = Path(os.path.abspath(p))
            found.extend(f for f in sorted(root.rglob("*")) if f.is_file() and f.suffix in SUFFIXES)
        elif p.is_file():
            found.append(Path(os.path.abspath(p)))
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return list(dict.fromkeys(found))


HEAD_BYTES = 1 << 20
HEAD_LINES = 32


def detection_head(path: Path, data: bytes) -> bytes:
    """What :func:`detect` reads of a file's ``data``. A JSONL file: its first
    :data:`HEAD_BYTES` bytes, or more, to the end of its first :data:`HEAD_LINES` lines,
    so a transcript whose first records are larger than that (a prompt with a pasted
    screenshot) is still recognised by them. Any other file: all of it (a JSON document
    is parsed whole anyway)."""
    if path.suffix != ".jsonl" or len(data) <= HEAD_BYTES:
        return data
    end = 0
    for _ in range(HEAD_LINES):
        nl = data.find(b"\n", end)
        if nl < 0:
            return data
        end = nl + 1
    return data[: max(HEAD_BYTES, end)]


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
            yield jsontext.loads(line)
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
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)  # written by some editors
    fmt = detect(path, detection_head(path, data))
    source = str(path)
    if fmt in agent_files.FORMATS:
        yield from agent_files.parse(fmt, path, data)
    elif fmt in stream_formats.FORMATS:
        yield from stream_formats.parse(fmt, path, data)
    elif fmt == "claude-code.transcript":
        meta = path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")
        agent_type, redactions = (
            _meta_agent_type(meta) if path.name.startswith("agent-") else (None, [])
        )
        facts = claude_transcript.parse_records(data.split(b"\n"), source, agent_type)
        yield from _record_meta_redactions(facts, agent_type, redactions) if redactions else facts
    elif fmt == "claude-code.transcript-array":
        try:
            records = jsontext.loads(data)
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


def _meta_agent_type(meta: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """``agentType`` from a subagent's ``agent-<id>.meta.json`` (CC 2.1), if present, as
    privacy leaves it (:func:`ledger.privacy.redact_text`), and the redactions made."""
    try:
        value = jsontext.loads(meta.read_bytes()).get("agentType")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None, []
    if not isinstance(value, str):
        return None, []
    return redact_text(value, f"{meta.name}:$.agentType")


def _record_meta_redactions(
    facts: Iterator[Observation | Rejected], agent_type: str | None, redactions: list[dict[str, Any]]
) -> Iterator[Observation | Rejected]:
    """``facts``, the first of the subagent's own (the stream it opens holds the
    ``agentType``) recording the redactions made in its ``.meta.json``."""
    pending = True
    for fact in facts:
        if pending and isinstance(fact, Observation) and fact.session.agent_type == agent_type:
            fact.redactions = (*fact.redactions, *redactions)
            pending = False
        yield fact


def import_paths(
    ledger: Ledger,
    paths: Iterable[str | Path],
    progress: Callable[[Path], None] | None = None,
    *,
    workers: int = 0,
) -> ImportSummary:
    """Import every agent file under ``paths``; a file of no known format, or one that
    cannot be read, is listed in ``skipped`` with the reason and never stops the rest.

    Formats (:func:`detect`; each parser's source is named in docs/agents.md and
    ``shared/research/FORMATS.md``): Claude Code transcripts (``~/.claude/projects``
    JSONL, and JSON arrays of them), ``claude -p --output-format stream-json`` output,
    Codex rollouts (``~/.codex/sessions``) and ``codex exec --json`` output, Gemini CLI
    chat files (``~/.gemini/tmp``, JSON or JSONL), Cursor and OpenClaw transcripts.
    Re-importing appends nothing; a file that grew appends only its new records.

    The files are read in the order they were found (:func:`discover`); the facts of
    each run of about :data:`RECORD_BYTES` of files are recorded together (one
    ``Ledger.record`` call, so few transactions). ``progress(path)`` is called once per
    file, after its run was recorded.

    ``workers`` > 0 parses the runs in that many spawned processes (not forked: this
    process may hold threads and open connections) while this one records them; the
    log comes out the same, position for position. :func:`auto_workers` picks the
    number from the input's size.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: ``workers`` < 0.
        Whatever the event store raises.
    """
    if workers < 0:
        raise ValueError(f"workers must be 0 or more, not {workers}")
    files = discover(paths)
    summary = ImportSummary()
    with gc_paused():
        if workers and len(files) > 1:
            runs: Iterable[list[ParsedFile]] = _parsed_by_workers(files, workers)
        else:
            runs = map(_parse_run, _runs(files))
        for run in runs:
            _record(ledger, run, summary, progress)
    return summary


def auto_workers(files: Iterable[Path]) -> int:
    """Parsing processes for importing ``files``: 1 when they hold at least
    :data:`AUTO_WORKERS_BYTES` and this process may run on two CPUs or more, else 0.
    One is enough: recording, in this process, takes longer than parsing."""
    if _usable_cpus() < 2:
        return 0
    size = 0
    for f in files:
        with contextlib.suppress(OSError):  # gone since it was found: skipped later
            size += f.stat().st_size
    return 1 if size >= AUTO_WORKERS_BYTES else 0


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class ParsedFile(NamedTuple):
    """What was read from one file: its facts, or why it was skipped (facts read before
    the error are kept), and the process that parsed it."""

    path: Path
    facts: list[Observation | Rejected]
    skipped: str | None
    metadata: bool
    parsed_by: int


def _parse(path: Path) -> ParsedFile:
    pid = os.getpid()
    if path.name.endswith(".meta.json"):  # read with its agent-*.jsonl (agentType)
        return ParsedFile(path, [], None, True, pid)
    facts: list[Observation | Rejected] = []
    try:
        facts.extend(parse_file(path))
    except (ValueError, OSError) as e:  # unknown format, unreadable file
        return ParsedFile(path, facts, str(e), False, pid)
    return ParsedFile(path, facts, None, False, pid)


def _parse_run(paths: list[Path]) -> list[ParsedFile]:
    """Parse one run of files, in order (in a worker, or here)."""
    with gc_paused():
        return [_parse(p) for p in paths]


def _runs(files: list[Path]) -> Iterator[list[Path]]:
    """``files`` in order, cut into runs of about :data:`RECORD_BYTES`."""
    run: list[Path] = []
    size = 0
    for f in files:
        run.append(f)
        with contextlib.suppress(OSError):  # unreadable: the worker says why
            size += f.stat().st_size
        if size >= RECORD_BYTES:
            yield run
            run, size = [], 0
    if run:
        yield run


def _parsed_by_workers(files: list[Path], workers: int) -> Iterator[list[ParsedFile]]:
    """Each run of :func:`_runs` parsed in one of ``workers`` spawned processes, in
    order; up to :data:`RUNS_AHEAD` runs per worker are parsed ahead of the consumer.
    A worker's error is raised here; an error in the consumer, or Ctrl-C, cancels the
    runs not yet started."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        runs = _runs(files)
        ahead: deque[Future[list[ParsedFile]]] = deque(
            pool.submit(_parse_run, run)
            for run in itertools.islice(runs, workers * RUNS_AHEAD)
        )
        try:
            while ahead:
                done = ahead.popleft().result()
                for run in itertools.islice(runs, 1):  # one more, if any
                    ahead.append(pool.submit(_parse_run, run))
                yield done
        except BaseException:  # also GeneratorExit: the consumer stopped
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _record(
    ledger: Ledger,
    run: list[ParsedFile],
    summary: ImportSummary,
    progress: Callable[[Path], None] | None,
) -> None:
    """Record the facts of one run of files together."""
    batch: list[Observation | Rejected] = []
    for f in run:
        summary.parsed_by.add(f.parsed_by)
        if f.metadata:
            summary.metadata_files += 1
            continue
        batch.extend(f.facts)
        if f.skipped is None:
            summary.files += 1
        else:
            summary.skipped.append((str(f.path), f.skipped))
    if batch:
        summary.result.add(ledger.record(batch))
    if progress is not None:
        for f in run:
            progress(f.path)
