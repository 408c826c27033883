"""Operator commands on a session: pause, resume, terminate, archive and fork.

A command is validated against :data:`ledger.lifecycle.COMMAND_TRANSITIONS`; an invalid
one raises :class:`InvalidTransition` (naming the current state and what is allowed)
and appends nothing. A valid one appends one
:class:`~ledger.session.Session.CommandApplied` (``command``, ``from_status``,
``to_status``, ``by``, ``reason``). Observed agent facts are never refused; only
people's commands are.

Fork creates a new session (``parent_id`` = the parent) whose stream is: ``Opened``,
:class:`~ledger.session.Session.ForkedFrom` (parent id, version and position), then a
copy of the parent's events 2 .. ``at_version`` (same classes, payloads and event keys,
re-chained) and a ``CommandApplied(fork)`` that leaves the fork PAUSED, waiting for
someone to resume it. The parent records ``CommandApplied(fork)`` with ``fork_id``
(its status is unchanged).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.persistence import IntegrityError

from ledger.envelope import seal, start_stream
from ledger.jobs import append_decision, decide
from ledger.lifecycle import COMMAND_TRANSITIONS, SessionStatus
from ledger.observation import SESSION_NAMESPACE
from ledger.session import Session

SOURCE_FORMAT = "hookledger.command"
_CHUNK_EVENTS = 2000


class UnknownCommand(ValueError):
    """Not one of :data:`ledger.lifecycle.COMMAND_TRANSITIONS`."""


class InvalidTransition(ValueError):
    """The command is not allowed from the session's current state."""

    def __init__(self, command: str, status: SessionStatus) -> None:
        self.command = command
        self.status = status
        self.allowed_from = sorted(s.value for s in COMMAND_TRANSITIONS[command])
        self.allowed_commands = sorted(c for c, t in COMMAND_TRANSITIONS.items() if status in t)
        super().__init__(
            f"cannot {command} a session that is {status.value}: {command} is allowed from "
            f"{', '.join(self.allowed_from)}; from {status.value} the allowed commands are "
            f"{', '.join(self.allowed_commands) or 'none'}"
        )


@dataclass
class CommandResult:
    """``from_status``/``to_status`` of the session; ``fork_id`` for a fork; the appended
    notification positions; ``appended`` False when the same command key was applied
    before (idempotent retry)."""

    session_id: UUID
    command: str
    from_status: SessionStatus
    to_status: SessionStatus
    positions: list[int]
    appended: bool = True
    fork_id: UUID | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "command": self.command,
            "from_status": self.from_status.value,
            "to_status": self.to_status.value,
            "appended": self.appended,
            "positions": self.positions,
            **({"fork_id": str(self.fork_id)} if self.fork_id else {}),
        }


def check(command: str, status: SessionStatus) -> SessionStatus:
    """The state ``command`` moves a session in ``status`` to.

    Raises :class:`UnknownCommand` or :class:`InvalidTransition`."""
    if command not in COMMAND_TRANSITIONS:
        raise UnknownCommand(
            f"unknown command {command!r}; known: {', '.join(COMMAND_TRANSITIONS)}"
        )
    target = COMMAND_TRANSITIONS[command].get(status)
    if target is None:
        raise InvalidTransition(command, status)
    return target


def apply_command(
    agg: Session,
    command: str,
    key: str,
    recorded_at: datetime,
    by: str | None = None,
    reason: str | None = None,
    fork_id: UUID | None = None,
) -> tuple[SessionStatus, SessionStatus, bool]:
    """Validate and append ``CommandApplied`` to ``agg``; returns (from, to, appended).

    ``key``: the command's idempotency key (a retried request appends nothing; it is
    checked before the transition, so a retry after success is not refused)."""
    event_key = f"command:{command}:{key}"
    if event_key in agg.seen_keys:
        return agg.status, agg.status, False
    source = agg.status
    target = check(command, source)
    append_decision(
        agg,
        Session.CommandApplied,
        event_key,
        recorded_at,
        SOURCE_FORMAT,
        status=target,
        command=command,
        from_status=source,
        to_status=target,
        by=by,
        reason=reason,
        fork_id=fork_id,
    )
    return source, target, True


