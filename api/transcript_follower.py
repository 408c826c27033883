"""Following the transcripts that local hooks name: ``serve`` imports them itself.

Hooks carry what happened (prompts, tool calls, stops) but no token usage and no model
replies: those are only in the agent's transcript. Every Claude Code, Codex and Gemini
CLI hook names its session's transcript (``transcript_path``; a Claude Code
``SubagentStop`` also ``agent_transcript_path``). The server imports each named file
once the hooks of that transcript have been quiet for ``quiet_s`` seconds (the agent
finished its turn and waits), at most ``MAX_WAIT_S`` after the first hook that named it
while they keep coming, and once more ``RECHECK_S`` later: a Claude Code ``Stop`` hook
fires before the transcript is flushed (FORMATS.md, "known problems" 2), so the first
import may see the previous turn. The import is :func:`ledger.importer.import_paths`
with the data directory's :class:`ledger.imported_files.ImportedFiles`: a file
unchanged since it was imported is not read again, and what a hook recorded first
appends nothing twice (cross-source idempotency keys and aliases).

A Claude Code transcript, Codex rollout or Gemini CLI JSONL chat is read from where the
last import of it ended (:class:`ledger.transcript_tail.TranscriptTail`): a long
session's transcript grows by a few lines per turn, and reading it whole each time costs
about half a second at 28 MB. The read positions of the :data:`MAX_TAILS` transcripts
read most recently are kept in memory; any other file, or one that changed other than by
growing, is read whole.

Only hooks from the spool journal are followed: the journal is written by hooks on
this machine, so their paths name this machine's files. A remote hook's
(``POST /v1/journal``, ``POST /v1/hooks/…``) path may name nothing here, or another
file. A path is followed only if it is absolute and names a ``.jsonl`` or ``.json``
file; one that is not an agent transcript is skipped by the importer's format
detection, nothing of it stored.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ledger.app import Ledger, RecordResult
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths
from ledger.observation import Observation
from ledger.parsing import ParsedFile
from ledger.transcript_tail import TranscriptTail

MAX_WAIT_S = 30.0
"""A transcript whose hooks keep coming is imported at least this often (seconds)."""
RECHECK_S = 10.0
"""After importing a transcript, look at it once more this many seconds later (a file
unchanged since is not read)."""
MAX_TAILS = 32
"""Transcripts whose read position and parser state are kept (4.3 MB for a 28.7 MB
transcript of 18,630 lines: ``benchmarks/follow.py``'s); the least recently read beyond
these are read whole next time."""
RECORD_FACTS = 2000
"""Facts recorded per ``Ledger.record`` call (which holds the ledger's write lock): the
first read of a long transcript lets hooks be recorded between its chunks."""
MAX_WHOLE_ONLY = 4096
"""Files remembered to be of a format not tailed (read whole without trying a tail)."""
TICK_S = 0.25
PATH_FIELDS = ("transcript_path", "agent_transcript_path")

log = logging.getLogger(__name__)


def transcript_paths(items: Iterable[Any]) -> set[str]:
    """The transcript paths hook observations name (:data:`PATH_FIELDS` of their raw
    payloads): absolute paths of ``.jsonl`` or ``.json`` files."""
    found: set[str] = set()
    for item in items:
        raw = item.raw if isinstance(item, Observation) else None
        if not isinstance(raw, dict):
            continue
        for name in PATH_FIELDS:
            value = raw.get(name)
            if isinstance(value, str) and value.startswith("/") and value.endswith((".jsonl", ".json")):
                found.add(value)
    return found


class TranscriptFollower:
    """A thread importing the transcripts :meth:`notice` is told of (see the module
    docstring). ``quiet_s`` > 0.

    Attributes:
        imports: imports run (each of one or more files).
        tail_reads, whole_reads: files read from where the last read ended, and files
            read whole (the first read of a transcript is a tail read from 0).
        error: the last import's exception, None once one succeeds (logged; the next
            hook naming the file tries again).
    """

    def __init__(self, ledger: Ledger, data_dir: Path, store: str, quiet_s: float) -> None:
        self.ledger = ledger
        self.data_dir = data_dir
        self.store = store
        self.quiet_s = quiet_s
        self.imports = 0
        self.tail_reads = 0
        self.whole_reads = 0
        self._tails: OrderedDict[Path, TranscriptTail] = OrderedDict()
        self._whole_only: set[Path] = set()  # files of a format not tailed
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._due: dict[str, tuple[float, float]] = {}  # path -> (first notice, last notice)
        self._recheck: dict[str, float] = {}  # path -> when to look again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hookledger-follow", daemon=True)

    def notice(self, items: Iterable[Any]) -> None:
        """Note the transcripts named by ``items`` (hook observations being recorded)."""
        paths = transcript_paths(items)
        if not paths:
            return
        now = time.monotonic()
        with self._lock:
            for p in paths:
                first = self._due.get(p, (now, now))[0]
                self._due[p] = (first, now)

    def start(self) -> None:
        self._thread.start()

    def health(self) -> dict[str, object]:
        """For ``/healthz``: ``{"imports", "tail_reads", "whole_reads", "following",
        "error"}`` (``following``: transcripts whose read position is kept; ``error``: the
        last import's error as text, None once one succeeds)."""
        error = self.error
        return {
            "imports": self.imports, "tail_reads": self.tail_reads,
            "whole_reads": self.whole_reads, "following": len(self._tails),
            "error": None if error is None else repr(error),
        }

    def stop(self) -> None:
        """Stop the thread (an import under way finishes first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        with ImportedFiles(self.data_dir / FILE_NAME, self.ledger, self.store) as imported:
            while not self._stop.wait(TICK_S):
                ready = self._take_ready(time.monotonic())
                if ready:
                    self.import_files(ready, imported)

    def _take_ready(self, now: float) -> list[str]:
        """Paths due now: quiet for ``quiet_s``, waiting for :data:`MAX_WAIT_S`, or to be
        looked at again; each leaves the due list (and is set to be looked at again)."""
        with self._lock:
            ready = [
                p for p, (first, last) in self._due.items()
                if now - last >= self.quiet_s or now - first >= MAX_WAIT_S
            ]
            for p in ready:
                del self._due[p]
            again = [p for p, at in self._recheck.items() if at <= now and p not in self._due]
            for p in again:
                del self._recheck[p]
            for p in ready:
                self._recheck[p] = now + RECHECK_S
        return sorted(set(ready) | set(again))

    def import_files(self, paths: list[str], imported: ImportedFiles) -> None:
        """Import the files ``paths`` now (what the thread does when they are due):
        transcripts and rollouts from where their last read ended, others whole. An
        error is logged and kept in :attr:`error`, never raised. Call it from one
        thread at a time (the follower's, once :meth:`start` ran)."""
        # normalised as an import's discover() does: the path names the file's
        # quarantine stream and its imported-files entry
        files = list(dict.fromkeys(Path(os.path.abspath(p)) for p in paths if os.path.isfile(p)))
        if not files:
            return
        result = RecordResult()
        try:
            tailed, whole = self._read_tails(files, imported)
            facts = [fact for parsed in tailed for fact in parsed.facts]
            for start in range(0, len(facts), RECORD_FACTS):  # other writers get turns
                result.add(self.ledger.record(facts[start : start + RECORD_FACTS]))
            imported.remember(tailed)
            whole = [f for f in whole if f.is_file()]  # discover() refuses a missing one
            if whole:
                result.add(import_paths(self.ledger, whole, imported=imported).result)
        except Exception as e:  # the store is unreachable, say: the next hook retries
            for f in files:  # what was read may not be recorded: read it whole next time
                self._tails.pop(f, None)
            if self.error is None:
                log.exception("importing transcripts %s failed", paths)
            self.error = e
            return
        self.imports += 1
        self.error = None
        if result.appended:
            log.info(
                "followed %d transcript(s): %d events appended",
                len(tailed) + len(whole), result.appended,
            )

    def _read_tails(
        self, files: list[Path], imported: ImportedFiles
    ) -> tuple[list[ParsedFile], list[Path]]:
        """What the tails of ``files`` hold that is new, and the files to read whole
        (among them those a tail cannot read: the whole import reports why)."""
        tailed: list[ParsedFile] = []
        whole: list[Path] = []
        unchanged = imported.unchanged(f for f in files if f not in self._tails)
        for f in files:
            tail = self._tails.pop(f, None)
            if tail is None:
                if f in unchanged:
                    continue
                if f in self._whole_only or f.suffix != ".jsonl":
                    whole.append(f)
                    continue
                tail = TranscriptTail(f)
            try:
                parsed = tail.read()
            except (OSError, ValueError):  # the whole import skips it, saying why
                parsed = None
            if parsed is None:
                if tail.not_transcript and len(self._whole_only) < MAX_WHOLE_ONLY:
                    self._whole_only.add(f)
                whole.append(f)
                continue
            tailed.append(parsed)
            self._tails[f] = tail
            if len(self._tails) > MAX_TAILS:
                self._tails.popitem(last=False)
        self.tail_reads += len(tailed)
        self.whole_reads += len(whole)
        return tailed, whole
