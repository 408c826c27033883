"""Codex ``codex exec --json`` output -> observations.

Format source: ``shared/research/FORMATS.md`` A5 (``openai/codex``
``codex-rs/exec/src/exec_events.rs``) and the real captures (Codex 0.46) in
``tests/fixtures/agentcmd-codex-exec-json``. One JSON event per line; events carry no
session id and no timestamp: ``thread.started{thread_id}`` names the session (the Codex
thread) and comes first.

* ``item.started|updated|completed{item}``: ``agent_message`` -> ``AssistantReplied``;
  ``command_execution`` -> ``ToolCallStarted``/``ToolCallCompleted`` (tool ``shell``,
  output ``{exit_code, aggregated_output, status}``; failed when ``status`` is
  ``failed``/``declined`` or the exit code is not 0); ``file_change``, ``mcp_tool_call``
  (tool ``mcp:{server}/{tool}``), ``web_search``, ``collab_tool_call`` likewise;
  ``error`` items -> ``NotificationReceived``; ``reasoning``, ``todo_list``, ``plan`` and
  updates are kept as ``RecordObserved``.
* ``turn.completed{usage}`` -> ``TurnEnded`` and a ``UsageRecorded`` (tokens per
  ``codex_common``) of what the thread spent since the last total: ``usage`` is the
  thread's running total, not the turn's (``usage_from_last_total`` in ``openai/codex``
  ``codex-rs/exec/src/event_processor_with_jsonl_output.rs``), and ``codex exec resume``
  starts from the thread's earlier total. A later turn of the same process records the
  difference to the previous ``turn.completed`` (an unchanged total records no usage; a
  total that goes down starts a new baseline); the first turn of a process records the
  whole total, marked ``extra["running_total"]``, and the aggregate takes off what the
  session already holds from earlier processes (:meth:`ledger.session.Session.observe`); ``turn.failed{error}`` -> ``TurnEnded`` with the error, and the run failed;
  ``error{message}`` -> ``NotificationReceived``; anything else -> ``RecordObserved``.

Keys: item ids (``item_0``…) restart in every process, so every key carries the prefix
hash of the stream up to the line (:class:`ledger.sources.jsonl.PrefixChain`): the same
bytes give the same keys (runner and import agree; a re-import appends nothing), two
processes of one thread differ from their first differing line. Tool calls use
``tool:{item.id}@{hash at the item's first line}:{start|end}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ledger.observation import Observation, Rejected, SessionRef
from ledger.sources.codex_common import AGENT, has_usage, ledger_tokens, subtract
from ledger.sources.jsonl import Decoded, PrefixChain, decode, guarded, str_or_none

SOURCE_FORMAT = "codex.exec-json"
EXEC_TYPES = frozenset(
    {
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
    }
)
_TOOL_ITEMS = frozenset(
    {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
)


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "codex.exec-json": frozenset(
        {
            "AssistantReplied",
            "NotificationReceived",
            "RecordObserved",
            "RunEnded",
            "Started",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UsageRecorded",
        }
    ),
}


def parse_records(lines: Iterable[bytes], source: str) -> Iterator[Observation | Rejected]:
    """Parse ``codex exec --json`` lines from ``source`` (a path)."""
    parser = ExecParser(source)
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            where = f"line {lineno}"
            yield from guarded(
                lambda: parser.feed_line(line, where),  # noqa: B023 (called at once)
                line, source, where, AGENT, SOURCE_FORMAT,
            )
    yield from parser.finish()


class ExecParser:
    """State of one ``codex exec --json`` stream (one process). Arguments as
    :class:`ledger.sources.claude_stream.StreamParser`."""

    agent = AGENT

    def __init__(
        self, source: str, session_override: str | None = None, emit_end: bool = True
    ) -> None:
        self.source = source
        self.override = session_override
        self.emit_end = emit_end
        self.chain = PrefixChain()
        self.session: SessionRef | None = None
        self.orphans: list[tuple[Decoded, bytes, str, str]] = []
        self.calls: dict[str, str] = {}  # item id -> tool_use_id
        self.end_key: str | None = None
        self.end_error: str | None = None
        self.total: dict[str, int] | None = None  # the last turn.completed usage of this process

    def feed_line(self, line: bytes, location: str) -> list[Observation | Rejected]:
        """Facts of one line (an empty list while the line waits for ``thread.started``)."""
        head = self.chain.feed(line)
        decoded = decode(line, self.source, location, AGENT, SOURCE_FORMAT)
        if isinstance(decoded, Rejected):
            return [decoded]
        rec = decoded.record
        if rec.get("type") == "thread.started":
            thread = self.override or str_or_none(rec.get("thread_id"))
            if thread is not None:
                self.session = SessionRef(AGENT, thread)
                self.calls = {}
                self.total = None
        if self.session is None:
            self.orphans.append((decoded, line, location, head))
            return []
        out: list[Observation | Rejected] = []
        if self.orphans:
            pending, self.orphans = self.orphans, []
            for d, _, _, h in pending:
                out.extend(self._facts(d, h, self.session))
        out.extend(self._facts(decoded, head, self.session))
        return out

    def finish(self) -> list[Observation | Rejected]:
        """Reject lines that never found a thread; record the end (imports)."""
        out: list[Observation | Rejected] = [
            Rejected(
                self.source, loc, "event before any thread.started", line, AGENT, SOURCE_FORMAT
            )
            for _, line, loc, _ in self.orphans
        ]
        self.orphans = []
        if self.emit_end and self.end_key is not None and self.session is not None:
            outcome = "failed" if self.end_error is not None else "completed"
            out.append(
                Observation(
                    self.session,
                    "RunEnded",
                    f"{self.end_key}:end",
                    {"outcome": outcome, "reason": self.end_error},
                    source_format=SOURCE_FORMAT,
                    record_key=self.end_key,
                )
            )
        return out

    # -- facts -------------------------------------------------------------------------

    def _facts(self, d: Decoded, head: str, ref: SessionRef) -> list[Observation]:
        rec = d.record
        rtype = rec.get("type") if isinstance(rec.get("type"), str) else "(none)"
        key = f"exec:{head}"
        common: dict[str, Any] = {"source_format": SOURCE_FORMAT, "record_key": key}
        facts: list[Observation] = []
        label = rtype
        if rtype == "thread.started":
            facts = [Observation(ref, "Started", key, {"source": "exec"}, **common)]
        elif rtype in ("item.started", "item.updated", "item.completed"):
            item = rec.get("item") if isinstance(rec.get("item"), dict) else {}
            label = f"{rtype}:{item.get('type')}"
            facts = self._item(rtype, item, head, ref, key, common)
        elif rtype == "turn.completed":
            facts = [Observation(ref, "TurnEnded", key, {"reason": "turn.completed"}, **common)]
            usage = rec.get("usage")
            if has_usage(usage):
                facts.extend(self._usage(ledger_tokens(usage), ref, key, common))
            self.end_key, self.end_error = key, None
        elif rtype == "turn.failed":
            message = _error_message(rec.get("error"))
            facts = [
                Observation(ref, "TurnEnded", key, {"reason": f"turn.failed: {message}"}, **common)
            ]
            self.end_key, self.end_error = key, f"turn.failed: {message}"
        elif rtype == "error":
            facts = [
                Observation(
                    ref,
                    "NotificationReceived",
                    key,
                    {"message": _error_message(rec), "notification_type": "error"},
                    **common,
                )
            ]
        if not facts:
            facts = [Observation(ref, "RecordObserved", key, {"record_type": label}, **common)]
        facts[0].raw = rec
        facts[0].redactions = d.redactions
        return facts

    def _usage(
        self, total: dict[str, int], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        """The usage of a ``turn.completed`` whose ``usage`` is the thread's running
        ``total``: the part since this process's previous total, or (the process's first
        turn) the whole total for the aggregate to take the session's earlier part off."""
        before, self.total = self.total, total
        tokens = total
        if before is not None:
            tokens = subtract(total, before)
            if any(v < 0 for v in tokens.values()):
                tokens = total  # the total went down: a new baseline
            if not any(tokens.values()):
                return []  # the same total again: nothing new (the record stays on TurnEnded)
        obs = Observation(
            ref,
            "UsageRecorded",
            f"{key}:usage",
            {"message_id": f"{ref.external_id}:{key}", **tokens},
            **common,
        )
        if before is None:
            obs.extra["running_total"] = True
        return [obs]

    def _item(
        self,
        phase: str,
        item: dict[str, Any],
        head: str,
        ref: SessionRef,
        key: str,
        common: dict[str, Any],
    ) -> list[Observation]:
        itype = item.get("type")
        item_id = str_or_none(item.get("id")) or key
        if itype == "agent_message" and phase == "item.completed":
            text = item.get("text") if isinstance(item.get("text"), str) else ""
            return [
                Observation(
                    ref,
                    "AssistantReplied",
                    key,
                    {"message_id": f"{item_id}@{head}", "text": text},
                    **common,
                )
            ]
        if itype == "error":
            return [
                Observation(
                    ref,
                    "NotificationReceived",
                    key,
                    {"message": str_or_none(item.get("message")), "notification_type": "error"},
                    **common,
                )
            ]
        if itype not in _TOOL_ITEMS or phase == "item.updated":
            return []
        facts: list[Observation] = []
        call_id = self.calls.get(item_id)
        if call_id is None:
            call_id = self.calls[item_id] = f"{item_id}@{head}"
            name, tool_input = _tool(item)
            facts.append(
                Observation(
                    ref,
                    "ToolCallStarted",
                    f"tool:{call_id}:start",
                    {"tool_use_id": call_id, "tool_name": name, "tool_input": tool_input},
                    **common,
                )
            )
        if phase == "item.completed":
            facts.append(
                Observation(
                    ref,
                    "ToolCallCompleted",
                    f"tool:{call_id}:end",
                    {"tool_use_id": call_id, **_outcome(item)},
                    **common,
                )
            )
        return facts


