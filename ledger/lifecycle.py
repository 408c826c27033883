"""Session lifecycle states and the transitions people may ask for.

Observed agent facts are never refused (the agent already did it); they move the
state as DESIGN.md maps them. Commands from people (pause, resume, terminate,
archive, fork) are validated against :data:`COMMAND_TRANSITIONS`. :class:`Liveness`
is the part of a session's state the liveness jobs (:mod:`ledger.jobs`) measure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class SessionStatus(StrEnum):
    CREATED = "CREATED"
    CONNECTING = "CONNECTING"
    ACTIVE = "ACTIVE"
    WAITING = "WAITING"
    PROCESSING = "PROCESSING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TERMINATED = "TERMINATED"
    ARCHIVED = "ARCHIVED"


ENDED_STATES = frozenset(
    {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.TERMINATED, SessionStatus.ARCHIVED}
)
"""States in which new observed activity reopens the session with an explicit event."""

_LIVE = frozenset(
    {
        SessionStatus.CREATED,
        SessionStatus.CONNECTING,
        SessionStatus.ACTIVE,
        SessionStatus.WAITING,
        SessionStatus.PROCESSING,
    }
)

COMMAND_TRANSITIONS: dict[str, dict[SessionStatus, SessionStatus]] = {
    "pause": {s: SessionStatus.PAUSED for s in _LIVE},
    "resume": {SessionStatus.PAUSED: SessionStatus.ACTIVE},
    "terminate": {s: SessionStatus.TERMINATED for s in (*_LIVE, SessionStatus.PAUSED)},
    "archive": {
        s: SessionStatus.ARCHIVED
        for s in (SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.TERMINATED)
    },
}
"""command -> {from state: to state}. Anything not listed is an invalid transition."""

COMMAND_TRANSITIONS["fork"] = {s: s for s in SessionStatus}
"""A fork leaves its parent where it is; it may be taken from any state."""

DECISION_KINDS = frozenset(
    {"JobDecided", "BatchClosed", "TimedOut", "ActivitiesAttached", "Archived", "CommandApplied",
     "ForkedFrom", "Summarised"}
)
"""Events written by the ledger's jobs and operators, not observed: never activity."""

NOT_ACTIVITY = DECISION_KINDS | {"Opened", "Reopened", "CwdLearned"}
"""Event kinds whose ledger time is not the agent's activity in a session's times (the
read models' ``first/last_activity_recorded_at``): the ledger's own events
(:data:`DECISION_KINDS`: liveness jobs, operator commands and forks, summaries),
``Reopened`` and ``CwdLearned`` (derived from the fact that caused them, at the same
times) and
``Opened`` (the stream's creation: in an observed session its first fact follows at the
same time; in a fork it is the time of the fork)."""

_WHO = {
    "idle_timeout": "the idle timeout job (idle_timeout)",
    "archive_after": "the archive job (archive_after)",
}


def _who(decider: str) -> str:
    """Who ``decider`` (a liveness rule or an operator's command) names, for a reason."""
    return _WHO.get(decider) or f"an operator ({decider})"


BATCH_ACTIVITY = frozenset(
    {"AssistantReplied", "ToolCallStarted", "ToolCallCompleted", "PermissionRequested"}
)
"""Facts that belong inside a prompt batch; outside an open one they are unattached."""


