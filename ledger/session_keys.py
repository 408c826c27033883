"""Which session an agent's session *key* names: one stream per (agent, key).

OpenClaw names a conversation bucket by a ``sessionKey`` (``agent:main:main``) that
stays the same across ``/new`` and resets, while each session in it has its own
``sessionId`` (the transcript's id). Some hooks carry only the key: upstream
``message_received`` never has a ``sessionId`` (``openclaw/openclaw``
``src/plugins/hook-message.types.ts``). A :class:`SessionKey` stream remembers which
session the key names now, from the hooks that carry both, and records every
resolution it made, so the decision is in the log:

* :class:`SessionKey.Bound` — the key names session ``external_id`` from now on
  (``session_start``; ``session_end`` with ``nextSessionId``; any other hook carrying
  both the key and a session id the key does not name yet, unless the key already
  moved on from that session, which makes it a late hook of a replaced session);
* :class:`SessionKey.Resolved` — a hook that named only the key (its record key
  ``hook_key``) was recorded on session ``external_id``; ``bound`` is False when no
  session id was known for the key yet and the hook went to a session named after the
  key itself (what every such hook did before these streams existed).

Stream id ``uuid5(NAMESPACE, "session-key:{agent}:{key}")``. The ledger resolves and
binds in :meth:`ledger.app.Ledger.record`, for every path that records hooks (``POST
/v1/hooks/{agent}``, the spool journal, ``hookledger hook``), before the facts are
grouped by session. A hook delivered twice resolves to the session of its first
``Resolved``, whatever the key names by then.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID, uuid5

from eventsourcing.domain import BaseAggregate, CanInitAggregate
from eventsourcing.utils import get_topic

from ledger.envelope import LedgerEvent, seal, start_stream
from ledger.observation import SESSION_NAMESPACE


def session_key_id(agent: str, key: str) -> UUID:
    return uuid5(SESSION_NAMESPACE, f"session-key:{agent}:{key}")


class SessionKey(BaseAggregate[UUID]):
    """Stream of the sessions one session key named, and of the hooks resolved by it."""

    class Event(LedgerEvent):
        pass

    class Opened(Event, CanInitAggregate[UUID]):
        """The first hook naming ``session_key`` arrived (before its first fact)."""

        originator_topic: str
        session_key: str

    class Bound(Event):
        """The key names session ``external_id`` from now on (``previous``: the one it
        named before). ``hook``: the hook that showed it; ``record_key`` its record."""

        external_id: str
        previous: str | None = None
        hook: str

    class Resolved(Event):
        """The hook record ``hook_key``, which named only the key, was recorded on
        session ``external_id``. ``bound``: False when the key named no session yet
        (the hook went to a session named after the key)."""

        hook_key: str
        external_id: str
        bound: bool

    def __init__(self, session_key: str, agent: str) -> None:
        self.session_key = session_key
        self.agent = agent
        self.head_digest = ""
        self.seen_keys: set[str] = set()
        self.current: str | None = None
        self.replaced: set[str] = set()
        self.resolved: dict[str, str] = {}

    @classmethod
    def open(cls, agent: str, key: str, source_format: str, recorded_at: datetime) -> SessionKey:
        event = cls.Opened(
            originator_topic=get_topic(cls),
            originator_id=session_key_id(agent, key),
            originator_version=1,
            timestamp=recorded_at,
            event_key="opened",
            agent=agent,
            source_format=source_format,
            session_key=key,
        )
        return start_stream(event, SessionKey)

    def bind(
        self,
        external_id: str,
        hook: str,
        record_key: str,
        source_format: str,
        recorded_at: datetime,
        *,
        authoritative: bool,
    ) -> int:
        """Let the key name ``external_id``. ``authoritative`` (``session_start``,
        ``session_end.nextSessionId``): even a session the key moved on from (a resume);
        otherwise such a session is not bound again. Returns the events appended."""
        key = f"bound:{record_key}"
        if external_id == self.current or key in self.seen_keys:
            return 0
        if not authoritative and external_id in self.replaced:
            return 0
        self._append(
            self.Bound, key, record_key, source_format, recorded_at,
            external_id=external_id, previous=self.current, hook=hook,
        )
        return 1

    def resolve(
        self, hook_key: str, source_format: str, recorded_at: datetime
    ) -> tuple[str, bool]:
        """The session the hook record ``hook_key`` belongs to: the one of its earlier
        resolution, else the one the key names now, else the key itself. Returns
        (external id, whether a ``Resolved`` was appended)."""
        if hook_key in self.resolved:
            return self.resolved[hook_key], False
        external = self.current if self.current is not None else self.session_key
        self._append(
            self.Resolved, f"resolved:{hook_key}", hook_key, source_format, recorded_at,
            hook_key=hook_key, external_id=external, bound=self.current is not None,
        )
        return external, True

    def _append(
        self,
        cls: type[SessionKey.Event],
        key: str,
        record_key: str,
        source_format: str,
        recorded_at: datetime,
        **data: object,
    ) -> None:
        event = cls(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=recorded_at,
            event_key=key,
            agent=self.agent,
            source_format=source_format,
            record_key=record_key,
            **data,
        )
        event = seal(self.head_digest, event)
        event.mutate(self)
        self.pending_events.append(event)

    def apply_event(self, event: LedgerEvent) -> None:
        self.seen_keys.add(event.event_key)
        self.head_digest = event.digest
        if isinstance(event, SessionKey.Bound):
            if event.previous is not None:
                self.replaced.add(event.previous)
            self.replaced.discard(event.external_id)
            self.current = event.external_id
        elif isinstance(event, SessionKey.Resolved):
            self.resolved[event.hook_key] = event.external_id
