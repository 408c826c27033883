"""``prompt_batches`` read model: one row per prompt batch.

A batch is one human prompt (or a subagent's task prompt) and everything until the
agent stops (``TurnEnded``), the next prompt, or the session's end. Activity before
the first prompt (batch 0) belongs to no batch row.
"""

from __future__ import annotations

from typing import Any

from ledger.session import Session
from projections.base import Batch, Projection, event_time, session_events
from projections.rows import RowCache


class BatchesProjection(Projection):
    name = "batches"

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        keys = []
        for _, e in session_events(batch):
            keys.append((str(e.originator_id), e.batch))
            keys.append((str(e.originator_id), e.batch - 1))
        rows.prefetch("prompt_batches", keys)

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if not isinstance(event, Session.Event) or event.batch < 1:
            return
        sid = str(event.originator_id)
        key = (sid, event.batch)
        at = event_time(event)
        row = rows.get("prompt_batches", key)
        if row is None:
            if not (
                isinstance(event, Session.PromptSubmitted) and event.prompt_kind in ("human", "task")
            ):
                return
            self._close(rows, (sid, event.batch - 1), at, "next_prompt")
            row = {
                "session_id": sid,
                "batch": event.batch,
                "prompt": event.text,
                "prompt_kind": event.prompt_kind,
                "status": "open",
                "started_at": at,
                "ended_at": None,
                "end_reason": None,
                "tool_call_count": 0,
                "tool_error_count": 0,
                "last_assistant_message": None,
                "first_position": position,
            }
        row["last_position"] = position
        match event:
            case Session.ToolCallStarted():
                row["tool_call_count"] += 1
            case Session.ToolCallCompleted() if event.is_error:
                row["tool_error_count"] += 1
            case Session.AssistantReplied() if event.text:
                row["last_assistant_message"] = event.text
            case Session.TurnEnded():
                row["status"] = "completed"
                row["ended_at"] = at
                row["end_reason"] = event.reason
                if event.last_assistant_message:
                    row["last_assistant_message"] = event.last_assistant_message
            case Session.Ended() if row["status"] == "open":
                row["status"] = "completed"
                row["ended_at"] = at
                row["end_reason"] = "session_end"
            case Session.RunEnded() if row["status"] == "open":
                row["status"] = "completed"
                row["ended_at"] = at
                row["end_reason"] = f"run_{event.outcome}"
            case _:
                pass
        rows.put("prompt_batches", key, row)

    def _close(self, rows: RowCache, key: tuple[str, int], at: str | None, reason: str) -> None:
        previous = rows.get("prompt_batches", key)
        if previous is not None and previous["status"] == "open":
            previous["status"] = "completed"
            previous["ended_at"] = at
            previous["end_reason"] = reason
            rows.touch("prompt_batches", key)
