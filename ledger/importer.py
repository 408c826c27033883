"""``hookledger import``: find agent files, detect their format, record them.

Files are read whole, parsed by the source module of their format and recorded with
:meth:`ledger.app.Ledger.record`; re-importing a file appends nothing (idempotency
keys), and a grown file appends only what is new. A file recorded whole before and
unchanged since is not read again (:mod:`ledger.imported_files`).

A large import parses in worker processes (``workers``) while this process records:
reading, parsing and privacy at capture are about 40 % of an import's CPU, so on two
cores they overlap with recording (docs/benchmarks.md). The workers parse files in the
order they were found and this process records them in that order, so the log is the
same as without workers, position for position. Only this process writes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ledger.app import Ledger, RecordResult
from ledger.gcpause import gc_paused
from ledger.imported_files import ImportedFiles
from ledger.observation import Observation, Rejected
from ledger.parsing import ParsedFile, discover, parse_run

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
    """What :func:`import_paths` did: ``files`` imported, ``unchanged`` ones skipped
    unread, ``metadata_files`` read beside them (a subagent's ``agent-<id>.meta.json``),
    ``skipped`` ``(path, reason)`` pairs, the combined :class:`~ledger.app.RecordResult` (events appended, duplicates,
    rejected lines, sessions), and which processes parsed. :meth:`as_dict` is the
    ``hookledger import --json`` object."""

    files: int = 0
    unchanged: int = 0
    """Files skipped unread: recorded whole before, unchanged since
    (:class:`~ledger.imported_files.ImportedFiles`)."""
    metadata_files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    result: RecordResult = field(default_factory=RecordResult)
    parsed_by: set[int] = field(default_factory=set)
    """Process ids of the processes that parsed the files (this one, or the workers)."""
    unfinished: list[tuple[str, int]] = field(default_factory=list)
    """(path, bytes) of files whose last line was still being written: left for the next
    import (:func:`ledger.parsing.unfinished_tail`)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "files_unchanged": self.unchanged,
            "metadata_files": self.metadata_files,
            "sessions_added": self.result.sessions_created,
            "sessions_touched": len(self.result.sessions),
            "events_appended": self.result.appended,
            "duplicates_skipped": self.result.duplicates,
            "rejected": self.result.rejected,
            "files_skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "parse_processes": len(self.parsed_by),
            "unfinished_lines_left": [{"path": p, "bytes": n} for p, n in self.unfinished],
        }


def import_paths(
    ledger: Ledger,
    paths: Iterable[str | Path],
    progress: Callable[[Path], None] | None = None,
    *,
    workers: int | None = 0,
    imported: ImportedFiles | None = None,
    reread: bool = False,
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

    ``imported``: the files recorded whole by earlier imports
    (:class:`~ledger.imported_files.ImportedFiles`): those unchanged since are skipped
    unread (counted in ``unchanged``, and passed to ``progress``), and each file this
    import records whole is remembered there. None: every file is read. ``reread``:
    every file is read, and those read whole are remembered in ``imported`` all the
    same (so the next import skips them).

    ``workers`` > 0 parses the runs in that many spawned processes (not forked: this
    process may hold threads and open connections) while this one records them; the
    log comes out the same, position for position. None: :func:`auto_workers` picks the
    number from the size of the files to read.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: ``workers`` < 0.
        Whatever the event store raises.
    """
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be 0 or more, not {workers}")
    files = discover(paths)
    summary = ImportSummary()
    if imported is not None and not reread:
        unchanged = imported.unchanged(files)
        summary.unchanged = len(unchanged)
        files = [f for f in files if f not in unchanged]
        if progress is not None:
            for f in sorted(unchanged):
                progress(f)
    if workers is None:
        workers = auto_workers(files)
    with gc_paused():
        if workers and len(files) > 1:
            runs: Iterable[list[ParsedFile]] = _parsed_by_workers(files, workers)
        else:
            runs = map(parse_run, _runs(files))
        for run in runs:
            _record(ledger, run, summary, progress)
            if imported is not None:
                imported.remember(run)
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
    """Each run of :func:`_runs` parsed, in order: in this process until a worker has
    started (a spawned worker takes a few tenths of a second to start, this process
    would otherwise wait for it), then in one of ``workers`` spawned processes, up to
    :data:`RUNS_AHEAD` runs per worker ahead of the consumer. A worker's error is raised
    here; an error in the consumer, or Ctrl-C, cancels the runs not yet started."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        started = pool.submit(os.getpid)  # done once a worker has started
        ahead: deque[Future[list[ParsedFile]]] = deque()
        try:
            for run in _runs(files):
                if not ahead and not started.done():
                    yield parse_run(run)  # parsed here while the workers start
                    continue
                ahead.append(pool.submit(parse_run, run))
                if len(ahead) > workers * RUNS_AHEAD:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
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
        if f.unfinished:
            summary.unfinished.append((str(f.path), f.unfinished))
    if batch:
        summary.result.add(ledger.record(batch))
    if progress is not None:
        for f in run:
            progress(f.path)
