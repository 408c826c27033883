"""SSE messages from the notification log, in two sections per read of the log.

A read covers the log positions ``(after, last]`` and gives two sections (:class:`Section`):

* the *appended* section: one ``event.appended`` per event, SSE ``id`` = its position,
  built from the log alone so it goes out before the projections run;
* the *derived* section, built after the projections applied ``last``: for each event
  in log order, ``batch.completed`` (a ``TurnEnded``, a prompt that closed the previous
  batch, an ``Ended`` that closed the open one), ``session.completed`` (``Ended``) and,
  after the last event of each session, one ``session.updated`` with its read-model
  row. Their SSE ``id`` is ``last`` (ids never go down within a stream); the causing
  event's position is ``data.position``. Rows may already include later events.

Each message is encoded once (sse-starlette's :class:`ServerSentEvent`) and the bytes
are shared by every client. Blocking (database) code: call from a worker thread.
The protocol is in ``docs/sse.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import orjson
from sse_starlette import ServerSentEvent

from api.bootstrap import Services
from ledger.observation import BATCH_OPENERS
from ledger.quarantine import Quarantine
from ledger.session import Session
from projections.base import iso
from projections.snapshots import batch_rows, session_rows

log = logging.getLogger(__name__)

APPENDED = "event.appended"
SESSION_UPDATED = "session.updated"
BATCH_COMPLETED = "batch.completed"
SESSION_COMPLETED = "session.completed"
DERIVED_KINDS = frozenset({SESSION_UPDATED, BATCH_COMPLETED, SESSION_COMPLETED})
KINDS = DERIVED_KINDS | {APPENDED}
SECTION_LIMIT = 500
"""Notifications per log read (one section)."""
IDENTITIES_KEPT = 100_000
"""Sessions whose cwd and external id the broadcaster keeps in memory (then starts over)."""

_SUMMARY_FIELDS = ("tool_use_id", "tool_name", "is_error", "duration_ms", "prompt_kind", "reason")


@dataclass(frozen=True, slots=True)
class Message:
    """One SSE message: ``id`` (log position), ``kind`` (SSE ``event``), the session it
    concerns (None for rejected input), that session's ``cwd`` and external id (for
    the filters), ``frame``, the encoded SSE bytes, and ``parent_id``, the session's
    parent as its read-model row names it (derived messages only; None otherwise)."""

    id: int
    kind: str
    session_id: str | None
    cwd: str | None
    external_id: str | None
    frame: bytes
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    """Messages for log positions ``(after, last]``, in order: the ``event.appended``
    messages (``derived=False``) or the messages derived from them (``derived=True``)."""

    after: int
    last: int
    messages: tuple[Message, ...]
    derived: bool = False
    _joined: dict[Callable[[Message], bool], bytes] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def kinds(self) -> frozenset[str]:
        """The message kinds in this section."""
        return frozenset(m.kind for m in self.messages)

    def frames(self, accept: Callable[[Message], bool]) -> bytes:
        """The encoded frames of the messages ``accept`` takes, joined; computed once
        per (hashable) filter and shared by every client that uses an equal one."""
        joined = self._joined.get(accept)
        if joined is None:
            joined = self._joined[accept] = b"".join(m.frame for m in self.messages if accept(m))
        return joined


Events = list[tuple[int, Any]]
Identities = dict[str, tuple[str | None, str | None]]
"""session id -> (cwd, external id); filled from ``Opened`` events and session rows."""


def read_events(
    services: Services, after: int, stop: int | None = None, limit: int = SECTION_LIMIT
) -> Events:
    """Decoded (position, domain event) pairs after ``after`` (up to ``stop``), each
    without its raw source record (``raw`` None): no message needs it, and clients
    resumed from the log would each hold every payload twice over."""
    ledger = services.ledger
    notifications = ledger.recorder.select_notifications(
        start=after, limit=limit, stop=stop, inclusive_of_start=False
    )
    decode = ledger.mapper.decode
    events: Events = []
    for n in notifications:
        try:
            events.append(
                (n.id, decode(n.topic, n.state, n.originator_id, n.originator_version, raw=False))
            )
        except Exception as e:  # a row that no longer decodes is reported, not skipped
            bad = _Undecodable(n.originator_id, n.originator_version, n.topic, repr(e))
            events.append((n.id, bad))
    return events


def appended_section(services: Services, after: int, events: Events, known: Identities) -> Section:
    """``event.appended`` for each event (needs no projection; ``known`` is updated)."""
    _identify(services, events, known)
    out = []
    for position, event in events:
        sid = str(event.originator_id) if isinstance(event, Session.Event) else None
        cwd, external = known.get(sid, (None, None)) if sid else (None, None)
        data = _appended(position, event, cwd, external)
        out.append(_message((position, sid, cwd, external, None), APPENDED, data, position))
    return Section(after, events[-1][0], tuple(out))


def derived_section(services: Services, after: int, events: Events) -> Section:
    """The messages derived from ``events``, after the projections applied them. Their
    SSE id is the section's last position (so ids never go down in a stream); the
    causing event's position is ``data.position``."""
    last = events[-1][0]
    try:
        services.runner.catch_up(stop=last)
    except Exception:  # derived rows may lag; the events themselves went out already
        log.exception("projections could not catch up to %s", last)
    sids = {str(e.originator_id) for _, e in events if isinstance(e, Session.Event)}
    rows = session_rows(services.models, sids)
    batches = batch_rows(services.models, _batch_keys(events))
    last_of = {str(e.originator_id): p for p, e in events if isinstance(e, Session.Event)}
    out: list[Message] = []
    for position, event in events:
        if not isinstance(event, Session.Event):
            continue
        sid = str(event.originator_id)
        row = rows.get(sid)
        if row is None:
            continue
        tag = (position, sid, row["cwd"], row["external_id"], row["parent_id"])
        head = {"position": position, "session_id": sid}
        for batch, reason in _closed_batches(event):
            found = batches.get((sid, batch))
            if found and found["status"] == "completed" and reason in (None, found["end_reason"]):
                out.append(_message(tag, BATCH_COMPLETED, {**head, "batch": found}, last))
        if isinstance(event, Session.Ended):
            out.append(_message(tag, SESSION_COMPLETED, {**head, "session": row}, last))
        if last_of[sid] == position:
            out.append(_message(tag, SESSION_UPDATED, {**head, "session": row}, last))
    return Section(after, last, tuple(out), derived=True)


