"""``sessions`` read model: one row per session with status, counts, tokens, cost, times.

Counts and tokens are the session's own: a subagent run is its own (child) session,
so summing over sessions counts nothing twice. Usage: per ``message_id`` the last
``UsageRecorded`` wins (``session_usage`` holds it; totals move by the difference).

Cost (USD, docs/cost.md): each usage row's ``cost_usd`` is computed from its own
model and tokens with the bundled price table (:mod:`projections.pricing`), None when
the model has no price; the session's ``cost_usd`` is the sum over its priced usage
(replace-not-add like the tokens) and ``unpriced_tokens`` counts the tokens of usage
with no price, so ``cost_usd`` is a lower bound when that is above 0.
``agent_cost_usd`` is the sum of the agent's own ``CostReported`` figures (None when
the agent reported none), kept beside the computed cost, never mixed into it.

Times: ``started_at`` / ``last_activity_at`` are the min / max of the source's clock;
``first_activity_recorded_at`` / ``last_activity_recorded_at`` the min / max ledger time
of the agent's activity (not the ledger's own summaries, job decisions, commands and
forks: :data:`ledger.lifecycle.NOT_ACTIVITY`); ``first_recorded_at`` /
``last_recorded_at`` the ledger times of the first and latest event of any kind. Queries
read a session's times through :func:`projections.schema.session_times`.

Liveness: ``batch_open`` and ``unattached_count`` follow
:class:`ledger.lifecycle.Liveness` (the session's latest prompt batch is open; batch
activity recorded while no batch was open, not yet attached by a job nor followed by the
next prompt), so the jobs runner can nominate an ended session that a rule still applies
to without loading every ended session's stream.

Subagent type: ``agent_type`` is what the session's ``Opened`` names (a subagent's
``.meta.json``, a hook's ``agent_type``); when it names none, a child session takes the
``subagent_type`` of the Claude Code ``Task``/``Agent`` call that spawned it: the parent's
``ToolCallStarted`` whose ``tool_use_id`` a ``LinkedToParent`` of the child names.
``session_subagent_calls`` keeps, per (parent, tool_use_id), the call's type and the
child linked to it, so either may come first in the log. Of several links (a resumed
subagent), the first one whose call names a type (by the later of link and call) wins.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ledger.lifecycle import BATCH_ACTIVITY, ENDED_STATES, NOT_ACTIVITY, SessionStatus
from ledger.observation import BATCH_OPENERS, CACHE_1H, TOKENS
from ledger.session import Session
from projections.base import Batch, Projection, event_time, iso, session_events
from projections.pricing import cost_usd
from projections.rows import RowCache

SUBAGENT_TOOLS = ("Task", "Agent")
"""Claude Code's tool that spawns a subagent (``Task``; ``Agent`` in later builds)."""


def subagent_type(e: Session.ToolCallStarted) -> str | None:
    """The ``subagent_type`` a :data:`SUBAGENT_TOOLS` call's input names (a non-empty
    string), else None."""
    if e.tool_name not in SUBAGENT_TOOLS or not isinstance(e.tool_input, dict):
        return None
    value = e.tool_input.get("subagent_type")
    return value if isinstance(value, str) and value else None


def usage_cost(e: Session.UsageRecorded) -> tuple[float | None, int]:
    """(``cost_usd`` or None, unpriced tokens) of one usage event (its 1-hour cache
    writes at the 1-hour rate)."""
    cost = cost_usd(
        e.model, e.input_tokens, e.output_tokens, e.cache_creation_input_tokens,
        e.cache_read_input_tokens, e.cache_creation_1h_input_tokens,
    )
    return cost, (0 if cost is not None else sum(getattr(e, t) for t in TOKENS))


