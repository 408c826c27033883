"""Codex rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) -> observations.

Format source: ``shared/research/FORMATS.md`` A6 (``RolloutItem`` in ``openai/codex``
``codex-rs/protocol/src/protocol.rs``) and the real files in
``tests/fixtures/agentcmd-codex-rollouts`` (CLI 0.40) and
``tests/fixtures/agent-sessions-schema-drift/codex_*`` (0.50–0.146). Every line is
``{timestamp, type, payload}``:

* ``session_meta`` (first line; ``id``, later ``session_id``) names the session and gives
  ``Started``; a later ``session_meta`` (forks replay their parents') is kept as a record.
  ``forked_from_id`` / ``parent_thread_id`` (or, in a subagent's rollout,
  ``source.subagent.thread_spawn.parent_thread_id``) name the parent session
  (``Opened.parent_id``).
* A fork's file starts with a copy of its parent's history (``InitialHistory::Forked``:
  the parent's rollout items, its ``session_meta`` first, written as they were; see
  :meth:`RolloutParser._copied`). Those lines are kept as ``RecordObserved``
  (``copied:{type}``) and are no facts of the fork: no prompts, tool calls or usage; the
  last copied ``total_token_usage`` is the baseline of the fork's own usage.
* ``response_item``: ``message`` (assistant) -> ``AssistantReplied``; ``function_call``,
  ``custom_tool_call``, ``local_shell_call`` -> ``ToolCallStarted`` (key
  ``tool:{call_id}:start``); ``function_call_output``/``custom_tool_call_output`` ->
  ``ToolCallCompleted`` (failed when ``metadata.exit_code`` is not 0, or when the output
  is Codex's text for a call it did not run: ``failed in sandbox …``, ``patch rejected by
  user``, or when an ``exec_command_end`` / ``patch_apply_end`` / ``mcp_tool_call_end``
  before it reported the call failed: newer Codex writes outputs without exit codes).
* ``event_msg``: ``user_message`` -> ``PromptSubmitted``; ``token_count`` -> a
  ``UsageRecorded`` of the *delta* of the cumulative ``total_token_usage`` (an unchanged
  snapshot records nothing new and is kept as a record; a total that goes down starts a
  new baseline); ``task_complete``/``turn_aborted`` -> ``TurnEnded``; ``error`` ->
  ``NotificationReceived``; the legacy ``turn.completed{usage}`` (0.51) -> ``TurnEnded``
  and per-turn usage unless the file has cumulative ``token_count``s.
* ``compacted`` -> ``Compacted``. Every other record (``turn_context``, ``reasoning``,
  ``agent_message`` echoes, ``world_state``, …) is kept as ``RecordObserved``.

Tokens follow ``ledger.sources.codex_common`` (Anthropic's convention). Keys:
``line:{sha256}:{n}`` per line (lines carry timestamps), tool calls by ``call_id``; a
line before any ``session_meta`` waits for it, else takes the thread id in the file
name, else is rejected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ledger.observation import BEFORE_FIRST_PROMPT, Observation, Rejected, SessionRef
from ledger.sources.claude_common import parse_time, text_hash
from ledger.sources.codex_common import (
    AGENT,
    call_failure,
    has_usage,
    ledger_tokens,
    maybe_json,
    subtract,
)
from ledger.sources.jsonl import (
    Decoded,
    LineKeys,
    decode,
    guarded,
    int_or_none,
    numbered_lines,
    str_or_none,
)

SOURCE_FORMAT = "codex.rollout"
ROLLOUT_TYPES = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
)
_THREAD_IN_NAME = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$"
)
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "codex.rollout": frozenset(
        {
            "AssistantReplied",
            "Compacted",
            "NotificationReceived",
            "PromptSubmitted",
            "RecordObserved",
            "Started",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UsageRecorded",
        }
    ),
}


def parse_records(lines: Iterable[bytes], source: str) -> Iterator[Observation | Rejected]:
    """Parse rollout lines from ``source`` (a path; its name may carry the thread id)."""
    parser = RolloutParser.for_file(source)
    yield from parser.feed_lines(lines)
    yield from parser.finish()


class RolloutParser:
    """State of one rollout file: its session, model, cumulative token totals."""

    def __init__(self, source: str, thread_from_name: str | None = None) -> None:
        self.source = source
        self.fallback = thread_from_name
        self.keys = LineKeys()
        self.session: SessionRef | None = None
        self.version: str | None = None
        self.model: str | None = None
        self.totals: dict[str, int] | None = None
        self.seen_calls: set[tuple[str, str]] = set()
        self.call_errors: dict[str, str] = {}
        """``call_id`` -> the error an ``exec_command_end`` / ``patch_apply_end`` /
        ``mcp_tool_call_end`` reported for a call whose output is still to come."""
        self.started = False
        self.prompt_counts: dict[str, int] = {}
        self.orphans: list[tuple[Decoded, bytes, str]] = []
        self.forked_at: datetime | None = None
        """A fork's creation time (its ``session_meta``); None for a rollout that is no fork."""
        self.copy_state = "before"  # of a fork: "before" its history, "copying", "own"
        self.turn_ids_seen = False  # the copied history carries turn ids
        self.last_prompt = BEFORE_FIRST_PROMPT
        """The ``prompt:`` alias of the latest prompt: the facts after it name it
        (``after_prompt``), so a rollout imported after the hooks puts each turn's facts
        in that prompt's batch (the hooks' copy of the prompt shares the alias)."""

    @classmethod
    def for_file(cls, source: str) -> RolloutParser:
        """A parser for the rollout file ``source`` (its name may carry the thread id)."""
        m = _THREAD_IN_NAME.search(source)
        return cls(source, m.group(1) if m else None)

    def feed_lines(
        self, lines: Iterable[bytes], first: int = 1
    ) -> Iterator[Observation | Rejected]:
        """Feed ``lines``, numbered from ``first`` (a line's location is ``line N``);
        blank lines are skipped, and counted. Call :meth:`finish` after the last."""
        for lineno, line in numbered_lines(lines, first):
            where = f"line {lineno}"
            yield from guarded(
                lambda: self.feed_line(line, where),  # noqa: B023 (called at once)
                line, self.source, where, AGENT, SOURCE_FORMAT,
            )

    def feed_line(self, line: bytes, location: str) -> list[Observation | Rejected]:
        decoded = decode(line, self.source, location, AGENT, SOURCE_FORMAT)
        if isinstance(decoded, Rejected):
            return [decoded]
        rec = decoded.record
        payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
        if self.session is None and rec.get("type") == "session_meta":
            sid = str_or_none(payload.get("id")) or str_or_none(payload.get("session_id"))
            if sid is not None:
                parent = (
                    str_or_none(payload.get("parent_thread_id"))
                    or str_or_none(payload.get("forked_from_id"))
                    or _spawned_by(payload.get("source"))
                )
                self.session = SessionRef(AGENT, sid, parent, None, str_or_none(payload.get("cwd")))
                self.version = str_or_none(payload.get("cli_version"))
                if parent is not None:
                    self.forked_at = parse_time(payload.get("timestamp")) or parse_time(
                        rec.get("timestamp")
                    )
        if self.session is None:
            self.orphans.append((decoded, line, location))
            return []
        out: list[Observation | Rejected] = []
        if self.orphans:
            pending, self.orphans = self.orphans, []
            for d, oline, _ in pending:
                out.extend(self._facts(d, oline, self.session))
        out.extend(self._facts(decoded, line, self.session))
        return out

    def finish(self) -> list[Observation | Rejected]:
        if self.orphans and self.fallback is not None:
            self.session = SessionRef(AGENT, self.fallback)
            pending, self.orphans = self.orphans, []
            return [f for d, line, _ in pending for f in self._facts(d, line, self.session)]
        out: list[Observation | Rejected] = [
            Rejected(
                self.source,
                loc,
                "rollout record with no session_meta in the file and no thread id in its name",
                line,
                AGENT,
                SOURCE_FORMAT,
            )
            for _, line, loc in self.orphans
        ]
        self.orphans = []
        return out

    # -- facts -------------------------------------------------------------------------

    def _facts(self, d: Decoded, line: bytes, ref: SessionRef) -> list[Observation]:
        rec = d.record
        rtype = rec.get("type") if isinstance(rec.get("type"), str) else "(none)"
        payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
        ptype = payload.get("type") if isinstance(payload.get("type"), str) else None
        key = self.keys.key(line)
        common: dict[str, Any] = {
            "source_format": SOURCE_FORMAT,
            "source_version": self.version,
            "occurred_at": parse_time(rec.get("timestamp")),
            "record_key": key,
        }
        facts: list[Observation] = []
        if self.forked_at is not None and self._copied(rtype, ptype, payload, rec, ref):
            self._keep_baseline(rtype, ptype, payload)
            label = f"{rtype}:{ptype}" if ptype else rtype
            facts = [
                Observation(
                    ref, "RecordObserved", key, {"record_type": f"copied:{label}"}, **common
                )
            ]
        elif rtype == "session_meta" and not self.started:
            self.started = True
            facts = [
                Observation(
                    ref,
                    "Started",
                    key,
                    {"source": str_or_none(payload.get("originator"))},
                    **common,
                )
            ]
        elif rtype == "turn_context":
            self.model = str_or_none(payload.get("model")) or self.model
        elif rtype == "response_item":
            facts = self._response_item(ptype, payload, ref, key, common)
        elif rtype == "event_msg":
            facts = self._event_msg(ptype, payload, ref, key, common)
        elif rtype == "compacted":
            facts = [
                Observation(
                    ref,
                    "Compacted",
                    key,
                    {"summary": str_or_none(payload.get("message"))},
                    **common,
                )
            ]
        if not facts:
            label = f"{rtype}:{ptype}" if ptype else rtype
            facts = [Observation(ref, "RecordObserved", key, {"record_type": label}, **common)]
        for fact in facts:
            if fact.kind == "PromptSubmitted":
                self.last_prompt = fact.alias_keys[0]
            else:
                fact.after_prompt = self.last_prompt
        facts[0].raw = rec
        facts[0].redactions = d.redactions
        return facts

    def _copied(
        self,
        rtype: str,
        ptype: str | None,
        p: dict[str, Any],
        rec: dict[str, Any],
        ref: SessionRef,
    ) -> bool:
        """Whether a line of a fork is part of the history copied from its parent.

        Upstream (``openai/codex`` ``core`` session start, ``InitialHistory::Forked``)
        writes the fork's ``session_meta``, then persists the parent's rollout items as
        they were, the parent's ``session_meta`` first, and marks no end. So the copy
        starts at a ``session_meta`` of another id seen before any turn of the fork's
        own, and ends at the first turn that starts after the fork was created: a
        ``turn_context`` / ``task_started`` whose ``turn_id`` (a UUIDv7, minted when the
        turn ran) is not older than the fork, or, when the copied turns carry no ids, a
        ``turn_context`` / ``task_started`` / ``user_message`` line timestamped after the
        fork's ``session_meta``. A fork with no copied ``session_meta`` has no copy."""
        if self.copy_state == "own":
            return False
        if rtype == "session_meta":
            sid = str_or_none(p.get("id")) or str_or_none(p.get("session_id"))
            if self.copy_state == "before" and self.started and sid != ref.external_id:
                self.copy_state = "copying"
            return self.copy_state == "copying"
        starts_turn = rtype == "turn_context" or ptype in ("task_started", "user_message")
        if not starts_turn:
            return self.copy_state == "copying"
        if self.copy_state == "before":
            self.copy_state = "own"
            return False
        minted = _uuid7_time(p.get("turn_id"))
        if minted is not None:
            self.turn_ids_seen = True
            own = self.forked_at is not None and minted >= self.forked_at
        elif self.turn_ids_seen:
            own = False  # a line of a copied turn that carried an id
        else:
            at = parse_time(rec.get("timestamp"))
            own = at is not None and self.forked_at is not None and at > self.forked_at
        if own:
            self.copy_state = "own"
        return not own

    def _keep_baseline(self, rtype: str, ptype: str | None, p: dict[str, Any]) -> None:
        """A copied line's state the fork carries on: the model, the token total."""
        if rtype == "turn_context":
            self.model = str_or_none(p.get("model")) or self.model
        elif ptype == "token_count":
            info = p.get("info") if isinstance(p.get("info"), dict) else {}
            if has_usage(info.get("total_token_usage")):
                self.totals = ledger_tokens(info["total_token_usage"])

    def _response_item(
        self,
        ptype: str | None,
        p: dict[str, Any],
        ref: SessionRef,
        key: str,
        common: dict[str, Any],
    ) -> list[Observation]:
        if ptype == "message" and p.get("role") == "assistant":
            content = p.get("content") if isinstance(p.get("content"), list) else []
            texts = [
                b["text"]
                for b in content
                if isinstance(b, dict)
                and b.get("type") == "output_text"
                and isinstance(b.get("text"), str)
            ]
            return [
                Observation(
                    ref,
                    "AssistantReplied",
                    key,
                    {
                        "message_id": str_or_none(p.get("id")),
                        "model": self.model,
                        "text": "\n".join(texts),
                    },
                    **common,
                )
            ]
        call_id = str_or_none(p.get("call_id")) or (
            str_or_none(p.get("id")) if ptype == "local_shell_call" else None
        )
        if call_id is None or ptype not in (*_CALLS, *_OUTPUTS):
            return []
        phase = "start" if ptype in _CALLS else "end"
        if (call_id, phase) in self.seen_calls:
            return []  # the same call written again (forks, replays): kept as a record
        self.seen_calls.add((call_id, phase))
        if phase == "start":
            name = str_or_none(p.get("name")) or (
                "local_shell" if ptype == "local_shell_call" else "(unknown)"
            )
            raw_input = p.get("arguments", p.get("input", p.get("action")))
            return [
                Observation(
                    ref,
                    "ToolCallStarted",
                    f"tool:{call_id}:start",
                    {
                        "tool_use_id": call_id,
                        "tool_name": name,
                        "tool_input": maybe_json(raw_input),
                    },
                    **common,
                )
            ]
        output = maybe_json(p.get("output"))
        meta = (
            output.get("metadata")
            if isinstance(output, dict) and isinstance(output.get("metadata"), dict)
            else {}
        )
        seconds = meta.get("duration_seconds")
        duration = (
            round(seconds * 1000)
            if isinstance(seconds, int | float) and not isinstance(seconds, bool)
            else None
        )
        failed, error = call_failure(output)
        reported = self.call_errors.pop(call_id, None)
        if not failed and reported is not None:
            failed, error = True, reported
        return [
            Observation(
                ref,
                "ToolCallCompleted",
                f"tool:{call_id}:end",
                {
                    "tool_use_id": call_id,
                    "output": output,
                    "is_error": failed,
                    "error": error,
                    "duration_ms": duration,
                },
                **common,
            )
        ]

    def _event_msg(
        self,
        ptype: str | None,
        p: dict[str, Any],
        ref: SessionRef,
        key: str,
        common: dict[str, Any],
    ) -> list[Observation]:
        if ptype == "user_message":
            text = p.get("message") if isinstance(p.get("message"), str) else ""
            # The n-th prompt of this text is the same fact as the n-th UserPromptSubmit hook.
            thash = text_hash(text)
            n = self.prompt_counts[thash] = self.prompt_counts.get(thash, 0) + 1
            data = {"text": text, "prompt_kind": "human"}
            alias = (f"prompt:{thash}:{n}",)
            return [Observation(ref, "PromptSubmitted", key, data, alias_keys=alias, **common)]
        if ptype == "token_count":
            return self._token_count(p, ref, key, common)
        if ptype in ("exec_command_end", "patch_apply_end", "mcp_tool_call_end"):
            call_id = str_or_none(p.get("call_id"))
            error = _end_error(ptype, p)
            if call_id is not None and error is not None:
                self.call_errors[call_id] = error
            return []
        if ptype == "task_complete":
            return [
                Observation(
                    ref,
                    "TurnEnded",
                    key,
                    {
                        "reason": "task_complete",
                        "last_assistant_message": str_or_none(p.get("last_agent_message")),
                        "duration_ms": int_or_none(p.get("duration_ms")),
                    },
                    **common,
                )
            ]
        if ptype == "turn_aborted":
            reason = str_or_none(p.get("reason")) or "unknown"
            return [
                Observation(ref, "TurnEnded", key, {"reason": f"turn_aborted:{reason}"}, **common)
            ]
        if ptype == "turn.completed":
            facts = [Observation(ref, "TurnEnded", key, {"reason": "turn.completed"}, **common)]
            if self.totals is None and has_usage(p.get("usage")):
                facts.append(self._usage(ledger_tokens(p["usage"]), ref, f"{key}:usage", common))
            return facts
        if ptype == "error":
            err = p.get("error") if isinstance(p.get("error"), dict) else p
            return [
                Observation(
                    ref,
                    "NotificationReceived",
                    key,
                    {
                        "message": str_or_none(err.get("message")),
                        "notification_type": "error",
                    },
                    **common,
                )
            ]
        return []

    def _token_count(
        self, p: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        info = p.get("info") if isinstance(p.get("info"), dict) else {}
        total = info.get("total_token_usage")
        if not has_usage(total):
            return []
        now = ledger_tokens(total)
        before = self.totals or dict.fromkeys(now, 0)
        delta = subtract(now, before)
        if any(v < 0 for v in delta.values()):
            delta = now  # the cumulative total went down: a new baseline (e.g. a resumed process)
        self.totals = now
        if not any(delta.values()):
            return []
        return [self._usage(delta, ref, key, common)]

    def _usage(
        self, tokens: dict[str, int], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> Observation:
        return Observation(
            ref,
            "UsageRecorded",
            key,
            {"message_id": f"{ref.external_id}:{key}", "model": self.model, **tokens},
            **common,
        )


def _spawned_by(source: Any) -> str | None:
    """The parent thread of a subagent's ``session_meta.source``
    (``{"subagent": {"thread_spawn": {"parent_thread_id": …, "depth": …}}}``, Codex's
    ``SessionSource::SubAgent(ThreadSpawn)``): the only place a subagent's parent is
    named before ``parent_thread_id`` was added beside it; None for any other source."""
    sub = source.get("subagent") if isinstance(source, dict) else None
    spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
    return str_or_none(spawn.get("parent_thread_id")) if isinstance(spawn, dict) else None


def _end_error(ptype: str, p: dict[str, Any]) -> str | None:
    """The failure an ``event_msg`` that ends a call reports, or None: a non-zero
    ``exec_command_end.exit_code``, ``patch_apply_end.success`` false, an
    ``mcp_tool_call_end.result`` that is ``{"Err": …}`` or ``{"Ok": {"isError": true}}``
    (``ExecCommandEndEvent``, ``PatchApplyEndEvent``, ``McpToolCallEndEvent`` in
    ``codex-rs/protocol``). Newer Codex gives the model a call's output as text or
    content items with no exit code (0.146 fixture), so these events are where a
    rollout says a call failed."""
    if ptype == "exec_command_end":
        code = int_or_none(p.get("exit_code"))
        return f"exit code {code}" if code is not None and code != 0 else None
    if ptype == "patch_apply_end":
        return "patch failed" if p.get("success") is False else None
    result = p.get("result") if isinstance(p.get("result"), dict) else {}
    if "Err" in result:
        err = result["Err"]
        return (err.splitlines()[0][:200] or "MCP tool error") if isinstance(err, str) else "MCP tool error"
    ok = result.get("Ok")
    return "MCP tool error" if isinstance(ok, dict) and ok.get("isError") is True else None


def _uuid7_time(value: Any) -> datetime | None:
    """The creation time in a UUIDv7 (its first 48 bits, Unix milliseconds); None for
    anything else."""
    if not isinstance(value, str):
        return None
    try:
        u = UUID(value)
    except ValueError:
        return None
    if u.version != 7:
        return None
    try:
        return datetime.fromtimestamp((u.int >> 80) / 1000, UTC)
    except (ValueError, OverflowError, OSError):  # a time no datetime holds (year > 9999)
        return None


