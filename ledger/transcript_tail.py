"""Reading a growing Claude Code transcript from where the last read ended.

Claude Code appends its transcript (``~/.claude/projects/<project>/<session>.jsonl``,
FORMATS.md A2) line by line while a session runs, and ``serve`` imports it again each
time the session's hooks go quiet (:mod:`api.transcript_follower`). Read whole, a
28 MB transcript costs about a second per import: every line parsed again, every fact
found to be a duplicate by replaying its session. A :class:`TranscriptTail` keeps the
parser (its state: sessions, sidechain roots, seen uuids, prompt and call counters)
and the byte offset it reached, and parses only the lines added since. The facts are
those a whole read of the grown file gives, less those of the lines read before: the
same parser sees the same lines in the same order, numbered alike.

A tail goes on only while the file is the one it read: the same device and inode, no
shorter than the offset, the same bytes in the :data:`GUARD_BYTES` before it, and the
same subagent ``.meta.json`` (:func:`ledger.parsing.companion`). Otherwise, or when the
file is not a Claude Code transcript, or the parser still holds records that name no
session (:meth:`TranscriptParser.finish` would reject them), :meth:`TranscriptTail.read`
returns None and the caller reads the file whole, as ``hookledger import`` does.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from ledger.gcpause import gc_paused
from ledger.observation import Observation, Rejected
from ledger.parsing import (
    MetaNote,
    ParsedFile,
    companion,
    detect,
    detection_head,
    fingerprint,
    transcript_parser,
    unfinished_tail,
)
from ledger.sources.claude_transcript import TranscriptParser

GUARD_BYTES = 4096
"""Bytes before the offset that must read the same for a tail to go on."""


class TranscriptTail:
    """The read position in one Claude Code transcript ``path`` (see the module
    docstring). Not thread-safe: one reader at a time.

    Attributes:
        offset: bytes of the file read so far (a byte order mark included).
        bytes_read: bytes read from the file by all reads, the guards included.
        not_transcript: the first read found whole lines, and no Claude Code transcript
            in them: another format (read it whole).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bytes_read = 0
        self.not_transcript = False
        self._parser: TranscriptParser | None = None
        self._meta_note: MetaNote | None = None
        self._identity: tuple[int, int] | None = None
        self._meta: str | None = None
        self._guard = b""
        self._newlines = 0  # newlines read: the next line's number is this + 1
        self._open_line = False  # the last line read had no newline yet

    def read(self) -> ParsedFile | None:
        """The facts of the lines added since the last read (all of them the first
        time), in a :class:`~ledger.parsing.ParsedFile` as
        :func:`~ledger.parsing.parse_one` gives it: the file's fingerprint taken before
        reading, and a last line still being written left unread
        (:func:`~ledger.parsing.unfinished_tail`) for the next read.

        Returns None when this tail cannot go on (see the module docstring): read the
        file whole instead, and drop this tail. Its state is then undefined.

        Raises:
            OSError: the file cannot be read.
        """
        before = fingerprint(self.path)
        if before is None:
            return None
        st = os.stat(self.path)
        identity = (st.st_dev, st.st_ino)
        meta = _stat_or_dash(companion(self.path))
        first = self._parser is None
        if not first and (identity != self._identity or meta != self._meta):
            return None
        with open(self.path, "rb") as f:
            start = max(0, self.offset - len(self._guard))
            f.seek(start)
            data = f.read()
        self.bytes_read += len(data)
        if data[: self.offset - start] != self._guard:
            return None  # shorter, or rewritten before the offset
        new = data[self.offset - start :]
        skipped = 0
        if first:
            skipped = len(codecs.BOM_UTF8) if new.startswith(codecs.BOM_UTF8) else 0
            new = new[skipped:]
            if detect(self.path, detection_head(self.path, new)) != "claude-code.transcript":
                self.not_transcript = b"\n" in new  # a whole line, and still no transcript
                return None
            self._parser, self._meta_note = transcript_parser(self.path)
            self._identity, self._meta = identity, meta
        elif self._open_line and new:
            if not new.startswith(b"\n"):
                return None  # the line read without its newline went on
            skipped, new = 1, new[1:]
            self._newlines += 1
            self._open_line = False
        unfinished = unfinished_tail(self.path, new)
        taken = new[: len(new) - unfinished]
        facts: list[Observation | Rejected] = []
        if taken:
            with gc_paused():
                lines = self._parser.feed_lines(taken.split(b"\n"), self._newlines + 1)
                facts.extend(self._meta_note.apply(lines))
            if self._parser.orphans:
                return None  # records with no session yet: a whole read rejects them
            self._newlines += taken.count(b"\n")
            self._open_line = not taken.endswith(b"\n")
        self.offset += skipped + len(taken)
        self._guard = data[: self.offset - start][-GUARD_BYTES:]
        return ParsedFile(self.path, facts, None, False, os.getpid(), unfinished, before)


def _stat_or_dash(path: Path | None) -> str | None:
    """Device, inode, size and mtime of ``path``; ``-`` when it does not exist; None
    when there is no such companion file to look at."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
