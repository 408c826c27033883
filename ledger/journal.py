"""Server side of the hook spool journal ``<data dir>/spool/hooks.journal``.

Written by the hook hot path (``api/hot_path/hook_fast.py``, which documents the framing:
a header line ``HLJ1 <capture key> <captured at> <agent> <length>`` then the raw
payload bytes and a newline). :meth:`JournalIngester.drain`:

1. renames a non-empty journal aside to ``hooks.journal.<uuid>.aside`` (hooks
   that start later create a fresh journal);
2. takes the aside file's ``flock``: a hook that opened the old file before the rename
   either finished its write (we then read it) or, once it gets the lock, sees that
   the path is a new file and writes there instead — no record is lost;
3. parses every record and records them in chunks, each payload with its original
   capture key, so a crash (even SIGKILL) part-way and a second drain append nothing
   twice (``Ledger.record`` is idempotent by key);
4. deletes the aside file (the trim).

A record whose framing is broken (bad header, length past the end) is recorded as
:class:`~ledger.observation.Rejected` input with the reason and its bytes; the parser
resynchronises at the next ``\\nHLJ1 `` header.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import orjson
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError

from ledger.app import RecordResult
from ledger.ingest import EdgeRedactionsError, check_edge_redactions, parse_hook_body
from ledger.observation import Observation, Rejected
from ledger.secrets import prescan
from ledger.sources.claude_common import parse_time

JOURNAL = "hooks.journal"
MAGIC = b"HLJ1 "
CHUNK_RECORDS = 2000
"""Hook payloads per ``record`` call while draining a journal."""

log = logging.getLogger(__name__)

Recorder = Callable[[Sequence[Observation | Rejected]], RecordResult]
Submitter = Callable[[Sequence[Observation | Rejected]], "Future[RecordResult]"]
IN_FLIGHT = 2
"""Chunks submitted ahead while the previous one is being recorded (parse overlaps commit)."""


@dataclass(frozen=True)
class JournalRecord:
    offset: int
    key: str
    captured_at: str
    agent: str
    body: bytes
    redactions: tuple[dict[str, object], ...] = ()


@dataclass(frozen=True)
class Malformed:
    offset: int
    reason: str
    data: bytes


def parse_journal(data: bytes) -> Iterator[JournalRecord | Malformed]:
    """Records of a journal file's bytes, in order; broken framing yields
    :class:`Malformed` chunks (nothing is skipped silently)."""
    pos = 0
    end = len(data)
    while pos < end:
        if not data.startswith(MAGIC, pos):
            nxt = _resync(data, pos)
            yield Malformed(pos, "no journal record header here", data[pos:nxt])
            pos = nxt
            continue
        eol = data.find(b"\n", pos, pos + 8192)
        fields = data[pos:eol].split(b" ") if eol >= 0 else []
        if len(fields) not in (5, 6) or not fields[4].isdigit() or len(fields[4]) > 18:
            nxt = _resync(data, pos + 1)
            yield Malformed(pos, "bad journal record header", data[pos:nxt])
            pos = nxt
            continue
        length = int(fields[4])
        body_end = eol + 1 + length
        if body_end + 1 > end or data[body_end : body_end + 1] != b"\n":
            nxt = _resync(data, pos + 1)
            reason = f"record body shorter than its header's {length} bytes"
            yield Malformed(pos, reason, data[pos:nxt])
            pos = nxt
            continue
        try:
            key, at, agent = (f.decode("ascii") for f in fields[1:4])
        except UnicodeDecodeError:
            nxt = _resync(data, pos + 1)
            yield Malformed(pos, "journal record header is not ASCII", data[pos:nxt])
            pos = nxt
            continue
        redactions: tuple[dict[str, object], ...] = ()
        if len(fields) == 6:
            try:
                redactions = tuple(r for r in orjson.loads(fields[5]) if isinstance(r, dict))
            except (orjson.JSONDecodeError, TypeError):
                nxt = _resync(data, pos + 1)
                yield Malformed(pos, "journal record header has bad redactions", data[pos:nxt])
                pos = nxt
                continue
        yield JournalRecord(pos, key, at, agent, data[eol + 1 : body_end], redactions)
        pos = body_end + 1


def _resync(data: bytes, start: int) -> int:
    nxt = data.find(b"\n" + MAGIC, start)
    return len(data) if nxt < 0 else nxt + 1


def to_items(entry: JournalRecord | Malformed, source_name: str) -> list[Observation | Rejected]:
    """What ``Ledger.record`` takes for one journal entry."""
    if isinstance(entry, Malformed):
        return [
            Rejected("spool:journal", f"{source_name} offset {entry.offset}",
                     f"malformed journal record: {entry.reason}", entry.data)
        ]
    at = parse_time(entry.captured_at)
    try:
        edge = check_edge_redactions(list(entry.redactions))
    except EdgeRedactionsError as e:  # recorded without them; never blocks the journal
        log.warning("ignoring the redactions of journal record %s: %s", entry.key, e)
        edge = []
    return parse_hook_body(entry.agent, entry.body, entry.key, at, edge)[0]


def _chunk_items(
    entries: list[JournalRecord | Malformed], source_name: str
) -> list[Observation | Rejected]:
    """:func:`to_items` of a chunk of entries, their bodies scanned for secrets at once
    (:func:`ledger.secrets.prescan`)."""
    prescan([e.body for e in entries if isinstance(e, JournalRecord)])
    return [item for e in entries for item in to_items(e, source_name)]


STORE_ERRORS = (OperationalError, InterfaceError, IntegrityError, OSError)
"""What recording raises when the store, not a record, is at fault (unreachable,
locked, another writer): the chunk is retried by the next drain, never quarantined."""


def _record_alone(
    entries: list[JournalRecord | Malformed], source_name: str, submit: Submitter, error: Exception
) -> RecordResult:
    """A chunk whose recording failed with ``error``, not a store's error: each entry
    recorded on its own, and one that fails again, not for the store, kept as rejected
    input with the reason (its whole record). One record no recording can take (a bug
    not met before) must not hold every later hook in the journal for good."""
    log.error("journal %s: a chunk failed (%r); recording its records one by one", source_name, error)
    total = RecordResult()
    for entry in entries:
        try:
            total.add(submit(to_items(entry, source_name)).result())
        except STORE_ERRORS:
            raise
        except Exception as e:
            log.exception("journal %s: record at offset %d cannot be recorded", source_name, entry.offset)
            reason = f"could not be recorded: {type(e).__name__}: {e}"
            if isinstance(entry, JournalRecord):
                where = f"{source_name} offset {entry.offset} capture {entry.key}"
                item = Rejected("spool:journal", where, reason, entry.body, entry.agent)
            else:
                where = f"{source_name} offset {entry.offset}"
                item = Rejected("spool:journal", where, reason, entry.data)
            total.add(submit([item]).result())
    return total


def ingest_journal(data: bytes, source_name: str, submit: Submitter) -> tuple[int, RecordResult]:
    """Record every entry of journal bytes ``data`` (whole files, or the pieces a remote
    hook forwards to ``POST /v1/journal``) in chunks of ``CHUNK_RECORDS``, parsing the
    next chunk while the previous one is recorded. Broken framing is recorded as
    :class:`~ledger.observation.Rejected` input named ``<source_name> offset <n>``.

    Returns (journal records read, the summed :class:`RecordResult`). Raises what
    recording raised for the store (:data:`STORE_ERRORS`), after every submitted chunk
    has finished (what was recorded stays; a retry appends nothing twice: keys are the
    records' capture keys). A chunk that fails otherwise is recorded record by record,
    and a record that fails alone is kept as rejected input (:func:`_record_alone`).
    """
    total = RecordResult()
    records = 0
    entries: list[JournalRecord | Malformed] = []
    flying: list[tuple[Future[RecordResult], list[JournalRecord | Malformed]]] = []

    def settle(future: Future[RecordResult], chunk: list[JournalRecord | Malformed]) -> None:
        try:
            total.add(future.result())
        except STORE_ERRORS:
            raise
        except Exception as e:
            total.add(_record_alone(chunk, source_name, submit, e))

    try:
        for entry in parse_journal(data):
            records += isinstance(entry, JournalRecord)
            entries.append(entry)
            if len(entries) >= CHUNK_RECORDS:
                flying.append((submit(_chunk_items(entries, source_name)), entries))
                entries = []
                while len(flying) >= IN_FLIGHT:
                    settle(*flying.pop(0))
        if entries:
            flying.append((submit(_chunk_items(entries, source_name)), entries))
    finally:
        errors = []
        for future, chunk in flying:
            try:
                settle(future, chunk)
            except Exception as e:
                errors.append(e)
    if errors:
        raise errors[0]
    return records, total


class JournalIngester:
    """Drains the journal in ``spool_dir`` into the ledger through ``record``.

    Args:
        spool_dir: ``<data dir>/spool``.
        record: e.g. ``Ledger.record`` (one chunk at a time), or
        submit: e.g. ``GroupWriter.submit``: the next chunk is parsed while the previous
            one is recorded (at most ``IN_FLIGHT`` chunks queued).
    """

    def __init__(
        self, spool_dir: Path, record: Recorder | None = None, *, submit: Submitter | None = None
    ) -> None:
        if (record is None) == (submit is None):
            raise ValueError("give exactly one of record and submit")
        self.spool_dir = spool_dir
        self.submit: Submitter = submit or (lambda items: _done(record, items))  # type: ignore[arg-type]
        self.path = spool_dir / JOURNAL

    def pending(self) -> bool:
        """True when a journal holds bytes or an aside file is left to ingest."""
        try:
            if self.path.stat().st_size > 0:
                return True
        except FileNotFoundError:
            pass
        return any(self.spool_dir.glob(f"{JOURNAL}.*.aside"))

    def drain(self) -> RecordResult:
        """Ingest and delete everything journalled so far; returns what was appended.

        Raises whatever ``record`` raises (the aside file is then kept for the next
        drain: nothing is lost, nothing doubles)."""
        total = RecordResult()
        try:
            if self.path.stat().st_size > 0:
                os.rename(self.path, self.spool_dir / f"{JOURNAL}.{uuid.uuid4().hex}.aside")
        except FileNotFoundError:
            pass
        asides = sorted(self.spool_dir.glob(f"{JOURNAL}.*.aside"), key=_mtime)
        for aside in asides:
            with open(aside, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # wait for a hook mid-write
                data = f.read()
            total.add(ingest_journal(data, aside.name, self.submit)[1])
            aside.unlink()
            aside.with_name(aside.name + ".sent").unlink(missing_ok=True)  # a forwarder's
        return total


def _done(record: Recorder, items: Sequence[Observation | Rejected]) -> Future[RecordResult]:
    """``record(items)`` as a finished future: its result, or what it raised."""
    future: Future[RecordResult] = Future()
    try:
        future.set_result(record(items))
    except Exception as e:
        future.set_exception(e)
    return future


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
