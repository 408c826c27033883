"""The envelope every recorded domain event carries, and the hash chain over it.

Every event class of the ledger derives from :class:`LedgerEvent`, a frozen pydantic
model that also satisfies eventsourcing's ``CanMutateAggregate`` protocol, so the
library's repository, optimistic concurrency and notification log work unchanged.

Hash chain: ``digest = sha256(previous_digest + "\\n" + canonical(event))`` where
``canonical`` is the event's JSON form (sorted keys, no whitespace) without ``digest``
and with ``kind`` (the event class name) added. The first event of a stream chains
from the empty string. Any edit, deletion or reordering of a stored event changes a
digest that a later event (or an anchor kept outside the stream) depends on.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar
from uuid import UUID

import orjson
from eventsourcing.domain import CanMutateAggregate
from pydantic import BaseModel, ConfigDict

from ledger import jsontext


class Redaction(BaseModel):
    """One privacy redaction applied to a record before it was stored.

    ``kind`` is the rule (e.g. ``private_tag``), ``path`` the JSON path of the string
    it was found in (e.g. ``$.prompt``), ``count`` how many matches. Never the secret.
    """

    model_config = ConfigDict(frozen=True)

    kind: str
    path: str
    count: int = 1


OBSERVATION_KINDS = ("gotcha", "decision", "bug_fix", "trade_off", "discovery")
"""The classes of a summary's observations."""


class MemoryObservation(BaseModel):
    """One classified note of a summary: ``kind`` (one of :data:`OBSERVATION_KINDS`),
    ``title`` (one line), ``detail`` (a few sentences at most) and ``files`` it
    concerns (paths as the agent gave them)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["gotcha", "decision", "bug_fix", "trade_off", "discovery"]
    title: str
    detail: str = ""
    files: tuple[str, ...] = ()


class LedgerEvent(BaseModel, CanMutateAggregate[UUID]):
    """Envelope fields shared by every domain event.

    Fields:
        originator_id, originator_version: stream id and 1-based position in the stream.
        timestamp: when the ledger recorded the event (UTC; exposed as ``recorded_at``).
        event_key: idempotency key; a second event with a key already in the stream is
            never appended. From the source when it has one (transcript ``uuid``,
            ``tool_use_id`` + phase, ``message.id`` for usage), else assigned at capture.
        alias_keys: further keys under which the same fact may arrive from another
            source (e.g. a prompt seen by a hook and later by a transcript import).
        agent: ``claude-code``, ``codex``, ...
        source_format: e.g. ``claude-code.hook``, ``claude-code.transcript``.
        source_version: the agent's version when the source states it.
        occurred_at: the source's clock, when present (sources disagree and go
            backwards; order is the log order, never timestamps).
        raw: the source record after privacy processing, as JSON text: the line or body
            exactly as received when privacy changed nothing (None when the record's raw
            form is carried by an earlier event of the same record, see ``record_key``).
            Parse it with :func:`raw_record`.
        record_key: key of the source record this fact came from.
        redactions: privacy redactions applied to ``raw`` and the payload.
        digest: the hash chain link, hex sha256 (see module docstring).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime
    event_key: str
    alias_keys: tuple[str, ...] = ()
    agent: str
    source_format: str
    source_version: str | None = None
    occurred_at: datetime | None = None
    raw: Any = None
    record_key: str | None = None
    redactions: tuple[Redaction, ...] = ()
    digest: str = ""

    @property
    def recorded_at(self) -> datetime:
        return self.timestamp

    @property
    def kind(self) -> str:
        return type(self).__name__

    def apply(self, aggregate: Any) -> None:
        aggregate.apply_event(self)


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def canonical_bytes(event: BaseModel) -> bytes:
    """The event's canonical JSON: its fields without ``digest``, plus ``kind`` (the class
    name), keys sorted at every level, no whitespace, UTC times with ``Z``.

    Equal, byte for byte, to ``orjson.dumps({**model_dump(mode="json", exclude={"digest"}),
    "kind": ...}, OPT_SORT_KEYS)`` (what :func:`chain_digest` hashes), but dumped by
    orjson straight from the validated field values, without pydantic's walk over ``raw``.
    """
    state = dict(event.__dict__)
    state.pop("digest", None)
    state["kind"] = type(event).__name__
    return orjson.dumps(state, default=_json_default, option=_CANONICAL)