def read_section(
    services: Services, after: int, stop: int | None = None, known: Identities | None = None
) -> tuple[Section, Section] | None:
    """Both sections for the log after ``after`` (up to ``stop``), or None when empty."""
    events = read_events(services, after, stop)
    if not events:
        return None
    appended = appended_section(services, after, events, {} if known is None else known)
    return appended, derived_section(services, after, events)


def read_appended(
    services: Services, after: int, known: Identities
) -> tuple[Section, Events] | None:
    """The appended section after ``after`` and its events (for :func:`derived_section`)."""
    events = read_events(services, after)
    if not events:
        return None
    return appended_section(services, after, events, known), events


def _identify(services: Services, events: Events, known: Identities) -> None:
    """Fill ``known`` for every session in ``events``: from its ``Opened`` event in the
    section, else its read-model row, else its stored ``Opened`` event (the projections
    may lag behind the log)."""
    if len(known) > IDENTITIES_KEPT:
        known.clear()
    missing = set()
    for _, e in events:
        if isinstance(e, Session.Opened):
            known[str(e.originator_id)] = (e.cwd, e.external_id)
        elif isinstance(e, Session.Event) and str(e.originator_id) not in known:
            missing.add(str(e.originator_id))
    if missing:
        for sid, row in session_rows(services.models, missing).items():
            known[sid] = (row["cwd"], row["external_id"])
    for sid in missing - known.keys():
        stored = services.ledger.recorder.select_events(UUID(sid), lte=1, limit=1)
        opened = services.ledger.mapper.to_domain_event(stored[0]) if stored else None
        if isinstance(opened, Session.Opened):
            known[sid] = (opened.cwd, opened.external_id)


Tag = tuple[int, str | None, str | None, str | None, str | None]
"""(position, session id, cwd, external id, parent id) of a message."""


def _message(tag: Tag, kind: str, data: dict[str, Any], sse_id: int) -> Message:
    _position, sid, cwd, external, parent = tag
    text = orjson.dumps(data, default=str).decode()
    frame = ServerSentEvent(text, event=kind, id=str(sse_id)).encode()
    return Message(sse_id, kind, sid, cwd, external, frame, parent)


@dataclass(frozen=True)
class _Undecodable:
    originator_id: Any
    originator_version: int
    topic: str
    error: str


def _appended(position: int, event: Any, cwd: str | None, external: str | None) -> dict[str, Any]:
    """The ``event.appended`` payload (no ``raw``: fetch the session's events for it)."""
    if isinstance(event, _Undecodable):
        return {
            "position": position,
            "stream_id": str(event.originator_id),
            "session_id": None,
            "version": event.originator_version,
            "kind": event.topic.rsplit(".", 1)[-1],
            "error": event.error,
        }
    is_session = isinstance(event, Session.Event)
    data: dict[str, Any] = {
        "position": position,
        "stream_id": str(event.originator_id),
        "session_id": str(event.originator_id) if is_session else None,
        "stream": "session"
        if is_session
        else "quarantine"
        if isinstance(event, Quarantine.Event)
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
        "external_id": external,
        "cwd": cwd,
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
        case Session.PromptSubmitted() if event.batch > 1 and event.prompt_kind in BATCH_OPENERS:
            return [(event.batch - 1, "next_prompt")]
        case _:
            return []


def _batch_keys(events: list[tuple[int, Any]]) -> set[tuple[str, int]]:
    return {(str(e.originator_id), b) for _, e in events for b, _ in _closed_batches(e)}
