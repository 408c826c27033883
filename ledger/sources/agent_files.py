"""Format detection and parsing for Gemini CLI, Cursor and OpenClaw files.

``hookledger import`` asks :func:`detect` first (from the file name and first bytes),
then :func:`parse` for the detected format. Formats:

* ``gemini.chat``: a ``.json`` object with ``messages[]`` (chat file), ``history[]``
  (legacy) or a single message ``{id, type, ...}`` (:mod:`ledger.sources.gemini_chat`);
* ``gemini.chat-jsonl``: ``.jsonl`` whose records carry ``projectHash`` or ``$set``;
* ``cursor.transcript``: ``.jsonl`` whose records are ``{role, message}`` with no
  ``type``/``sessionId`` (:mod:`ledger.sources.cursor_transcript`);
* ``openclaw.transcript``: ``.jsonl`` starting with ``{"type": "session", "version"}``
  or holding ``{"type": "message", "message": {"role"}}`` records with ``parentId``
  (:mod:`ledger.sources.openclaw_transcript`).

Gemini CLI's prompt log and ``/chat save`` checkpoints are no sessions
(:func:`not_a_session`: skipped with that reason).

The session id falls back to the file name (without suffix) when the file names none
(Cursor transcripts are always named ``<conversation_id>.jsonl``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ledger.observation import Observation, Rejected
from ledger.sources import cursor_transcript, gemini_chat, openclaw_transcript
from ledger.sources.jsonl import json_objects

FORMATS = ("gemini.chat", "gemini.chat-jsonl", "cursor.transcript", "openclaw.transcript")
_GEMINI_JSON_MARKERS = (b'"messages"', b'"history"', b'"toolCalls"', b'"tokens"')


def not_a_session(path: Path, head: bytes) -> str | None:
    """Why ``path``, a file Gemini CLI keeps beside its chats in
    ``~/.gemini/tmp/<projectHash>/`` (upstream ``packages/core/src/core/logger.ts``), is
    no session to import, or None for any other file: ``logs.json``, every session's
    prompts again (``[{sessionId, messageId, timestamp, type: "user", message}]``), and a
    ``/chat save`` checkpoint ``checkpoint-<tag>.json`` (``{history[], authType}``, or
    the legacy bare array), a copy of a chat's history. Imported, the first became a
    Claude Code session per Gemini session id, the second a Gemini session named after
    the file with the saved chat's prompts counted again."""
    if path.suffix != ".json":
        return None
    start = head.lstrip()[:1]
    if path.name == "logs.json" and start == b"[" and b'"messageId"' in head:
        return "Gemini CLI's prompt log (logs.json): the prompts its chat files hold"
    if path.name.startswith("checkpoint-") and (start == b"[" or b'"history"' in head):
        return "a Gemini CLI /chat save checkpoint: a copy of a chat file's history"
    return None


def detect(path: Path, head: bytes) -> str | None:
    """One of :data:`FORMATS`, or None when the file is none of them."""
    if path.suffix == ".json":
        if head.lstrip().startswith(b"{") and any(m in head for m in _GEMINI_JSON_MARKERS):
            return "gemini.chat"
        return None
    if path.suffix != ".jsonl":
        return None
    records = [r for r in json_objects(head.split(b"\n", 20)[:20]) if isinstance(r, dict)]
    if not records:
        return None
    first = records[0]
    if any("projectHash" in r or "$set" in r for r in records):
        return "gemini.chat-jsonl"
    if first.get("type") == "session" and "version" in first and "id" in first:
        return "openclaw.transcript"
    if any(
        r.get("type") == "message" and "parentId" in r and isinstance(r.get("message"), dict)
        for r in records
    ):
        return "openclaw.transcript"
    if (
        "role" in first
        and isinstance(first.get("message"), dict)
        and "type" not in first
        and "sessionId" not in first
    ):
        return "cursor.transcript"
    return None


def parse(fmt: str, path: Path, data: bytes) -> Iterator[Observation | Rejected]:
    """Observations and rejected records of one file of format ``fmt``."""
    source = str(path)
    stem = path.name.removesuffix(path.suffix)
    if fmt == "gemini.chat":
        yield from gemini_chat.parse_document(data, source, stem)
    elif fmt == "gemini.chat-jsonl":
        yield from gemini_chat.parse_jsonl(data.split(b"\n"), source, stem)
    elif fmt == "cursor.transcript":
        yield from cursor_transcript.parse_records(data.split(b"\n"), source, stem)
    elif fmt == "openclaw.transcript":
        yield from openclaw_transcript.parse_records(data.split(b"\n"), source, stem)
    else:
        raise ValueError(f"unknown format {fmt!r}")


