"""SSE messages from the notification log: one :class:`Section` per read.

A section covers the log positions ``(after, last]``. For each position, in log order,
it holds an ``event.appended`` message and then the messages that event caused:
``batch.completed`` (a ``TurnEnded``, a prompt that closed the previous batch, or an
``Ended`` that closed the open one) and ``session.completed`` (``Ended``); after the
last event of each session in the section, one ``session.updated``. Every message's
SSE ``id`` is the position of the event that caused it, so ids never go down within a
stream. Rows in derived messages are read after the projections applied at least
``last`` (they may already include later events). The protocol is in ``docs/sse.md``.

Each message is encoded once (sse-starlette's :class:`ServerSentEvent`) and the bytes
are shared by every client. Blocking (database) code: call from a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson
from sse_starlette import ServerSentEvent

from api.bootstrap import Services
from ledger.quarantine import Quarantine
from ledger.session import Session
from projections.base import iso
from projections.snapshots import batch_rows, session_rows

log = logging.getLogger(__name__)

APPENDED = "event.appended"
SESSION_UPDATED = "session.updated"
BATCH_COMPLETED = "batch.completed"
SESSION_COMPLETED = "session.completed"
KINDS = frozenset({APPENDED, SESSION_UPDATED, BATCH_COMPLETED, SESSION_COMPLETED})
SECTION_LIMIT = 500
"""Notifications per log read (one section)."""

_OPENS = ("human", "task")
_SUMMARY_FIELDS = ("tool_use_id", "tool_name", "is_error", "duration_ms", "prompt_kind", "reason")


@dataclass(frozen=True, slots=True)
class Message:
    """One SSE message: ``id`` (log position), ``kind`` (SSE ``event``), the session it
    concerns (None for rejected input), that session's ``cwd`` and external id (for
    the filters), and ``frame``, the encoded SSE bytes."""

    id: int
    kind: str
    session_id: str | None
    cwd: str | None
    external_id: str | None
    frame: bytes


@dataclass(frozen=True, slots=True)
class Section:
    """Messages for log positions ``(after, last]``, in order."""

    after: int
    last: int
    messages: tuple[Message, ...]


def read_section(
    services: Services, after: int, stop: int | None = None, limit: int = SECTION_LIMIT
) -> Section | None:
    """The section after position ``after`` (up to ``stop`` inclusive, at most ``limit``
    notifications); None when the log has nothing there."""
    ledger = services.ledger
    notifications = ledger.recorder.select_notifications(
        start=after, limit=limit, stop=stop, inclusive_of_start=False
    )
    if not notifications:
        return None
    last = notifications[-1].id
    try:
        services.runner.catch_up(stop=last)
    except Exception:  # derived rows may lag; the events themselves still go out
        log.exception("projections could not catch up to %s", last)
    events: list[tuple[int, Any]] = []
    for n in notifications:
        try:
            events.append((n.id, ledger.mapper.to_domain_event(n)))
        except Exception as e:  # a row that no longer decodes is reported, not skipped
            bad = _Undecodable(n.originator_id, n.originator_version, n.topic, repr(e))
            events.append((n.id, bad))
    sids = {str(e.originator_id) for _, e in events if isinstance(e, Session.Event)}
    rows = session_rows(services.models, sids)
    batches = batch_rows(services.models, _batch_keys(events))
    last_of = {str(e.originator_id): p for p, e in events if isinstance(e, Session.Event)}
    out: list[Message] = []
    for position, event in events:
        sid = str(event.originator_id) if isinstance(event, Session.Event) else None
        row = rows.get(sid) if sid else None
        tag = (position, sid, row["cwd"] if row else None, row["external_id"] if row else None)
        out.append(_message(tag, APPENDED, _appended(position, event, row)))
        if sid is None:
            continue
        head = {"position": position, "session_id": sid}
        for batch, reason in _closed_batches(event):
            found = batches.get((sid, batch))
            if found and found["status"] == "completed" and reason in (None, found["end_reason"]):
                out.append(_message(tag, BATCH_COMPLETED, {**head, "batch": found}))
        if isinstance(event, Session.Ended) and row is not None:
            out.append(_message(tag, SESSION_COMPLETED, {**head, "session": row}))
        if last_of[sid] == position and row is not None:
            out.append(_message(tag, SESSION_UPDATED, {**head, "session": row}))
    return Section(after, last, tuple(out))


Tag = tuple[int, str | None, str | None, str | None]
"""(position, session id, cwd, external id) of a message."""


def _message(tag: Tag, kind: str, data: dict[str, Any]) -> Message:
    position, sid, cwd, external = tag
    text = orjson.dumps(data, default=str).decode()
    frame = ServerSentEvent(text, event=kind, id=str(position)).encode()
    return Message(position, kind, sid, cwd, external, frame)


@dataclass(frozen=True)
class _Undecodable:
    originator_id: Any
    originator_version: int
    topic: str
    error: str


def _appended(position: int, event: Any, row: dict[str, Any] | None) -> dict[str, Any]:
    """The ``event.appended`` payload (no ``raw``: fetch the session's events for it)."""
    if isinstance(event, _Undecodable):
        return {"position": position, "stream_id": str(event.originator_id), "session_id": None,
                "version": event.originator_version, "kind": event.topic.rsplit(".", 1)[-1],
                "error": event.error}
    is_session = isinstance(event, Session.Event)
    data: dict[str, Any] = {
        "position": position,
        "stream_id": str(event.originator_id),
        "session_id": str(event.originator_id) if is_session else None,
        "stream": "session" if is_session else "quarantine" if isinstance(event, Quarantine.Event)
        else "other",
        "version": event.originator_version,
        "kind": type(event).__name__,
        "event_key": event.event_key,
        "agent": event.agent,
        "source_format": event.source_format,
        "status": getattr(event, "status", None),
        "batch": getattr(event, "batch", None),
        "occurred_at": iso(event.occurred_at),
        "recorded_at": iso(event.timestamp),
        "digest": event.digest,
        "external_id": row["external_id"] if row else None,
        "cwd": row["cwd"] if row else None,
    }
    for f in _SUMMARY_FIELDS:
        if hasattr(event, f):
            data[f] = getattr(event, f)
    return data


def _closed_batches(event: Any) -> list[tuple[int, str | None]]:
    """(batch, required end_reason or None) of the prompt batches this event may have
    closed; the read model says whether it did. A prompt closes the previous batch only
    when that batch was still open (``next_prompt``), ``Ended`` only an open one."""
    match event:
        case Session.TurnEnded() if event.batch >= 1:
            return [(event.batch, None)]
        case Session.Ended() if event.batch >= 1:
            return [(event.batch, "session_end")]
        case Session.PromptSubmitted() if event.batch > 1 and event.prompt_kind in _OPENS:
            return [(event.batch - 1, "next_prompt")]
        case _:
            return []


def _batch_keys(events: list[tuple[int, Any]]) -> set[tuple[str, int]]:
    return {(str(e.originator_id), b) for _, e in events for b, _ in _closed_batches(e)}