_STATUS = {status: status.value for status in SessionStatus}
_CASES = (
    Session.PromptSubmitted, Session.ToolCallStarted, Session.ToolCallCompleted,
    Session.UsageRecorded, Session.CostReported, Session.Started, Session.Ended,
    Session.RunEnded, Session.Reopened, Session.TimedOut, Session.CommandApplied,
    Session.LinkedToParent, Session.CwdLearned,
)
"""The classes :meth:`SessionsProjection.apply_all` has a case for."""
_SPAN = ("started_at", "last_activity_at", "first_activity_recorded_at", "last_activity_recorded_at")
_TIMES = (*_SPAN, "last_recorded_at")
_KIND: dict[type, tuple[bool, bool, str | None]] = {}
"""Event class -> (whether it is one of :data:`_CASES`: the match is skipped when not;
whether it is the agent's activity: not one of :data:`ledger.lifecycle.NOT_ACTIVITY`;
its :func:`_liveness_role`)."""


def _kind(cls: type) -> tuple[bool, bool, str | None]:
    _KIND[cls] = found = (
        issubclass(cls, _CASES), cls.__name__ not in NOT_ACTIVITY, _liveness_role(cls)
    )
    return found


def _as_datetimes(row: dict[str, Any]) -> None:
    """A stored row's :data:`_SPAN` times as datetimes (they are compared with each
    event's time while a section is applied)."""
    for column in _SPAN:
        if type(value := row[column]) is str:
            row[column] = datetime.fromisoformat(value)


def _changed_row(rows: RowCache, key: tuple[str]) -> dict[str, Any] | None:
    """The ``sessions`` row ``key`` (None when there is none), marked changed: a stored
    row's times are read as datetimes first (see :meth:`SessionsProjection.flush`), as
    :meth:`SessionsProjection.apply_all` does inline for the row of each event."""
    row = rows.rows["sessions"].get(key) or rows.get("sessions", key)
    if row is not None and key not in rows.dirty["sessions"]:
        _as_datetimes(row)
        rows.dirty["sessions"].add(key)
    return row


def _subagent_call(rows: RowCache, parent_id: str, tool_use_id: str, kind: str) -> None:
    """Session ``parent_id`` started a subagent call naming ``kind``: the child linked to
    it, if any yet, takes it when its own records named no type."""
    key = (parent_id, tool_use_id)
    call = rows.get("session_subagent_calls", key) or {
        "parent_id": parent_id, "tool_use_id": tool_use_id, "child_id": None,
    }
    call["agent_type"] = kind
    rows.put("session_subagent_calls", key, call)
    if call["child_id"] is not None:
        child = _changed_row(rows, (call["child_id"],))
        if child is not None and child["agent_type"] is None:
            child["agent_type"] = kind


def _subagent_link(rows: RowCache, row: dict[str, Any], tool_use_id: str) -> None:
    """Session ``row`` was linked to its parent's call ``tool_use_id``: it takes the
    call's type, if seen yet, when its own records named none."""
    key = (row["parent_id"], tool_use_id)
    call = rows.get("session_subagent_calls", key) or {
        "parent_id": row["parent_id"], "tool_use_id": tool_use_id, "agent_type": None,
    }
    call["child_id"] = row["id"]
    rows.put("session_subagent_calls", key, call)
    if row["agent_type"] is None:
        row["agent_type"] = call["agent_type"]


def _liveness_role(cls: type) -> str | None:
    """What an event class does to ``batch_open`` / ``unattached_count`` (:func:`_liveness`)."""
    if issubclass(cls, Session.PromptSubmitted):
        return "prompt"
    if issubclass(cls, Session.TurnEnded):
        return "turn"
    if issubclass(cls, Session.Ended | Session.BatchClosed | Session.TimedOut):
        return "close"
    if issubclass(cls, Session.RunEnded):
        return "run"
    if issubclass(cls, Session.ActivitiesAttached):
        return "attach"
    return "activity" if cls.__name__ in BATCH_ACTIVITY else None


