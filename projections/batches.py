"""``prompt_batches`` read model: one row per prompt batch.

A batch is one human prompt (or a subagent's task prompt) and everything until the
agent stops (``TurnEnded``), the next prompt, or the session's end. Activity before
the first prompt (batch 0) belongs to no batch row. Inputs that open no batch (slash
commands such as ``/compact``, background-task notifications) are ``batch_inputs``
rows: session, position, batch (0 before the first prompt), kind, text, time.

Tokens and ``cost_usd`` (USD) per batch follow the ``sessions`` rules: per
``message_id`` the last ``UsageRecorded`` wins (``batch_usage`` remembers which batch
row counted it, so a replacement moves the difference); usage of a model with no price
adds to ``unpriced_tokens``; ``agent_cost_usd`` sums the agent's ``CostReported`` figures
recorded in the batch. A session's ``cost_usd`` is the sum of its batches' plus the
usage counted in no batch (``batch_usage.batch`` None).
"""

from __future__ import annotations

from typing import Any

from ledger.lifecycle import DECISION_KINDS
from ledger.observation import BATCH_OPENERS, CACHE_1H
from ledger.session import Session
from projections.base import Batch, Projection, event_time, iso, session_events
from projections.rows import RowCache
from projections.sessions import TOKENS, usage_cost

_CASES = (
    Session.ToolCallStarted, Session.ToolCallCompleted, Session.CostReported,
    Session.AssistantReplied, Session.TurnEnded, Session.Ended, Session.RunEnded,
)
"""The classes :meth:`BatchesProjection.apply_all` has a case for."""
_KIND: dict[type, tuple[bool, bool, bool, bool, bool, bool, bool]] = {}


_SETTLING = (Session.TurnEnded, Session.Ended, Session.RunEnded, Session.TimedOut)
"""Classes that end a batch's activity (with ``BatchClosed``, ``ActivitiesAttached`` and
the next prompt): ``settled_position``."""


def _kind(cls: type) -> tuple[bool, bool, bool, bool, bool, bool, bool]:
    """What ``apply_all`` asks of an event class, once per class: (lifecycle decision,
    summary, usage, prompt, has a case in the match, observed activity, settles)."""
    _KIND[cls] = found = (
        issubclass(cls, Session.BatchClosed | Session.ActivitiesAttached),
        issubclass(cls, Session.Summarised),
        issubclass(cls, Session.UsageRecorded),
        issubclass(cls, Session.PromptSubmitted),
        issubclass(cls, _CASES),
        cls.__name__ not in DECISION_KINDS and cls.__name__ not in ("Reopened", "CwdLearned"),
        issubclass(cls, _SETTLING),
    )
    return found


