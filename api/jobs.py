"""The liveness job runner: reads the read models for candidate sessions and runs the
rules of :mod:`ledger.jobs` on each (the decisions themselves are aggregate commands).

Run by the server every :data:`INTERVAL_S` seconds (``api.app.Background``) and by
``hookledger jobs run --once [--now ISO]`` (cron, tests). The read models only nominate
sessions; each aggregate re-checks the rule against its own state, so a lagging read
model can cause no wrong decision, only a later one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import func, or_, select

from ledger.jobs import JobConfig, apply_liveness_rules, decide
from ledger.lifecycle import ENDED_STATES, SessionStatus
from projections.base import iso
from projections.schema import session_times

INTERVAL_S = 60.0


@dataclass
class JobReport:
    """What one run did: sessions examined, decisions by rule, appended positions."""

    now: str
    examined: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    positions: list[int] = field(default_factory=list)
    sessions: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "examined": self.examined,
            "decisions": self.decisions,
            "appended": len(self.positions),
            "sessions": self.sessions,
        }


def candidates(services: Any, now: datetime, config: JobConfig) -> list[tuple[str, int]]:
    """(session id, head position) of sessions a rule may apply to: live ones idle for
    at least the batch threshold; ended ones as idle whose latest batch is still open or
    that have activity no batch holds yet (``sessions.batch_open``, ``unattached_count``:
    a session that ended without a prompt, or after activity that followed its last
    turn's end, gets its recovery or latest batch then, not when it is archived); and
    ended ones past the archive threshold."""
    t = services.models.table("sessions")
    ended = [s.value for s in ENDED_STATES]
    not_archived = [s for s in ended if s != SessionStatus.ARCHIVED.value]
    last = session_times(t)["last_activity_at"]  # the agent's: a summary restarts no clock
    idle_enough = last <= iso(now - timedelta(seconds=config.idle_batch_s))
    # live and PAUSED sessions: an open batch or unattached activity may be due (a PAUSED
    # one is never timed out; the aggregate checks that)
    idle = t.c.status.not_in(ended) & idle_enough
    unsettled = (
        t.c.status.in_(not_archived)
        & (t.c.batch_open | (t.c.unattached_count > 0))
        & idle_enough
    )
    old_ended = t.c.status.in_(not_archived) & (
        func.coalesce(t.c.ended_at, last)
        <= iso(now - timedelta(seconds=config.archive_after_s))
    )
    query = (
        select(t.c.id, t.c.head_position)
        .where(or_(idle, unsettled, old_ended))
        .order_by(t.c.id)
    )
    with services.models.engine.connect() as conn:
        return [(r[0], int(r[1])) for r in conn.execute(query)]


def run_jobs(
    services: Any,
    now: datetime | None = None,
    config: JobConfig | None = None,
    stop: threading.Event | None = None,
) -> JobReport:
    """Catch the read models up, then run the liveness rules on every candidate session.

    ``now`` (UTC; default: the wall clock) is the time the rules measure idle time to.
    ``stop``: once set, no further session is examined (the server is shutting down; a
    first run over a large imported store decides for every session, a minute and
    more). Each decision is its own transaction and the sessions not examined are
    nominated again by the next run, so stopping early loses nothing.
    """
    now = now or datetime.now(UTC)
    config = config or JobConfig(archive_after_days=services.settings.archive_after_days)
    services.runner.catch_up()
    report = JobReport(now=iso(now) or "")
    for sid, position in candidates(services, now, config):
        if stop is not None and stop.is_set():
            break
        report.examined += 1
        rules, positions = decide(
            services.ledger,
            UUID(sid),
            lambda agg, p=position: apply_liveness_rules(agg, now, config, datetime.now(UTC), p),
        )
        for rule in rules:
            report.decisions[rule] = report.decisions.get(rule, 0) + 1
        if rules:
            report.sessions[sid] = rules
        report.positions.extend(positions)
    if report.positions:
        services.runner.catch_up()
    return report
