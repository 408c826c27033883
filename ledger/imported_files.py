"""Files an import has recorded whole, so that the next import skips them unread.

Re-importing is always correct (idempotency keys: nothing is appended twice), but
without this it costs about what the first import did: every file read and parsed
again, and every session it touches replayed from the store to find the duplicates
(``hookledger import`` of the unchanged 100k-event benchmark corpus: 4.8-5.0 s with
``--reread``, 0.6 s skipping it; docs/benchmarks.md). A user who imports
``~/.claude/projects`` every hour, or a backfill over thousands of old transcripts,
pays that each time for files that have not changed.

A file is skipped, unread, when all of these hold:

* its :func:`ledger.parsing.fingerprint` (device, inode, size and modification time of
  the file and of the companion file its parser reads) equals the one taken before it
  was last read, and that read recorded all of it: no read or format error, no
  unfinished last line left for later;
* the code that turns files into facts is the same: :attr:`ImportedFiles.generation`
  hashes the ``ledger`` package's sources (a new version may read more from the same
  bytes, or redact more);
* the event store still holds the log that recording ended in: the event at the
  position remembered after the file's facts were committed still has the remembered
  digest. A wiped, replaced or restored store, or another database, fails this, and
  the file is read again.

Rows name the store they were recorded into by the store's own id
(:func:`ledger.store_id.read_store_id`: ``store_id:<uuid>``) when it has one, so the
same store reached by another URL (``localhost`` or ``127.0.0.1``, a proxy's port) finds
them and another store at the same URL does not; a store without an id yet is named by
its URL form (:meth:`ledger.config.Settings.store_identity`), and rows written that
way before the store had an id are still used for files with no row under the id (the
digest check above guards them, as it always did), and kept under the id from then on.

The fingerprints are a cache kept in a SQLite file of the data directory
(:data:`FILE_NAME`), never evidence: deleting it makes the next import read everything
again, and ``hookledger import --reread`` ignores it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.app import Ledger
from ledger.parsing import ParsedFile, fingerprint
from ledger.store_id import read_store_id

FILE_NAME = "imported-files.db"
"""The cache's file name in the data directory."""

_SCHEMA = """CREATE TABLE IF NOT EXISTS imported_files (
    store TEXT NOT NULL,
    path TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    generation TEXT NOT NULL,
    position INTEGER NOT NULL,
    digest TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (store, path)
)"""


def code_generation() -> str:
    """16 hex characters of sha256 over the sources of the ``ledger`` package (the
    parsers, privacy and the event model): equal when this import would turn the same
    bytes into the same facts."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for source in sorted(root.rglob("*.py")):
        h.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class ImportedFiles:
    """The fingerprints of files recorded whole into ``ledger``'s store (named by its
    id, else by ``store``: :meth:`ledger.config.Settings.store_identity`), kept in the
    SQLite file ``path``. A context manager (closes the file).

    Raises:
        sqlite3.Error: ``path`` cannot be opened or created.
        Exception: whatever the store raises when its id cannot be read.
    """

    def __init__(self, path: Path, ledger: Ledger, store: str) -> None:
        self.ledger = ledger
        found = read_store_id(ledger.recorder)
        self.store = f"store_id:{found}" if found is not None else store
        """The name the rows of this store are kept under."""
        self.store_url = store
        """The store's URL form: rows written before it had an id."""
        self.generation = code_generation()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30)
        with self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
        self._anchors: dict[tuple[int, str], bool] = {}

    def __enter__(self) -> ImportedFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def unchanged(self, files: Iterable[Path]) -> set[Path]:
        """Those of ``files`` recorded whole before and unchanged since (see the module
        docstring): an import may skip them."""
        known: dict[str, tuple[Any, ...]] = {}
        for name in dict.fromkeys((self.store, self.store_url)):  # the id's rows first
            for row in self._db.execute(
                "SELECT path, fingerprint, position, digest, recorded_at, store"
                " FROM imported_files WHERE store = ? AND generation = ?",
                (name, self.generation),
            ):
                known.setdefault(row[0], row)
        out, moved = set(), []
        for f in files:
            row = known.get(str(f))
            if row is not None and row[1] == fingerprint(f) and self._anchored(row[2], row[3]):
                out.add(f)
                if row[5] != self.store:  # written under the URL form before the id
                    moved.append((self.store, row[0], row[1], self.generation, *row[2:5]))
        if moved:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO imported_files VALUES (?, ?, ?, ?, ?, ?, ?)", moved
                )
        return out

    def remember(self, run: Iterable[ParsedFile]) -> int:
        """Remember the files of ``run`` that were read whole, once their facts are in
        the store (call it after recording them); returns how many."""
        whole = [
            f for f in run
            if f.fingerprint is not None and f.skipped is None and not f.unfinished
        ]
        if not whole:
            return 0
        position, digest = self._head()
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        with self._db:  # one transaction
            self._db.executemany(
                "INSERT OR REPLACE INTO imported_files VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (self.store, str(f.path), f.fingerprint, self.generation, position, digest, now)
                    for f in whole
                ],
            )
        self._anchors[(position, digest)] = True
        return len(whole)

    def _head(self) -> tuple[int, str]:
        """(position, digest) of the last event in the log; (0, "") when it is empty."""
        position = self.ledger.max_position()
        return position, self._digest_at(position) or ""

    def _digest_at(self, position: int) -> str | None:
        if position <= 0:
            return None
        found = self.ledger.read_log(position - 1, 1, raw=False)
        if not found or found[0][0] != position:
            return None
        return str(found[0][1].digest)

    def _anchored(self, position: int, digest: str) -> bool:
        """Whether the store still has the event at ``position`` with ``digest`` (an
        empty log's anchor, position 0, holds in any store)."""
        key = (position, digest)
        if key not in self._anchors:
            self._anchors[key] = position == 0 or self._digest_at(position) == digest
        return self._anchors[key]