def run_command(
    ledger: Any,
    sid: UUID,
    command: str,
    key: str,
    recorded_at: datetime,
    by: str | None = None,
    reason: str | None = None,
) -> CommandResult:
    """Apply a state command (not fork) to session ``sid`` and save it.

    Raises :class:`LookupError` (no such session), :class:`UnknownCommand`,
    :class:`InvalidTransition` (nothing appended)."""
    if command == "fork":
        raise UnknownCommand("fork makes a new session: use fork_session()")
    if command not in COMMAND_TRANSITIONS:
        raise UnknownCommand(
            f"unknown command {command!r}; known: {', '.join(COMMAND_TRANSITIONS)}"
        )
    (src, dst, appended), positions = decide(
        ledger, sid, lambda agg: apply_command(agg, command, key, recorded_at, by, reason)
    )
    return CommandResult(sid, command, src, dst, positions, appended)


def fork_id_for(agent: str, parent_external_id: str, key: str) -> tuple[UUID, str]:
    """(aggregate id, external id) of the fork made by the command with ``key``."""
    external = f"{parent_external_id}/fork-{key}"
    return uuid5(SESSION_NAMESPACE, f"{agent}:{external}"), external


def fork_session(
    ledger: Any,
    parent_id: UUID,
    key: str,
    recorded_at: datetime,
    *,
    at_version: int | None = None,
    at_position: int | None = None,
    by: str | None = None,
    reason: str | None = None,
) -> CommandResult:
    """Fork ``parent_id`` at stream version ``at_version`` (default: its head).

    ``at_position`` is recorded as the parent's notification position of that version.
    Raises :class:`LookupError` (no such session) or :class:`ValueError` (version out of
    range). Idempotent per ``key``: a retry returns the fork already made."""
    parent = ledger.session(parent_id)
    if parent is None:
        raise LookupError(f"no such session: {parent_id}")
    at = parent.version if at_version is None else at_version
    if not 1 <= at <= parent.version:
        raise ValueError(f"version {at} is outside the session's history (1 .. {parent.version})")
    child_id, external = fork_id_for(parent.agent, parent.external_id, key)
    if ledger.session(child_id) is None:
        history = list(ledger.events.get(parent_id, lte=at))
        # IntegrityError: a concurrent retry with the same key made this fork first
        with contextlib.suppress(IntegrityError):
            _save_fork(
                ledger, parent, history, child_id, external, at, at_position, recorded_at, by
            )
    (src, dst, appended), positions = decide(
        ledger,
        parent_id,
        lambda agg: apply_command(agg, "fork", key, recorded_at, by, reason, fork_id=child_id),
    )
    return CommandResult(parent_id, "fork", src, dst, positions, appended, child_id)


def _save_fork(
    ledger: Any,
    parent: Session,
    history: list[Any],
    child_id: UUID,
    external: str,
    at: int,
    at_position: int | None,
    recorded_at: datetime,
    by: str | None,
) -> None:
    opened = history[0]
    first = opened.model_copy(
        update={
            "originator_id": child_id,
            "external_id": external,
            "parent_id": parent.id,
            "timestamp": recorded_at,
            "digest": "",
        }
    )
    child = start_stream(first, Session)
    append_decision(
        child,
        Session.ForkedFrom,
        f"forked:{parent.id}:{at}",
        recorded_at,
        SOURCE_FORMAT,
        parent_id=parent.id,
        parent_version=at,
        parent_position=at_position,
        by=by,
    )

    def save() -> None:
        ledger.save(child)

    for event in history[1:]:
        copy = event.model_copy(
            update={
                "originator_id": child_id,
                "originator_version": child.version + 1,
                "digest": "",
            }
        )
        copy = seal(child.head_digest, copy)
        copy.mutate(child)
        child.pending_events.append(copy)
        if len(child.pending_events) >= _CHUNK_EVENTS:
            save()
    source = child.status
    append_decision(
        child,
        Session.CommandApplied,
        f"command:fork:{parent.id}:{at}",
        recorded_at,
        SOURCE_FORMAT,
        status=SessionStatus.PAUSED,
        command="fork",
        from_status=source,
        to_status=SessionStatus.PAUSED,
        by=by,
        reason=f"forked from {parent.id} at version {at}",
    )
    save()
