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
  key itself (what every such hook did before these streams existed);
* :class:`SessionKey.PromptHeld` — a hook started a new session with a first prompt
  (OpenClaw ``/new text``: the command belongs to the session it ends, ``text`` to the
  next one, whose id no hook has named yet); the prompt waits in the key's stream;
* :class:`SessionKey.PromptPlaced` — a held prompt went to session ``external_id``,
  with the first later hook of the key that is recorded on the session the key names
  when that is not the session the command ended (the new session's
  ``session_start``, or its first agent hook), or that names only the key (a new
  message: no new session came, e.g. OpenClaw refused the reset, or the new session's
  hooks were recorded before the command). The ledger records the prompt there, as a
  ``PromptSubmitted`` keyed ``prompt_key`` (after that hook's ``Started``, before its
  other facts), and again, changing nothing, when either hook is delivered again.

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
from ledger.observation import SESSION_NAMESPACE, Observation, SessionRef


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

    class PromptHeld(Event):
        """The hook record ``hook_key`` ended session ``ended`` and carried the first
        prompt of the session the key names next: ``PromptSubmitted{text, prompt_kind,
        prompt_id}`` keyed ``prompt_key``, ``prompt_hash`` its text hash (how it meets
        the transcript's copy of the prompt)."""

        hook_key: str
        ended: str
        prompt_key: str
        text: str
        prompt_kind: str
        prompt_id: str | None = None
        prompt_hash: str | None = None

    class PromptPlaced(Event):
        """The prompt held for the hook record ``hook_key`` went to session
        ``external_id``, with the hook record ``record_key``."""

        hook_key: str
        external_id: str

    def __init__(self, session_key: str, agent: str) -> None:
        self.session_key = session_key
        self.agent = agent
        self.head_digest = ""
        self.seen_keys: set[str] = set()
        self.current: str | None = None
        self.replaced: set[str] = set()
        self.resolved: dict[str, str] = {}
        self.prompts: dict[str, SessionKey.PromptHeld] = {}  # by hook key
        self.waiting: list[str] = []  # hook keys of held prompts not placed yet
        self.placed: dict[str, str] = {}  # hook key -> the session its prompt went to
        self.placed_by: dict[str, list[str]] = {}  # placing record key -> hook keys

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

    def hold(
        self,
        hook_key: str,
        prompt_key: str,
        prompt: dict[str, str | None],
        source_format: str,
        occurred_at: datetime | None,
        recorded_at: datetime,
    ) -> None:
        """Keep the first prompt ``prompt`` (``text``, ``prompt_kind``, ``prompt_id``,
        ``prompt_hash``) of the hook record ``hook_key`` for the session the key names
        next (nothing for a hook held before). The session it ended is the one that
        hook was resolved to, else the one the key names."""
        if hook_key in self.prompts:
            return
        ended = self.resolved.get(hook_key) or self.current or self.session_key
        self._append(
            self.PromptHeld, f"held:{hook_key}", hook_key, source_format, recorded_at,
            hook_key=hook_key, ended=ended, prompt_key=prompt_key, occurred_at=occurred_at,
            **prompt,
        )

    def place(
        self,
        external_id: str,
        record_key: str,
        source_format: str,
        recorded_at: datetime,
        *,
        new_message: bool,
    ) -> None:
        """The hook record ``record_key`` was recorded on session ``external_id``: the
        waiting prompts go there when it is the session the key names and not the one
        their command ended, or, whatever the session, when ``new_message`` (the hook
        named only the key)."""
        if not new_message and external_id != self.current:
            return
        for hook_key in list(self.waiting):
            if new_message or self.prompts[hook_key].ended != external_id:
                self._append(
                    self.PromptPlaced, f"placed:{hook_key}", record_key, source_format,
                    recorded_at, hook_key=hook_key, external_id=external_id,
                )

    def prompts_of(self, record_key: str) -> list[Observation]:
        """The ``PromptSubmitted`` facts the hook record ``record_key`` brings: the prompts
        it placed, or its own held prompt once placed (empty while that waits)."""
        hook_keys = self.placed_by.get(record_key, [])
        if record_key in self.placed:
            hook_keys = [*hook_keys, record_key]
        return [self._prompt(k) for k in hook_keys]

    def _prompt(self, hook_key: str) -> Observation:
        external_id = self.placed[hook_key]
        held = self.prompts[hook_key]
        obs = Observation(
            SessionRef(self.agent, external_id),
            "PromptSubmitted",
            held.prompt_key,
            {"text": held.text, "prompt_id": held.prompt_id, "prompt_kind": held.prompt_kind},
            source_format=held.source_format,
            occurred_at=held.occurred_at,
            record_key=held.hook_key,
        )
        if held.prompt_hash is not None:
            obs.extra["hook_prompt_hash"] = held.prompt_hash
        return obs

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
        elif isinstance(event, SessionKey.PromptHeld):
            self.prompts[event.hook_key] = event
            self.waiting.append(event.hook_key)
        elif isinstance(event, SessionKey.PromptPlaced):
            self.waiting.remove(event.hook_key)
            self.placed[event.hook_key] = event.external_id
            self.placed_by.setdefault(event.record_key or "", []).append(event.hook_key)
