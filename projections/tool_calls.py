"""``tool_calls`` read model: one row per tool call, with duration, success and error.

``duration_ms`` is the agent's own figure when it gives one (hook ``duration_ms``,
``toolUseResult.totalDurationMs``), else completion minus start on the source clock.

A start that arrived after its completion (``Session.LateStartObserved``: the call's
start was derived from its completion, or another source recorded the call) gives the
row its time (``started_at``) and ``tool_input`` unless the start the row has is earlier,
and its tool name when the row has none; a ``duration_ms`` the row computed is computed
again from it (``projections/analytics/extract.py`` mirrors these rules).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from ledger.session import Session
from projections.base import Batch, Projection, event_time, session_events
from projections.rows import RowCache


def _json(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return orjson.dumps(repr(value)).decode()


class ToolCallsProjection(Projection):
    name = "tool_calls"
    kinds = (
        Session.ToolCallStarted,
        Session.ToolCallCompleted,
        Session.LateStartObserved,
        Session.ActivitiesAttached,
    )

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        rows.prefetch(
            "tool_calls",
            [
                (str(e.originator_id), e.tool_use_id)
                for _, e in session_events(batch)
                if isinstance(
                    e, Session.ToolCallStarted | Session.ToolCallCompleted | Session.LateStartObserved
                )
            ]
            + [
                (str(e.originator_id), t)
                for _, e in session_events(batch)
                if isinstance(e, Session.ActivitiesAttached)
                for t in e.tool_use_ids
            ],
        )

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if isinstance(event, Session.ActivitiesAttached):
            # lifecycle: moved into the batch they were attached to (a recovery batch for
            # calls made before any prompt, batch 0; else the batch they were made in)
            for tool_use_id in event.tool_use_ids:
                found = rows.get("tool_calls", (str(event.originator_id), tool_use_id))
                if found is not None:
                    found["batch"] = event.batch
                    rows.put("tool_calls", (str(event.originator_id), tool_use_id), found)
            return
        if isinstance(event, Session.LateStartObserved):
            self._late_start(rows, event)
            return
        if not isinstance(event, Session.ToolCallStarted | Session.ToolCallCompleted):
            return
        key = (str(event.originator_id), event.tool_use_id)
        row = rows.get("tool_calls", key) or {
            "session_id": key[0],
            "tool_use_id": key[1],
            "batch": event.batch,
            "tool_name": None,
            "tool_input": None,
            "output": None,
            "status": "started",
            "is_error": False,
            "error": None,
            "interrupted": False,
            "started_at": None,
            "completed_at": None,
            "duration_ms": None,
            "start_position": None,
            "end_position": None,
        }
        at = event_time(event)
        if isinstance(event, Session.ToolCallStarted):
            row.update(
                tool_name=event.tool_name,
                tool_input=_json(event.tool_input),
                started_at=at,
                start_position=position,
                batch=event.batch,
            )
        else:
            row.update(
                tool_name=row["tool_name"] or event.tool_name,
                output=_json(event.output),
                status="failed" if event.is_error else "completed",
                is_error=event.is_error,
                error=event.error,
                interrupted=event.interrupted,
                completed_at=at,
                end_position=position,
                duration_ms=event.duration_ms,
            )
        if row["duration_ms"] is None:
            row["duration_ms"] = _span(row)
        rows.put("tool_calls", key, row)

    def _late_start(self, rows: RowCache, event: Session.LateStartObserved) -> None:
        """The start as the agent gave it, arrived after the call's completion: its tool
        name when the row has none (a start derived from a completion that named no
        tool), and its time and input unless the row's start is earlier (another
        source's, not one derived from the completion, which has the completion's
        time). A ``duration_ms`` equal to the span of the row's times was computed (or
        is the agent's and agrees): it is computed again from the new start."""
        key = (str(event.originator_id), event.tool_use_id)
        row = rows.get("tool_calls", key)
        if row is None:
            return  # (the call's own start precedes it in the log)
        if row["tool_name"] in (None, "(unknown)") and event.tool_name:
            row["tool_name"] = event.tool_name
        at = event_time(event)
        if at is not None and (row["started_at"] is None or _parse(at) <= _parse(row["started_at"])):
            computed = row["duration_ms"] is None or row["duration_ms"] == _span(row)
            row.update(started_at=at, tool_input=_json(event.tool_input))
            if computed:
                row["duration_ms"] = _span(row)
        rows.put("tool_calls", key, row)


def _span(row: dict[str, Any]) -> int | None:
    """Completion minus start (ms, on the source clock), or None without both."""
    if not (row["started_at"] and row["completed_at"]):
        return None
    delta = _parse(row["completed_at"]) - _parse(row["started_at"])
    return max(0, round(delta.total_seconds() * 1000))


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