@dataclass
class Liveness:
    """What the liveness jobs measure, evolved from the session's events (no clock).

    ``last_source_at``: the latest ``occurred_at`` (source clock) of any observed event;
    ``last_recorded_at``: the latest ledger ``timestamp`` of one (the fallback for a
    session whose source has no clock); ``last_activity_version``: the stream version of
    the latest observed event. ``unattached``: versions of batch activity recorded while
    no batch was open (after the latest batch's turn ended, or before the first prompt),
    with their tool calls and failures, until a job attaches them or the next prompt opens
    a batch: then they stay where they were recorded (in the batch whose turn had ended,
    or before the first prompt, batch 0), as a transcript's facts do when it is imported
    after the hooks, so the batches do not depend on whether a job ran before that prompt.
    """

    last_source_at: datetime | None = None
    last_recorded_at: datetime | None = None
    last_activity_version: int = 0
    unattached: list[int] = field(default_factory=list)
    unattached_tool_use_ids: list[str] = field(default_factory=list)
    unattached_errors: int = 0
    first_unattached_at: datetime | None = None
    unattached_batch: int = 0
    """The batch :attr:`unattached` was recorded in (the session's latest batch then)."""
    ended_by: str | None = None
    """Why the session last ended when a job or an operator ended it (``idle_timeout``,
    ``terminate``, …); None when the agent ended it or it is live."""
    archived_by: str | None = None
    """Who archived the ended session: ``archive_after`` (the archive job) or
    ``archive`` (an operator's command); None when it is not archived."""
    restarted_at: datetime | None = None
    """Ledger time of the last operator command that moved the session into a live state
    (``resume``): the idle clock restarts there (:attr:`idle_since`)."""
    restarted_version: int = 0
    """Stream version of that command."""

    def reopen_note(self) -> str:
        """Text added to a ``Reopened`` reason: who archived the session, if it is
        archived, and who ended it, if not the agent (``" by the archive job
        (archive_after), after the idle timeout job (idle_timeout) ended it; activity
        resumed"``)."""
        note = ""
        if self.archived_by:
            note = f" by {_who(self.archived_by)}"
            if self.ended_by:
                note += f", after {_who(self.ended_by)} ended it"
        elif self.ended_by:
            note = f" by {_who(self.ended_by)}"
        if self.ended_by == "idle_timeout":
            note += "; activity resumed"
        return note

    @property
    def last_activity_at(self) -> datetime | None:
        """The latest activity: the source clock where the session has one."""
        return self.last_source_at or self.last_recorded_at

    @property
    def idle_since(self) -> datetime | None:
        """Idle time is measured from this: the later of :attr:`last_activity_at` and
        :attr:`restarted_at` (an operator's resume restarts the clock)."""
        return self.restarted_at if self._restarted_last() else self.last_activity_at

    @property
    def idle_version(self) -> int:
        """The stream version :attr:`idle_since` is of (a job decision's key names it)."""
        return self.restarted_version if self._restarted_last() else self.last_activity_version

    def _restarted_last(self) -> bool:
        last = self.last_activity_at
        return self.restarted_at is not None and (last is None or self.restarted_at > last)

    def apply(self, session: Any, event: Any) -> None:
        kind = type(event).__name__
        if self.unattached and session.batch != self.unattached_batch:
            self._settle()  # a prompt opened the next batch: they stay in theirs
        if kind in DECISION_KINDS or kind == "Reopened":
            self._decided(session, event, kind)
            return
        self.last_activity_version = event.originator_version
        if kind == "Ended" and event.status is SessionStatus.COMPLETED:
            self.ended_by = None  # the agent ended it (a TERMINATED or ARCHIVED one is kept)
        if event.occurred_at is not None and (
            self.last_source_at is None or event.occurred_at > self.last_source_at
        ):
            self.last_source_at = event.occurred_at
        if self.last_recorded_at is None or event.timestamp > self.last_recorded_at:
            self.last_recorded_at = event.timestamp
        # a fact an earlier batch holds (a transcript's call imported after the hooks'
        # later prompts, a call completed after the next prompt) is in its batch already
        if kind in BATCH_ACTIVITY and not session.batch_open and event.batch == session.batch:
            self.unattached.append(event.originator_version)
            self.unattached_batch = session.batch
            self.first_unattached_at = self.first_unattached_at or event.occurred_at
            if kind == "ToolCallStarted":
                self.unattached_tool_use_ids.append(event.tool_use_id)
            if kind == "ToolCallCompleted" and event.is_error:
                self.unattached_errors += 1

    def _settle(self) -> None:
        """Nothing is unattached any more (attached by a job, or followed by a prompt)."""
        self.unattached.clear()
        self.unattached_tool_use_ids.clear()
        self.unattached_errors = 0
        self.first_unattached_at = None

    def _decided(self, session: Any, event: Any, kind: str) -> None:
        if kind in ("BatchClosed", "TimedOut"):
            session.batch_open = False
        if kind == "Reopened":
            self.ended_by = self.archived_by = None
        if kind == "TimedOut":
            session.ended_at = event.measured_from or event.decided_at
            self.ended_by = "idle_timeout"
        if kind == "Archived":
            self.archived_by = "archive_after"
        if kind == "ActivitiesAttached":
            self._settle()
        if kind == "CommandApplied" and event.to_status is SessionStatus.ARCHIVED:
            self.archived_by = event.command
        elif kind == "CommandApplied" and event.to_status in ENDED_STATES:
            self.ended_by = self.ended_by or event.command
            if session.ended_at is None:
                session.ended_at = event.timestamp
        moved = kind == "CommandApplied" and event.to_status != event.from_status
        if moved and event.to_status not in ENDED_STATES:
            # resume, or a new fork left PAUSED (its copies of an ended parent's history
            # ended it): not ended, whatever ended it before
            self.ended_by = self.archived_by = None
            session.ended_at = None
        if moved and event.to_status in _LIVE:
            # resume: live again from now, whatever idled it before
            self.restarted_at = event.timestamp
            self.restarted_version = event.originator_version
