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
from typing import Any, ClassVar
from uuid import UUID

import orjson
from eventsourcing.domain import CanMutateAggregate
from pydantic import BaseModel, ConfigDict, PrivateAttr


class Redaction(BaseModel):
    """One privacy redaction applied to a record before it was stored.

    ``kind`` is the rule (e.g. ``private_tag``), ``path`` the JSON path of the string
    it was found in (e.g. ``$.prompt``), ``count`` how many matches. Never the secret.
    """

    model_config = ConfigDict(frozen=True)

    kind: str
    path: str
    count: int = 1


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
        raw: the source record after privacy processing (None when the record's raw
            form is carried by an earlier event of the same record, see ``record_key``).
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
    _stored_state: dict[str, Any] | None = PrivateAttr(default=None)

    @property
    def recorded_at(self) -> datetime:
        return self.timestamp

    @property
    def kind(self) -> str:
        return type(self).__name__

    def apply(self, aggregate: Any) -> None:
        aggregate.apply_event(self)


def _link(previous: str, state: dict[str, Any], kind: str) -> str:
    """``sha256(previous + "\\n" + canonical JSON)``; canonical = ``state`` (``digest``
    left out) plus ``kind``, sorted keys, no whitespace."""
    h = hashlib.sha256(previous.encode("ascii"))
    h.update(b"\n")
    h.update(orjson.dumps({**state, "kind": kind}, option=orjson.OPT_SORT_KEYS))
    return h.hexdigest()


def chain_digest(previous: str, event: BaseModel) -> str:
    """The digest ``event`` must carry after ``previous`` (what ``verify`` recomputes)."""
    return _link(previous, event.model_dump(mode="json", exclude={"digest"}), type(event).__name__)


def seal(previous: str, event: LedgerEvent) -> LedgerEvent:
    """Return ``event`` with its chain ``digest`` set, dumping it to JSON only once:
    the dump is kept for :class:`ledger.mapper.PydanticMapper`, which would otherwise
    dump it again to store it."""
    state = event.model_dump(mode="json", exclude={"digest"})
    digest = _link(previous, state, type(event).__name__)
    sealed = event.model_copy(update={"digest": digest})
    state["digest"] = digest
    sealed._stored_state = state
    return sealed