def _liveness(row: dict[str, Any], event: Any, role: str, previous_batch: int) -> None:
    """``batch_open`` and ``unattached_count`` after ``event``, as
    :meth:`ledger.session.Session.apply_event` and :class:`ledger.lifecycle.Liveness`
    evolve ``batch_open`` and ``unattached``."""
    if role == "prompt":
        if event.batch > previous_batch and event.prompt_kind in BATCH_OPENERS:
            row["batch_open"] = True
    elif role == "turn":
        if event.batch == row["batch_count"]:
            row["batch_open"] = False
    elif role == "close" or (role == "run" and event.status in ENDED_STATES):
        row["batch_open"] = False
    elif role == "attach":
        row["unattached_count"] = 0
    elif role == "activity" and not row["batch_open"] and event.batch == row["batch_count"]:
        row["unattached_count"] += 1


class SessionsProjection(Projection):
    name = "sessions"
    kinds = (Session.Event,)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        events = session_events(batch)
        rows.prefetch("sessions", [(str(e.originator_id),) for _, e in events])
        rows.prefetch(
            "session_usage",
            [
                (str(e.originator_id), e.message_id)
                for _, e in events
                if isinstance(e, Session.UsageRecorded)
            ],
        )
        rows.prefetch(
            "session_subagent_calls",
            [
                (str(e.originator_id), e.tool_use_id)
                for _, e in events
                if isinstance(e, Session.ToolCallStarted) and subagent_type(e) is not None
            ],
        )

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if isinstance(event, Session.Event):
            self.apply_all(rows, [(position, event)])

    def apply_all(self, rows: RowCache, batch: Batch) -> None:
        held = rows.rows["sessions"]
        dirty = rows.dirty["sessions"]
        for position, event in batch:
            sid = str(event.originator_id)
            key = (sid,)
            # started_at / last_activity_at follow the source's clock only (summaries,
            # jobs and commands carry none); for a session with no source time, queries
            # fall back to the ledger times of the agent's own activity,
            # first/last_activity_recorded_at (schema.session_times). Held as datetimes
            # while a section is applied (see flush()).
            at = event.occurred_at
            if at is not None and at.tzinfo is None:  # naive: UTC, as iso() takes it
                at = at.replace(tzinfo=UTC)
            if isinstance(event, Session.Opened):
                row: dict[str, Any] = {
                    "id": sid,
                    "agent": event.agent,
                    "external_id": event.external_id,
                    "parent_id": str(event.parent_id) if event.parent_id else None,
                    "parent_tool_use_id": None,
                    "agent_type": event.agent_type,
                    "cwd": event.cwd,
                    "model": None,
                    "prompt_count": 0,
                    "batch_count": 0,
                    "tool_call_count": 0,
                    "tool_error_count": 0,
                    **dict.fromkeys(TOKENS, 0),
                    "cost_usd": 0.0,
                    "unpriced_tokens": 0,
                    "agent_cost_usd": None,
                    "event_count": 0,
                    "started_at": at,
                    "last_activity_at": at,
                    "ended_at": None,
                    "first_recorded_at": iso(event.timestamp),
                    "first_activity_recorded_at": None,  # Opened is not activity
                    "last_activity_recorded_at": None,
                    "batch_open": False,
                    "unattached_count": 0,
                }
                rows.put("sessions", key, row)
            else:
                found = held.get(key) or rows.get("sessions", key)
                if found is None:
                    version = event.originator_version
                    raise LookupError(f"session {sid}: event v{version} before Opened")
                row = found
                if key not in dirty:
                    _as_datetimes(row)
                    dirty.add(key)
            row["status"] = _STATUS[event.status]
            row["event_count"] += 1
            row["head_version"] = event.originator_version
            row["head_digest"] = event.digest
            row["head_position"] = position
            row["last_recorded_at"] = event.timestamp  # formatted in flush(), once a row
            if at is not None:
                if row["started_at"] is None or at < row["started_at"]:
                    row["started_at"] = at
                if row["last_activity_at"] is None or at > row["last_activity_at"]:
                    row["last_activity_at"] = at
            previous_batch = row["batch_count"]
            if event.batch > previous_batch:
                row["batch_count"] = event.batch
                row["unattached_count"] = 0  # the next batch: they stay in theirs
            has_case, activity, role = _KIND.get(type(event)) or _kind(type(event))
            if role is not None:
                _liveness(row, event, role, previous_batch)
            if activity:  # the agent's: its ledger time (a fork's copies keep theirs)
                ts = event.timestamp
                first = row["first_activity_recorded_at"]
                if first is None or ts < first:
                    row["first_activity_recorded_at"] = ts
                last = row["last_activity_recorded_at"]
                if last is None or ts > last:
                    row["last_activity_recorded_at"] = ts
            if not has_case:
                continue
            match event:
                case Session.PromptSubmitted() if event.prompt_kind in BATCH_OPENERS:
                    row["prompt_count"] += 1
                case Session.ToolCallStarted():
                    row["tool_call_count"] += 1
                    if (kind := subagent_type(event)) is not None:
                        _subagent_call(rows, sid, event.tool_use_id, kind)
                case Session.ToolCallCompleted() if event.is_error:
                    row["tool_error_count"] += 1
                case Session.UsageRecorded():
                    self._usage(rows, row, position, event)
                case Session.CostReported():
                    row["agent_cost_usd"] = (row["agent_cost_usd"] or 0.0) + event.cost_usd
                case Session.Started() if event.model:
                    row["model"] = event.model
                case Session.Ended() | Session.RunEnded():
                    row["ended_at"] = iso(at) or event_time(event)
                case Session.Reopened():
                    row["ended_at"] = None
                case Session.TimedOut():  # lifecycle: ended at its last activity
                    row["ended_at"] = iso(event.measured_from) or event_time(event)
                case Session.CommandApplied() if event.to_status in ENDED_STATES:
                    row["ended_at"] = row["ended_at"] or event_time(event)
                case Session.CommandApplied() if event.to_status != event.from_status:
                    # resumed, or a fork of an ended session left PAUSED (its copies of
                    # the parent's history had the parent's end): not ended
                    row["ended_at"] = None
                case Session.CwdLearned():
                    row["cwd"] = row["cwd"] or event.cwd
                case Session.LinkedToParent():
                    row["parent_id"] = row["parent_id"] or str(event.parent_id)
                    row["parent_tool_use_id"] = event.parent_tool_use_id
                    if event.parent_tool_use_id:
                        _subagent_link(rows, row, event.parent_tool_use_id)
                case _:
                    pass

    def flush(self, rows: RowCache) -> None:
        """Format each changed row's times, then write the section's changes.

        While a section is applied, ``started_at`` and ``last_activity_at`` (the min and
        max of the source's times), ``first/last_activity_recorded_at`` (of the agent's
        activity's ledger times) and ``last_recorded_at`` are held as datetimes: one
        ``iso`` per changed row, not per event. ``iso`` keeps the order of the times it
        formats, so the min and max are those of the formatted strings, as before."""
        held = rows.rows["sessions"]
        for key in rows.dirty["sessions"]:
            row = held[key]
            for column in _TIMES:
                if isinstance(value := row[column], datetime):
                    row[column] = iso(value)
        rows.flush()

    def _usage(self, rows: RowCache, row: dict[str, Any], position: int, e: Session.UsageRecorded) -> None:
        key = (row["id"], e.message_id)
        old = rows.get("session_usage", key)
        cost, unpriced = usage_cost(e)
        new = {
            "session_id": row["id"],
            "message_id": e.message_id,
            "model": e.model,
            "batch": e.batch,
            "position": position,
            **{t: getattr(e, t) for t in TOKENS},
            CACHE_1H: e.cache_creation_1h_input_tokens,
            "cost_usd": cost,
            "unpriced_tokens": unpriced,
        }
        for t in TOKENS:
            row[t] += new[t] - (old[t] if old else 0)
        if old is not None:
            row["cost_usd"] -= old["cost_usd"] or 0.0
            row["unpriced_tokens"] -= old["unpriced_tokens"]
        row["cost_usd"] += cost or 0.0
        row["unpriced_tokens"] += unpriced
        if e.model:
            row["model"] = e.model
        rows.put("session_usage", key, new)
