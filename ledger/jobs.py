"""Liveness jobs as aggregate commands: decide from a session's own state and a given
``now``, append the decision with its evidence, or do nothing.

Rules (thresholds in :class:`JobConfig`, seconds):

* ``idle_batch`` — an open prompt batch with no activity for 5 min is closed
  (:class:`~ledger.session.Session.BatchClosed`);
* ``unbatched_activity`` — batch activity (assistant replies, tool calls, permission
  requests) recorded while no batch was open is attached to the latest batch, or to a
  new recovery batch when the session has none yet
  (:class:`~ledger.session.Session.ActivitiesAttached`), once idle for the batch threshold
  (activity a later prompt followed is not unattached: :class:`~ledger.lifecycle.Liveness`);
* ``idle_session`` — a live session (not PAUSED) with no activity for 1 h is completed
  with reason ``idle_timeout`` (:class:`~ledger.session.Session.TimedOut`);
* ``archive_after`` — a session ended more than N days (default 30) ago is archived
  (:class:`~ledger.session.Session.Archived`).

Idle time is measured from :attr:`ledger.lifecycle.Liveness.idle_since`: the latest
activity the ledger knows (on the source's clock where the session has one), or the
operator's resume when that is later (the clock restarts there; the decision's
``measured_from`` is then the ``CommandApplied``'s timestamp).
Each decision's event key is derived from the rule and the evidence (the last stream
version seen), so running a job twice appends nothing twice. ``now`` is always passed
in: nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ledger.envelope import seal
from ledger.lifecycle import ENDED_STATES, SessionStatus
from ledger.session import Session

S = SessionStatus
SOURCE_FORMAT = "hookledger.job"


@dataclass(frozen=True)
class JobConfig:
    """Thresholds of the liveness rules, in seconds (``archive_after_days`` in days)."""

    idle_batch_s: int = 5 * 60
    idle_session_s: int = 60 * 60
    archive_after_days: int = 30

    @property
    def archive_after_s(self) -> int:
        return self.archive_after_days * 24 * 3600


def append_decision(
    agg: Session,
    cls: type[Session.Event],
    key: str,
    recorded_at: datetime,
    source_format: str,
    **data: Any,
) -> bool:
    """Append one ledger-made event (job decision or command) to ``agg`` unless ``key`` is
    already in the stream. ``status`` and ``batch`` default to the current ones."""
    if key in agg.seen_keys:
        return False
    data.setdefault("status", agg.status)
    data.setdefault("batch", agg.batch)
    event = cls(
        originator_id=agg.id,
        originator_version=agg.version + 1,
        timestamp=recorded_at,
        event_key=key,
        agent=agg.agent,
        source_format=source_format,
        **data,
    )
    event = seal(agg.head_digest, event)
    event.mutate(agg)
    agg.pending_events.append(event)
    return True


def _idle_for(agg: Session, now: datetime) -> float | None:
    last = agg.liveness.idle_since
    return None if last is None else (now - last).total_seconds()


def _evidence(
    agg: Session, rule: str, threshold_s: int, now: datetime, seen_position: int | None
) -> dict[str, Any]:
    return {
        "rule": rule,
        "threshold_s": threshold_s,
        "measured_from": agg.liveness.idle_since,
        "last_version": agg.liveness.last_activity_version,
        "last_position": seen_position,
        "decided_at": now,
    }


def apply_liveness_rules(
    agg: Session,
    now: datetime,
    config: JobConfig,
    recorded_at: datetime,
    seen_position: int | None = None,
) -> list[str]:
    """Run every rule on one session; returns the names of the rules that decided.

    ``seen_position``: the notification position of the read model that nominated the
    session (recorded as evidence). Rules run in order: attach unbatched activity, close
    the idle batch, time the session out, archive it.
    """
    decided: list[str] = []
    idle = _idle_for(agg, now)
    if idle is None:
        return decided
    live = agg.status not in ENDED_STATES and agg.status is not S.PAUSED
    version = agg.liveness.idle_version
    if idle >= config.idle_batch_s and agg.liveness.unattached:
        lv = agg.liveness
        recovery = agg.batch == 0
        if append_decision(
            agg,
            Session.ActivitiesAttached,
            f"job:unbatched_activity:{version}",
            recorded_at,
            SOURCE_FORMAT,
            batch=1 if recovery else agg.batch,
            recovery=recovery,
            versions=tuple(lv.unattached),
            tool_use_ids=tuple(lv.unattached_tool_use_ids),
            tool_errors=lv.unattached_errors,
            first_activity_at=lv.first_unattached_at,
            **_evidence(agg, "unbatched_activity", config.idle_batch_s, now, seen_position),
        ):
            decided.append("unbatched_activity")
    closing = idle >= config.idle_batch_s and agg.batch_open and agg.batch > 0
    if closing and append_decision(
        agg,
        Session.BatchClosed,
        f"job:idle_batch:{agg.batch}:{version}",
        recorded_at,
        SOURCE_FORMAT,
        **_evidence(agg, "idle_batch", config.idle_batch_s, now, seen_position),
    ):
        decided.append("idle_batch")
    if (
        live
        and idle >= config.idle_session_s
        and append_decision(
            agg,
            Session.TimedOut,
            f"job:idle_session:{version}",
            recorded_at,
            SOURCE_FORMAT,
            status=S.COMPLETED,
            **_evidence(agg, "idle_session", config.idle_session_s, now, seen_position),
        )
    ):
        decided.append("idle_session")
    ended_at = agg.ended_at
    if (
        agg.status in ENDED_STATES
        and agg.status is not S.ARCHIVED
        and ended_at is not None
        and (now - ended_at).total_seconds() >= config.archive_after_s
    ):
        evidence = _evidence(agg, "archive_after", config.archive_after_s, now, seen_position)
        evidence["measured_from"] = ended_at
        if append_decision(
            agg,
            Session.Archived,
            f"job:archive_after:{agg.version}",
            recorded_at,
            SOURCE_FORMAT,
            status=S.ARCHIVED,
            **evidence,
        ):
            decided.append("archive_after")
    return decided


def decide(ledger: Any, sid: UUID, command: Callable[[Session], Any]) -> tuple[Any, list[int]]:
    """Load session ``sid``, run ``command(aggregate)`` and save what it appended
    (:meth:`ledger.app.Ledger.update`: write lock, reload and retry on a clash).

    Returns (what ``command`` returned, the appended notification positions).
    Raises :class:`LookupError` when there is no such session.
    """
    return ledger.update(sid, command)  # type: ignore[no-any-return]


def idle_cutoff(now: datetime, seconds: int) -> datetime:
    """``now`` minus ``seconds``: activity at or before it is idle for the rule."""
    return now - timedelta(seconds=seconds)
