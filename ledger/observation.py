"""Normalised facts that source adapters hand to the ledger.

A source adapter (one module per agent format) turns raw records into
:class:`Observation` objects: which session, which domain event class, its payload,
its idempotency key and the raw record. It never touches the event store; the
:class:`~ledger.app.Ledger` application decides what is new and appends it.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import orjson

SESSION_NAMESPACE = uuid.UUID("6f1c2a52-39a4-4bb5-8a4e-0c5a3d1f9b21")
TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""The four token counts of a ``UsageRecorded`` (Anthropic's convention, docs/cost.md)."""
CACHE_1H = "cache_creation_1h_input_tokens"
"""The ``UsageRecorded`` count of the part of ``cache_creation_input_tokens`` written with
a 1-hour TTL (priced at its own rate; 0 when the source gives no split)."""
MAX_COUNT = 2**53 - 1
"""Largest count (tokens, milliseconds) a source's integer is taken as, and largest cost
(USD) a source may report: the largest integer JavaScript writes exactly. A larger one
is none: orjson cannot write an integer above 2**64, the read models sum counts in
64-bit columns, and a sum of costs that overflows to infinity is no JSON number."""

BATCH_OPENERS = ("human", "task")
"""Prompt kinds that open a prompt batch: a person's prompt, a subagent's task prompt.
Any other (``command``: a local slash command such as ``/clear``; ``task_notification``)
arrives in a batch."""

BEFORE_FIRST_PROMPT = ""
"""``Observation.after_prompt`` of a file's fact that no prompt of its session precedes
in that file (a transcript's ``/clear`` record, a rollout's ``session_meta``): recorded
after the hooks' prompts, it belongs before the first batch and is history."""


def session_id(agent: str, external_id: str) -> uuid.UUID:
    """Deterministic aggregate id: ``uuid5(NAMESPACE, f"{agent}:{external_id}")``."""
    return uuid.uuid5(SESSION_NAMESPACE, f"{agent}:{external_id}")


@functools.cache
def _cached_session_id(agent: str, external_id: str) -> uuid.UUID:
    return session_id(agent, external_id)


@dataclass(frozen=True, slots=True)
class SessionRef:
    """Identifies a session as its agent names it.

    ``external_id`` is the agent's own id (Claude Code ``sessionId``; a subagent run is
    ``"{sessionId}/agent-{agentId}"``). ``parent_external_id`` links a child session
    (subagent) to its parent.
    """

    agent: str
    external_id: str
    parent_external_id: str | None = None
    agent_type: str | None = None
    cwd: str | None = None

    @property
    def id(self) -> uuid.UUID:
        return _cached_session_id(self.agent, self.external_id)

    @property
    def parent_id(self) -> uuid.UUID | None:
        if self.parent_external_id is None:
            return None
        return session_id(self.agent, self.parent_external_id)


@dataclass(slots=True)
class Observation:
    """One fact about one session, ready to be appended as a domain event.

    Attributes:
        session: the session it belongs to.
        kind: name of the ``Session`` event class (e.g. ``"PromptSubmitted"``).
        key: idempotency key (see :class:`ledger.envelope.LedgerEvent`).
        data: the event's payload fields.
        source_format, source_version, occurred_at: envelope fields.
        raw: the raw source record (already privacy-processed) or None.
        record_key: key of the source record (several facts may share one record).
        alias_keys: other keys of the same fact from other sources.
        after_prompt: key of the prompt this fact follows in its own source order;
            lets a late import attribute the fact to the right prompt batch
            (:data:`BEFORE_FIRST_PROMPT`: none precedes it; None: not known).
        redactions: privacy redactions applied.
    """

    session: SessionRef
    kind: str
    key: str
    data: dict[str, Any]
    source_format: str
    source_version: str | None = None
    occurred_at: datetime | None = None
    raw: Any = None
    record_key: str | None = None
    alias_keys: tuple[str, ...] = ()
    after_prompt: str | None = None
    redactions: tuple[Any, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def __reduce__(self) -> tuple[type[Observation], tuple[Any, ...]]:
        """Pickled as the constructor's arguments (an import's parsing workers send
        observations to the recording process): a third cheaper to load than the
        slots dataclass's default state, field by field."""
        return Observation, _fields_of()(self)


@functools.cache
def _fields_of() -> operator.attrgetter[tuple[Any, ...]]:
    """A getter of every field of an :class:`Observation`, in constructor order."""
    return operator.attrgetter(*(f.name for f in fields(Observation)))


@dataclass(slots=True)
class Rejected:
    """Input that could not be understood: kept whole, with the reason.

    ``source`` names where it came from (file path or ``hook:<agent>``), ``location``
    the line number or request, ``data`` the raw bytes.
    """

    source: str
    location: str
    reason: str
    data: bytes
    agent: str = "unknown"
    source_format: str = "unknown"
    redactions: tuple[Any, ...] = ()
    """Redactions already applied to ``data`` at the edge (the hook client's spool)."""
    size: int | None = None
    """Set when ``data`` is only the first bytes of a larger input, cut where it was
    received (a request body over the server's limit): the whole input's size in bytes."""
    sha256: str | None = None
    """With ``size``: the sha256 (hex) of the whole input as received."""

    @property
    def key(self) -> str:
        h = hashlib.sha256(self.data if self.sha256 is None else self.sha256.encode())
        h.update(f"\0{self.source}\0{self.location}".encode())
        return "rejected:" + h.hexdigest()[:32]


def json_hash(value: Any) -> str:
    """Short stable hash of a JSON value (sorted keys): 16 hex chars of sha256."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = repr(value).encode()
    return hashlib.sha256(data).hexdigest()[:16]



def call_hash(tool_name: str, tool_input: Any) -> str:
    """Hash of a tool call's name and input (:func:`json_hash` of ``[name, input]``): what
    meets the copies of one call that share no id (a hook's Pre and Post; a hook's copy
    and a file's: ``call:{hash}:{n}``, :meth:`ledger.session.Session.live_alias`)."""
    return json_hash([tool_name, tool_input])
