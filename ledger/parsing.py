"""Reading agent files: finding them, detecting their format and parsing them into facts
(:class:`~ledger.observation.Observation` and :class:`~ledger.observation.Rejected`).

The part of ``hookledger import`` that needs no event store: an import's parsing
workers (:mod:`ledger.importer`) import only this module and the source parsers, so a
worker starts in a fraction of the time a process importing the ledger takes.
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from ledger import jsontext
from ledger.gcpause import gc_paused
from ledger.observation import Observation, Rejected
from ledger.privacy import redact_text
from ledger.sources import agent_files, claude_transcript, stream_formats
from ledger.sources.jsonl import json_objects

SUFFIXES = (".jsonl", ".json")


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
        return "claude-code.transcript" if _looks_like_claude(json_objects(lines[:-1] or lines)) else None
    if head.lstrip().startswith(b"["):
        return "claude-code.transcript-array"
    return None


_CLAUDE_TYPES = {"user", "assistant", "system", "summary", "progress", "file-history-snapshot",
                 "queue-operation", "attachment"}




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
        rtype = rec.get("type")
        if "sessionId" in rec and isinstance(rtype, str) and rtype in _CLAUDE_TYPES:
            seen = True
    return seen


WRITING_GRACE_S = 60.0
"""A ``.jsonl`` file modified less than this many seconds ago may be in the middle of
writing its last line: see :func:`unfinished_tail`."""


def read_file(path: Path) -> bytes:
    """The bytes of agent file ``path``, without a UTF-8 byte order mark (written by
    some editors).

    Raises:
        OSError: the file cannot be read.
    """
    return path.read_bytes().removeprefix(codecs.BOM_UTF8)


def unfinished_tail(path: Path, data: bytes, now: float | None = None) -> int:
    """Bytes at the end of ``data`` (read from ``path``) that are a line still being
    written, to leave for a later import: 0, unless ``path`` is a ``.jsonl`` file whose
    last line has no newline, is not valid JSON, and whose modification time is less
    than :data:`WRITING_GRACE_S` seconds before ``now`` (default: the current time).

    An agent appends a transcript line by line; an import that reads the file while a
    line is half written would otherwise reject that half, and the next import, the
    longer half, each as new rejected input. A last line still invalid once the file
    has not changed for that long was cut (the writer stopped): it is parsed, and
    rejected with its reason, like any malformed line.

    Raises:
        OSError: the file's modification time cannot be read.
    """
    if path.suffix != ".jsonl" or not data or data.endswith(b"\n"):
        return 0
    last = data[data.rfind(b"\n") + 1 :]
    if not last.strip():
        return 0
    try:
        jsontext.loads(last)
    except orjson.JSONDecodeError:
        age = (time.time() if now is None else now) - path.stat().st_mtime
        return len(last) if age < WRITING_GRACE_S else 0
    return 0


def parse_file(path: Path) -> Iterator[Observation | Rejected]:
    """Observations and rejected lines of one file, all of it (see :func:`parse_one`
    for what an import reads).

    Raises:
        ValueError: not a recognised agent file.
        OSError: the file cannot be read.
    """
    yield from parse_data(path, read_file(path))


def parse_data(path: Path, data: bytes) -> Iterator[Observation | Rejected]:
    """Observations and rejected lines of ``data``, the content of agent file ``path``
    (its format is detected from its name and first bytes).

    Raises:
        ValueError: not a recognised agent file.
        OSError: a companion file (a subagent's ``.meta.json``) cannot be read.
    """
    head = detection_head(path, data)
    if (why := agent_files.not_a_session(path, head)) is not None:
        raise ValueError(why)
    fmt = detect(path, head)
    source = str(path)
    if fmt in agent_files.FORMATS:
        yield from agent_files.parse(fmt, path, data)
    elif fmt in stream_formats.FORMATS:
        yield from stream_formats.parse(fmt, path, data)
    elif fmt == "claude-code.transcript":
        parser, meta_note = transcript_parser(path)
        yield from meta_note.apply(parser.feed_lines(data.split(b"\n")))
        yield from parser.finish()
    elif fmt == "claude-code.transcript-array":
        fmt_name = claude_transcript.SOURCE_FORMAT
        try:
            records = jsontext.loads(data, max_depth=None)
        except orjson.JSONDecodeError as e:
            yield Rejected(source, "file", f"not valid JSON: {e}", data, "claude-code", fmt_name)
            return
        if not isinstance(records, list):
            raise ValueError("a JSON document that is not an array")
        if records and isinstance(records[0], dict) and "hook_event_name" in records[0]:
            raise ValueError("a JSON array of hook payloads (replay it with POST /v1/hooks/…)")
        if not _looks_like_claude(records[:50]):
            raise ValueError("a JSON array that is not a Claude Code transcript")
        if jsontext.too_deep(records, jsontext.MAX_DEPTH + 1):  # the array is one level
            yield Rejected(source, "file", str(jsontext.TooDeep()), data, "claude-code", fmt_name)
            return
        yield from claude_transcript.parse_array(records, source)
    else:
        raise ValueError("not a recognised agent transcript")


def companion(path: Path) -> Path | None:
    """The other file the parser of ``path`` reads, if any: a Claude Code subagent
    transcript's ``agent-<id>.meta.json`` (its ``agentType``), whether or not it exists."""
    if path.name.startswith("agent-") and path.suffix == ".jsonl":
        return path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")
    return None


def fingerprint(path: Path) -> str | None:
    """What the file system tells of the bytes an import of ``path`` reads: device,
    inode, size and modification time (ns) of ``path`` and of its :func:`companion`
    (``-`` when it has none or it does not exist), as one string; None when ``path``
    itself cannot be stat'ed. A file rewritten in place to the same size within the
    same nanosecond keeps its fingerprint (``import --reread`` reads it anyway)."""
    try:
        parts = [_stat_text(path)]
    except OSError:
        return None
    meta = companion(path)
    if meta is not None:
        try:
            parts.append(_stat_text(meta))
        except OSError:
            parts.append("-")
    return " ".join(parts)


def _stat_text(path: Path) -> str:
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


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


def transcript_parser(path: Path) -> tuple[claude_transcript.TranscriptParser, MetaNote]:
    """A parser for the Claude Code transcript ``path``, and the note of the redactions
    privacy made in its ``.meta.json`` (a subagent's: :func:`companion`), to put on the
    first of the subagent's own facts. A subagent's file
    ``<session id>/subagents/agent-<id>.jsonl`` also names the run's parent, for records
    that do not name it."""
    meta = companion(path)
    agent_type, redactions = _meta_agent_type(meta) if meta is not None else (None, [])
    in_folder = path.name.startswith("agent-") and path.parent.name == "subagents"
    parent = (path.parent.parent.name or None) if in_folder else None
    parser = claude_transcript.TranscriptParser(str(path), agent_type, parent)
    return parser, MetaNote(agent_type, redactions)


class MetaNote:
    """The redactions made in a subagent's ``.meta.json``, recorded on the first of the
    subagent's own facts (the stream it opens holds the ``agentType``): once, however
    many calls of :meth:`apply` the facts come in."""

    def __init__(self, agent_type: str | None, redactions: list[dict[str, Any]]) -> None:
        self.agent_type = agent_type
        self.pending = list(redactions)

    def apply(self, facts: Iterable[Observation | Rejected]) -> Iterator[Observation | Rejected]:
        for fact in facts:
            if (
                self.pending
                and isinstance(fact, Observation)
                and fact.session.agent_type == self.agent_type
            ):
                fact.redactions = (*fact.redactions, *self.pending)
                self.pending = []
            yield fact


class ParsedFile(NamedTuple):
    """What was read from one file: its facts, or why it was skipped (facts read before
    the error are kept), the process that parsed it, and the bytes of a last line still
    being written that were left unread (:func:`unfinished_tail`), and the file's
    :func:`fingerprint`."""

    path: Path
    facts: list[Observation | Rejected]
    skipped: str | None
    metadata: bool
    parsed_by: int
    unfinished: int = 0
    fingerprint: str | None = None
    """:func:`fingerprint` of the file taken before it was read."""


def parse_one(path: Path) -> ParsedFile:
    """Read and parse one file as an import does: all of it but a last line still being
    written (:func:`unfinished_tail`). Never raises for the file: an unknown format or
    a read error is given as ``skipped``."""
    pid = os.getpid()
    if path.name.endswith(".meta.json"):  # read with its agent-*.jsonl (agentType)
        return ParsedFile(path, [], None, True, pid)
    facts: list[Observation | Rejected] = []
    unfinished = 0
    before = fingerprint(path)  # before reading: a file that grows meanwhile differs
    try:
        data = read_file(path)
        unfinished = unfinished_tail(path, data)
        facts.extend(parse_data(path, data[: len(data) - unfinished]))
    except (ValueError, OSError) as e:  # unknown format, unreadable file
        return ParsedFile(path, facts, str(e), False, pid, unfinished, before)
    except Exception as e:  # a record its parser does not expect: the facts before it stay
        reason = f"parsing stopped at a record it cannot read: {type(e).__name__}: {e}"
        return ParsedFile(path, facts, reason, False, pid, unfinished, before)
    return ParsedFile(path, facts, None, False, pid, unfinished, before)


def parse_run(paths: list[Path]) -> list[ParsedFile]:
    """Parse ``paths`` in order (in an import's worker, or in the importing process)."""
    with gc_paused():
        return [parse_one(p) for p in paths]