def _tool(item: dict[str, Any]) -> tuple[str, Any]:
    itype = item.get("type")
    if itype == "command_execution":
        return "shell", {"command": item.get("command")}
    if itype == "file_change":
        return "file_change", {"changes": item.get("changes")}
    if itype == "mcp_tool_call":
        return f"mcp:{item.get('server')}/{item.get('tool')}", item.get("arguments")
    if itype == "web_search":
        return "web_search", {"query": item.get("query"), "action": item.get("action")}
    return f"collab:{item.get('tool')}", {
        k: item.get(k) for k in ("sender_thread_id", "receiver_thread_ids", "prompt") if k in item
    }


def _outcome(item: dict[str, Any]) -> dict[str, Any]:
    """``output``/``is_error``/``error`` of a completed tool item."""
    status = str_or_none(item.get("status"))
    itype = item.get("type")
    error: str | None = None
    if itype == "command_execution":
        exit_code = item.get("exit_code")
        output: Any = {
            "exit_code": exit_code,
            "aggregated_output": item.get("aggregated_output"),
            "status": status,
        }
        if isinstance(exit_code, int) and exit_code != 0:
            error = f"exit code {exit_code}"
    elif itype == "mcp_tool_call":
        output = item.get("result")
        if item.get("error") is not None:
            error = _error_message(item.get("error"))
    elif itype == "file_change":
        output = {"changes": item.get("changes"), "status": status}
    else:
        output = {k: v for k, v in item.items() if k not in ("id", "type")}
    if error is None and status in ("failed", "declined"):
        error = status
    return {"output": output, "is_error": error is not None, "error": error}


def _error_message(value: Any) -> str:
    if isinstance(value, dict):
        msg = value.get("message")
        return msg if isinstance(msg, str) else "error"
    return value if isinstance(value, str) else "error"
