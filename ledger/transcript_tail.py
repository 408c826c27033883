"""Reading a growing transcript from where the last read ended.

Claude Code appends its transcript (``~/.claude/projects/<project>/<session>.jsonl``,
FORMATS.md A3), Codex its rollout (``~/.codex/sessions/…/rollout-*.jsonl``, A6) and
Gemini CLI 0.40+ its JSONL chat file (:mod:`ledger.sources.gemini_chat`) line by line
while a session runs, and ``serve`` imports the file again each time the session's
hooks go quiet (:mod:`api.transcript_follower`). Read whole, a 28 MB transcript costs
about half a second per import: every line parsed again, every fact found to be a
duplicate. A :class:`TranscriptTail` keeps the parser (its state: sessions, sidechain
roots, seen uuids, prompt and call counters, token totals) and the byte offset it
reached, and parses only the lines added since. The facts are those a whole read of the
grown file gives, less those of the lines read before: the same parser sees the same
lines in the same order, numbered alike.

A tail goes on only while the file is the one it read: the same device and inode, no
shorter than the offset, the same bytes in the :data:`GUARD_BYTES` before it, and the
same subagent ``.meta.json`` (:func:`ledger.parsing.companion`). Otherwise, or when the
file is of no format in :data:`TAILED_FORMATS`, or the parser still holds records that
name no session (its ``finish()`` would reject them, or give them a session from the
file name), :meth:`TranscriptTail.read` returns None and the caller reads the file
whole, as ``hookledger import`` does.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ledger.gcpause import gc_paused
from ledger.observation import Observation, Rejected
from ledger.parsing import (
    HEAD_BYTES,
    HEAD_LINES,
    ParsedFile,
    detect,
    detection_head,
    fingerprint,
    transcript_parser,
    unfinished_tail,
)
from ledger.sources.codex_rollout import RolloutParser
from ledger.sources.gemini_chat import SOURCE_FORMAT_JSONL, ChatParser

TAILED_FORMATS = frozenset({"claude-code.transcript", "codex.rollout", "gemini.chat-jsonl"})
"""Formats read from where the last read ended: JSONL files an agent appends to, whose
parsers keep their state between lines (:mod:`ledger.parsing`'s format names)."""
GUARD_BYTES = 4096
"""Bytes before the offset that must read the same for a tail to go on."""


class TranscriptTail:
    """The read position in one transcript ``path`` (see the module docstring). Not
    thread-safe: one reader at a time.

    Attributes:
        offset: bytes of the file read so far (a byte order mark included).
        bytes_read: bytes read from the file by all reads, the guards included.
        not_transcript: the first read found a file of another format than
            :data:`TAILED_FORMATS` (read it whole): detected, or not detected in all
            that detection looks at.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bytes_read = 0
        self.not_transcript = False
        self._feed: Feed | None = None
        self._waiting: Callable[[], bool] = bool  # records wait for a session
        self._identity: tuple[int, int] | None = None
        self._meta = ""
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
            ValueError: the parser refused the file (as :func:`~ledger.parsing.parse_one`
                reports it, skipped).
        """
        before = fingerprint(self.path)
        if before is None:
            return None
        meta = before.partition(" ")[2]  # the companion's part (subagent .meta.json)
        first = self._feed is None
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())  # the file read, even if renamed over meanwhile
            identity = (st.st_dev, st.st_ino)
            if not first and (identity != self._identity or meta != self._meta):
                return None
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
            fmt = detect(self.path, detection_head(self.path, new))
            if fmt not in TAILED_FORMATS:
                # only when detection saw all it will ever look at (detection_head):
                # a transcript's first lines may name no session yet
                self.not_transcript = fmt is not None or (
                    len(new) > HEAD_BYTES and new.count(b"\n") >= HEAD_LINES
                )
                return None
            self._feed, self._waiting = _parser_for(self.path, fmt)
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
            assert self._feed is not None
            with gc_paused():
                facts.extend(self._feed(taken.split(b"\n"), self._newlines + 1))
            if self._waiting():
                return None  # records with no session yet: see the module docstring
            self._newlines += taken.count(b"\n")
            self._open_line = not taken.endswith(b"\n")
        self.offset += skipped + len(taken)
        self._guard = data[: self.offset - start][-GUARD_BYTES:]
        return ParsedFile(self.path, facts, None, False, os.getpid(), unfinished, before)


Feed = Callable[[list[bytes], int], Iterable[Observation | Rejected]]
"""Feeds lines, numbered from the int, to a tail's parser; gives their facts."""


def _parser_for(path: Path, fmt: str) -> tuple[Feed, Callable[[], bool]]:
    """How to feed lines to the parser of a file of format ``fmt`` (one of
    :data:`TAILED_FORMATS`), made as a whole read makes it
    (:func:`ledger.parsing.parse_data`), and whether it holds records that name no
    session yet."""
    if fmt == "codex.rollout":
        rollout = RolloutParser.for_file(str(path))
        return rollout.feed_lines, lambda: bool(rollout.orphans)
    if fmt == "gemini.chat-jsonl":  # records with no session take the file's name
        chat = ChatParser(str(path), SOURCE_FORMAT_JSONL, path.name.removesuffix(path.suffix))
        return chat.feed_lines, lambda: False
    transcript, meta_note = transcript_parser(path)
    return (
        lambda lines, first: meta_note.apply(transcript.feed_lines(lines, first)),
        lambda: bool(transcript.orphans),
    )