def raw_record(event: LedgerEvent) -> Any:
    """The event's raw source record as a JSON value (None when it has none), read as
    :func:`ledger.jsontext.loads` reads agent JSON (an unpaired surrogate escape, which
    a source line may hold, as U+FFFD)."""
    raw = event.raw
    return jsontext.loads(raw) if isinstance(raw, str) else raw


def _link(previous: str, canonical: bytes) -> str:
    """``sha256(previous + "\n" + canonical)`` as hex."""
    h = hashlib.sha256(previous.encode("ascii"))
    h.update(b"\n")
    h.update(canonical)
    return h.hexdigest()


def chain_digest(previous: str, event: BaseModel) -> str:
    """The digest ``event`` must carry after ``previous`` — the reference computation
    that ``verify`` runs, through pydantic's own JSON dump (independent of the fast path
    :func:`canonical_bytes` that writers use)."""
    state = event.model_dump(mode="json", exclude={"digest"})
    state["kind"] = type(event).__name__
    return _link(previous, orjson.dumps(state, option=orjson.OPT_SORT_KEYS))


def stored_chain_digest(previous: str, state: bytes, kind: str, originator_id: str, version: int) -> str:
    """The digest an event stored as ``state`` (:func:`stored_bytes`) was given after
    ``previous``, from the stored fields themselves: for an event stored at an earlier
    class version, which its upcasters complete with fields its writer never hashed
    (:func:`chain_digest` of the upcast event would differ). ``kind``: the class name;
    ``originator_id`` / ``version``: the row's, as the decoded event has them."""
    head, separator, tail = state.partition(RAW_SEPARATOR)
    stored = orjson.loads(head)
    stored.pop("digest", None)
    stored.pop("class_version", None)
    if separator:
        stored["raw"] = tail.decode("utf-8")
    stored.update(originator_id=originator_id, originator_version=version, kind=kind)
    return _link(previous, orjson.dumps(stored, option=orjson.OPT_SORT_KEYS))


RAW_SEPARATOR = b"\x00"
"""Separates an event's JSON from its raw record in the stored bytes (JSON text never
holds a NUL byte: orjson escapes control characters)."""


def stored_bytes(event: LedgerEvent) -> bytes:
    """What the event store keeps: the event's fields as JSON (keys in field order, only
    the hash input sorts them; ``class_version`` added when above 1), then — when
    ``raw`` is JSON text — a NUL byte and the raw record's UTF-8 bytes.

    The raw record is most of an event's size; kept after the JSON, a reader that does
    not need it (a projection) parses only the JSON part.
    """
    state = dict(event.__dict__)
    version = type(event).class_version
    if version > 1:
        state["class_version"] = version
    raw = state.get("raw")
    if isinstance(raw, str):
        try:
            tail = raw.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: keep it inside the JSON
            pass
        else:
            del state["raw"]
            head = orjson.dumps(state, default=_json_default, option=orjson.OPT_UTC_Z)
            return b"".join((head, RAW_SEPARATOR, tail))  # one copy of the raw bytes
    return orjson.dumps(state, default=_json_default, option=orjson.OPT_UTC_Z)


A = TypeVar("A")


def start_stream(opened: LedgerEvent, cls: type[A]) -> A:
    """A new aggregate of type ``cls`` from its first event ``opened`` (not yet sealed):
    the event sealed as the first link of the stream's chain, applied, and left pending
    to be saved."""
    event = seal("", opened)
    agg = event.mutate(None)
    assert isinstance(agg, cls)
    agg.pending_events.append(event)  # type: ignore[attr-defined]
    return agg


def seal(previous: str, event: LedgerEvent) -> LedgerEvent:
    """Set ``event.digest`` to its chain link after ``previous`` and return the event.

    Only for an event just constructed and not yet shared: the frozen model's digest is
    written in place, so it is built (and validated) once.
    """
    event.__dict__["digest"] = _link(previous, canonical_bytes(event))
    return event
