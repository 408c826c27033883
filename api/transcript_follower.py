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

Only hooks from the spool journal are followed: the journal is written by hooks on
this machine, so their paths name this machine's files. A remote hook's
(``POST /v1/journal``, ``POST /v1/hooks/…``) path may name nothing here, or another
file. A path is followed only if it is absolute and names a ``.jsonl`` or ``.json``
file; one that is not an agent transcript is skipped by the importer's format
detection, nothing of it stored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ledger.app import Ledger
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths
from ledger.observation import Observation

MAX_WAIT_S = 30.0
"""A transcript whose hooks keep coming is imported at least this often (seconds)."""
RECHECK_S = 10.0
"""After importing a transcript, look at it once more this many seconds later (a file
unchanged since is not read)."""
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
        error: the last import's exception, None once one succeeds (logged; the next
            hook naming the file tries again).
    """

    def __init__(self, ledger: Ledger, data_dir: Path, store: str, quiet_s: float) -> None:
        self.ledger = ledger
        self.data_dir = data_dir
        self.store = store
        self.quiet_s = quiet_s
        self.imports = 0
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
                    self._import(ready, imported)

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

    def _import(self, paths: list[str], imported: ImportedFiles) -> None:
        files = [Path(p) for p in paths if Path(p).is_file()]
        if not files:
            return
        try:
            summary = import_paths(self.ledger, files, imported=imported)
        except Exception as e:  # the store is unreachable, say: the next hook retries
            if self.error is None:
                log.exception("importing transcripts %s failed", paths)
            self.error = e
            return
        self.imports += 1
        self.error = None
        if summary.result.appended:
            log.info(
                "followed %d transcript(s): %d events appended",
                summary.files, summary.result.appended,
            )
