"""The ``Ledger`` application: appends observations to the event store, exactly once.

Writes go through :meth:`Ledger.record`. Observations are grouped per session; each
session's aggregate is loaded (or opened), every observation is applied (duplicates
by idempotency key append nothing) and the new events are saved in one transaction
per chunk. Concurrent writers of the same session are serialised in-process by a lock
and across processes by eventsourcing's optimistic concurrency (a version clash raises
``IntegrityError``; the session is reloaded and the observations applied again, which
is safe because they are idempotent).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, Mapper, Recording
from eventsourcing.utils import retry

from ledger.mapper import OrjsonTranscoder, PydanticMapper
from ledger.observation import Observation, Rejected
from ledger.quarantine import Quarantine, quarantine_id
from ledger.session import Session

MAX_ATTEMPTS = 50
RETRY_WAIT_S = 0.005
CHUNK_EVENTS = 2000
"""Events per save() when one session receives many (an import of a large file)."""


@dataclass
class RecordResult:
    """What one :meth:`Ledger.record` call did (counts are events/observations)."""

    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    sessions_created: int = 0
    positions: list[int] = field(default_factory=list)
    sessions: list[UUID] = field(default_factory=list)

    def add(self, other: RecordResult) -> None:
        self.appended += other.appended
        self.duplicates += other.duplicates
        self.rejected += other.rejected
        self.sessions_created += other.sessions_created
        self.positions.extend(other.positions)
        self.sessions.extend(s for s in other.sessions if s not in self.sessions)


class Ledger(Application[UUID]):
    """Event-sourced ledger of agent sessions (eventsourcing ``Application``).

    Construct with the env from :meth:`ledger.config.Settings.event_store_env`.
    """

    name = "hookledger"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._locks = [threading.Lock() for _ in range(64)]
        self._listeners: list[Callable[[int], None]] = []

    def construct_mapper(self) -> Mapper[UUID]:
        return PydanticMapper(transcoder=OrjsonTranscoder())

    def add_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(max_position)`` after every save of this process."""
        self._listeners.append(listener)

    def _notify(self, recordings: list[Recording[UUID]]) -> None:
        if not recordings:
            return
        nudge = getattr(self.recorder, "nudge", None)
        if nudge is not None:
            nudge()
        top = max(r.notification.id for r in recordings)
        for listener in list(self._listeners):
            listener(top)

    # -- writing --------------------------------------------------------------------

    def record(self, items: Iterable[Observation | Rejected]) -> RecordResult:
        """Append every new fact in ``items``; duplicates and bad input never raise.

        Returns a :class:`RecordResult` with the appended notification positions.
        """
        by_session: dict[UUID, list[Observation]] = {}
        by_source: dict[str, list[Rejected]] = {}
        for item in items:
            if isinstance(item, Rejected):
                by_source.setdefault(item.source, []).append(item)
            else:
                by_session.setdefault(item.session.id, []).append(item)
        result = RecordResult()
        for sid, observations in by_session.items():
            result.add(self._record_session(sid, observations))
        for source, rejected in by_source.items():
            result.add(self._record_rejected(source, rejected))
        return result

    def _record_session(self, sid: UUID, observations: list[Observation]) -> RecordResult:
        result = RecordResult(sessions=[sid])
        appended_keys: set[str] = set()

        def attempt() -> None:
            agg = self._get(sid, Session)
            now = datetime.now(UTC)
            opening = agg is None
            if agg is None:
                agg = Session.open(observations[0], now)
            for obs in observations:
                if agg.observe(obs, now):
                    appended_keys.add(obs.key)
                if len(agg.pending_events) >= CHUNK_EVENTS:
                    self._save(agg, result)
                    result.sessions_created |= opening
            self._save(agg, result)
            result.sessions_created |= opening

        self._retrying(sid, attempt)
        result.appended = len(result.positions)
        result.duplicates = len(observations) - len(appended_keys)
        return result

    def _record_rejected(self, source: str, rejected: list[Rejected]) -> RecordResult:
        qid = quarantine_id(source)
        result = RecordResult()

        def attempt() -> None:
            agg = self._get(qid, Quarantine)
            now = datetime.now(UTC)
            if agg is None:
                agg = Quarantine.open(source, now)
            for item in rejected:
                agg.reject(item, now)
            self._save(agg, result)

        self._retrying(qid, attempt)
        result.rejected = len(rejected)
        result.appended = len(result.positions)
        return result

    def _retrying(self, stream_id: UUID, attempt: Callable[[], None]) -> None:
        """Run ``attempt`` under the stream's in-process lock; on a version clash with
        another writer (``IntegrityError``) wait and run it again. Each attempt reloads
        the aggregate (the cache fast-forwards), and observations are idempotent, so a
        partly saved earlier attempt is never written twice."""
        with self._locks[stream_id.int % len(self._locks)]:
            retry(IntegrityError, max_attempts=MAX_ATTEMPTS, wait=RETRY_WAIT_S)(attempt)()

    def _save(self, agg: Any, result: RecordResult) -> None:
        if agg.pending_events:
            recordings = self.save(agg)
            result.positions.extend(r.notification.id for r in recordings)

    def _get(self, aggregate_id: UUID, cls: type[Any]) -> Any:
        try:
            agg = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None
        if not isinstance(agg, cls):
            raise TypeError(f"stream {aggregate_id} holds a {type(agg).__name__}, not {cls.__name__}")
        return agg

    # -- reading --------------------------------------------------------------------

    def max_position(self) -> int:
        """Highest notification id (global position) in the log; 0 when empty."""
        return self.recorder.max_notification_id() or 0
