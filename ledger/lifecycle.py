"""Session lifecycle states and the transitions people may ask for.

Observed agent facts are never refused (the agent already did it); they move the
state as DESIGN.md maps them. Commands from people (pause, resume, terminate,
archive) are validated against :data:`COMMAND_TRANSITIONS`.
"""

from __future__ import annotations

from enum import StrEnum


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