class BatchesProjection(Projection):
    name = "batches"
    kinds = (Session.Event,)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        keys = []
        usage = []
        for _, e in session_events(batch):
            keys.append((str(e.originator_id), e.batch))
            keys.append((str(e.originator_id), e.batch - 1))
            if isinstance(e, Session.UsageRecorded):
                usage.append((str(e.originator_id), e.message_id))
        rows.prefetch("prompt_batches", keys)
        rows.prefetch("batch_usage", usage)

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if isinstance(event, Session.Event):
            self.apply_all(rows, [(position, event)])

    def apply_all(self, rows: RowCache, batch: Batch) -> None:
        held = rows.rows["prompt_batches"]
        dirty = rows.dirty["prompt_batches"]
        inputs = rows.added["batch_inputs"]  # one new row per position
        for position, event in batch:
            kind = _KIND.get(type(event)) or _kind(type(event))
            lifecycle, summary, usage, prompt, has_case, activity, settles = kind
            if lifecycle:
                self._lifecycle(rows, position, event)
                continue
            if summary:
                continue  # a summary is about the batch, not part of it (projections/summaries.py)
            sid = str(event.originator_id)
            key = (sid, event.batch)
            row = (held.get(key) or rows.get("prompt_batches", key)) if event.batch >= 1 else None
            if usage:
                self._usage(rows, sid, row, event)
            elif prompt and event.prompt_kind not in BATCH_OPENERS:
                inputs.append((
                    sid, position, event.batch, event.prompt_kind, event.text, event_time(event)
                ))
            if event.batch < 1:
                continue
            if row is None:
                if not (prompt and event.prompt_kind in BATCH_OPENERS):
                    continue
                at = event_time(event)
                self._close(rows, (sid, event.batch - 1), at, "next_prompt", position)
                row = _new_row(
                    sid, event.batch, position, prompt=event.text, prompt_kind=event.prompt_kind,
                    started_at=at,
                )
                rows.put("prompt_batches", key, row)
            else:
                dirty.add(key)
            row["last_position"] = position
            if activity:
                row["activity_position"] = position
            if settles:
                row["settled_position"] = position
            if not has_case:
                continue
            match event:
                case Session.ToolCallStarted():
                    row["tool_call_count"] += 1
                case Session.ToolCallCompleted() if event.is_error:
                    row["tool_error_count"] += 1
                case Session.CostReported():
                    row["agent_cost_usd"] = (row["agent_cost_usd"] or 0.0) + event.cost_usd
                case Session.AssistantReplied() if event.text:
                    row["last_assistant_message"] = event.text
                case Session.TurnEnded():
                    row["status"] = "completed"
                    row["ended_at"] = event_time(event)
                    row["end_reason"] = event.reason
                    if event.last_assistant_message:
                        row["last_assistant_message"] = event.last_assistant_message
                case Session.Ended() if row["status"] == "open":
                    row["status"] = "completed"
                    row["ended_at"] = event_time(event)
                    row["end_reason"] = "session_end"
                case Session.RunEnded() if row["status"] == "open":
                    row["status"] = "completed"
                    row["ended_at"] = event_time(event)
                    row["end_reason"] = f"run_{event.outcome}"
                case _:
                    pass

    def _usage(
        self, rows: RowCache, sid: str, row: dict[str, Any] | None, e: Session.UsageRecorded
    ) -> None:
        """Replace this message's usage: take the old one off its batch, add the new one."""
        key = (sid, e.message_id)
        old = rows.get("batch_usage", key)
        if old is not None and old["batch"] is not None:
            counted = rows.get("prompt_batches", (sid, old["batch"]))
            if counted is not None:
                _add(counted, old, -1)
                rows.touch("prompt_batches", (sid, old["batch"]))
        cost, unpriced = usage_cost(e)
        new = {
            "session_id": sid,
            "message_id": e.message_id,
            "batch": e.batch if row is not None else None,
            **{t: getattr(e, t) for t in TOKENS},
            CACHE_1H: e.cache_creation_1h_input_tokens,
            "cost_usd": cost,
            "unpriced_tokens": unpriced,
        }
        if row is not None:
            _add(row, new, +1)
        rows.put("batch_usage", key, new)
    def _lifecycle(self, rows: RowCache, position: int, event: Any) -> None:
        """Liveness decisions: an idle batch closed; unbatched activity attached to the
        latest batch, or activity recorded before any prompt (``recovery``) to a new
        recovery batch (no prompt) or to the batch a late task prompt opened."""
        key = (str(event.originator_id), event.batch)
        row = rows.get("prompt_batches", key)
        if isinstance(event, Session.BatchClosed):
            if row is not None and row["status"] == "open":
                ended = iso(event.measured_from) or event_time(event)
                row.update(status="completed", ended_at=ended, end_reason=event.reason,
                           last_position=position, settled_position=position)
                rows.put("prompt_batches", key, row)
            return
        if row is not None:  # activity recorded after it closed, or before its (late) task prompt
            if event.recovery:
                row["tool_call_count"] += len(event.tool_use_ids)
                row["tool_error_count"] += event.tool_errors
            row["settled_position"] = position
            rows.put("prompt_batches", key, row)
            return
        if event.recovery and row is None:
            row = _new_row(
                key[0], event.batch, position, prompt_kind="recovery", status="completed",
                started_at=iso(event.first_activity_at), ended_at=iso(event.measured_from),
                end_reason="recovery", tool_call_count=len(event.tool_use_ids),
                tool_error_count=event.tool_errors, last_position=position,
                activity_position=position, settled_position=position,
            )
            rows.put("prompt_batches", key, row)

    def _close(self, rows: RowCache, key: tuple[str, int], at: str | None, reason: str, position: int) -> None:
        previous = rows.get("prompt_batches", key)
        if previous is None:
            return
        previous["settled_position"] = position
        rows.touch("prompt_batches", key)
        if previous["status"] == "open":
            previous["status"] = "completed"
            previous["ended_at"] = at
            previous["end_reason"] = reason


def _add(row: dict[str, Any], usage: dict[str, Any], sign: int) -> None:
    for t in (*TOKENS, "unpriced_tokens"):
        row[t] += sign * usage[t]
    row["cost_usd"] += sign * (usage["cost_usd"] or 0.0)


def _new_row(sid: str, batch: int, position: int, **values: Any) -> dict[str, Any]:
    """A ``prompt_batches`` row with every column set (an open, empty batch), then
    ``values``."""
    return {
        "session_id": sid,
        "batch": batch,
        "prompt": None,
        "prompt_kind": None,
        "status": "open",
        "started_at": None,
        "ended_at": None,
        "end_reason": None,
        "tool_call_count": 0,
        "tool_error_count": 0,
        "last_assistant_message": None,
        **dict.fromkeys(TOKENS, 0),
        "cost_usd": 0.0,
        "unpriced_tokens": 0,
        "agent_cost_usd": None,
        "first_position": position,
        "activity_position": position,
        "settled_position": None,
        **values,
    }
