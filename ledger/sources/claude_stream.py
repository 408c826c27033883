"""Claude Code ``claude -p --output-format stream-json --verbose`` output -> observations.

Format source: ``shared/research/FORMATS.md`` A4 (``claude-agent-sdk-python``
``_internal/message_parser.py`` and ``types.py``) and the real captures in
``tests/fixtures/claude_code-elixir-stream-json``. NDJSON, one event per line:

* ``system``/``init`` -> ``Started`` (model, permission mode, cwd); ``compact_boundary``
  -> ``Compacted``; other ``system`` subtypes are kept as ``RecordObserved``.
* ``assistant`` -> ``AssistantReplied`` (one per record: one API message is split into
  one record per content block, all sharing ``message.id``), ``ToolCallStarted`` per
  ``tool_use`` block (key ``tool:{id}:start``, as in transcripts and hooks) and
  ``UsageRecorded`` keyed by ``message.id`` and the usage values (a repeated usage is
  one fact; a changed one is recorded again and read models keep the last), with the
  1-hour part of the cache writes (``claude_common.usage_tokens``).
* ``user`` -> ``ToolCallCompleted`` per ``tool_result`` (key ``tool:{id}:end``); text
  content (``--input-format stream-json``) -> ``PromptSubmitted``.
* As in transcripts (:mod:`ledger.sources.claude_transcript`): a prompt carries the alias
  ``prompt:{text hash}:{n}`` (n-th such prompt of the session in the stream) a hook's
  copy shares, and the facts after a batch-opening prompt name it (``after_prompt``); a
  tool call hands over ``call:{hash of tool name and input}:{n}`` (its completion
  ``…:end``; ``extra["call_alias"]``, not stored), which a hook's copy of the call
  without its id (2025 builds) gets in the aggregate: one call, whichever comes first.
* ``result`` -> ``TurnEnded`` (``reason`` = ``result:{subtype}``), ``CostReported``
  (``total_cost_usd``, ``modelUsage`` as ``by_model``) and, when ``result.usage`` exceeds
  the usage of the streamed messages (the streamed records carry the output count of the
  stream's start), a ``UsageRecorded`` for the rest (message id ``{key}:unstreamed``), so
  the session's tokens equal the agent's own total.
* anything else (``rate_limit_event``, ``stream_event``, ``conversation_reset``, …) is kept
  as ``RecordObserved``; a line that is not a JSON object is a :class:`Rejected`.

Records of a subagent (``parent_tool_use_id`` set) belong to a child session linked to
the parent tool call: ``"{session_id}/agent-{task_id}"`` when a ``system``/``task_started``
record named the run (``task_id`` is the agent id the transcript's ``subagents/agent-<id>
.jsonl`` and the hooks' ``agent_id`` give, ``tool_use_id`` the parent's Task/Agent call),
so the run's transcript and hooks land in the same child; else
``"{session_id}/task-{parent_tool_use_id}"``. The child's first prompt is its task
prompt (``prompt_kind`` ``task``, as in transcripts), not a human one.

Keys: ``uuid:{uuid}`` when the record has one, else ``line:{sha256}:{n}`` (n-th identical
line of the stream), so importing the bytes a runner recorded appends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ledger.observation import (
    BATCH_OPENERS,
    CACHE_1H,
    MAX_COUNT,
    TOKENS,
    Observation,
    Rejected,
    SessionRef,
)
from ledger.sources.adapter_kit import CallCounter, PromptCounter, text_parts
from ledger.sources.claude_common import (
    AGENT,
    child_ref,
    classify_prompt,
    subagent_link,
    tool_error_text,
    usage_key,
    usage_tokens,
)
from ledger.sources.jsonl import Decoded, LineKeys, decode, guarded, int_or_none, str_or_none

SOURCE_FORMAT = "claude-code.stream-json"
STREAM_TYPES = frozenset(
    {"system", "assistant", "user", "result", "stream_event", "rate_limit_event"}
)


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "claude-code.stream-json": frozenset(
        {
            "AssistantReplied",
            "Compacted",
            "CostReported",
            "LinkedToParent",
            "PromptSubmitted",
            "RecordObserved",
            "RunEnded",
            "Started",
            "SubagentLinked",
            "ToolCallCompleted",
            "ToolCallStarted",
            "TurnEnded",
            "UsageRecorded",
        }
    ),
}


def parse_records(lines: Iterable[bytes], source: str) -> Iterator[Observation | Rejected]:
    """Parse stream-json lines from ``source`` (a path); ends with the run's outcome."""
    parser = StreamParser(source)
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            where = f"line {lineno}"
            yield from guarded(
                lambda: parser.feed_line(line, where),  # noqa: B023 (called at once)
                line, source, where, AGENT, SOURCE_FORMAT,
            )
    yield from parser.finish()


def parse_array(records: list[Any], source: str) -> Iterator[Observation | Rejected]:
    """Parse a JSON array of stream-json events (what some tools save)."""
    import orjson

    parser = StreamParser(source)
    for i, rec in enumerate(records):
        yield from parser.feed_line(orjson.dumps(rec), f"[{i}]")
    yield from parser.finish()


class StreamParser:
    """State of one stream-json stream (one ``claude -p`` process).

    Args:
        source: where the lines come from (path or ``run:<command>``), for rejections.
        session_override: record every fact under this external session id instead of the
            agent's ``session_id`` (``hookledger run --session``).
        emit_end: at :meth:`finish`, record ``RunEnded`` from the last ``result`` (imports;
            the runner records the end itself, with the exit status).
    """

    agent = AGENT

    def __init__(
        self, source: str, session_override: str | None = None, emit_end: bool = True
    ) -> None:
        self.source = source
        self.override = session_override
        self.emit_end = emit_end
        self.keys = LineKeys()
        self.session: SessionRef | None = None
        self.cwd: str | None = None
        self.orphans: list[tuple[Decoded, bytes, str]] = []
        self.streamed: dict[str, dict[str, int]] = {}  # message id -> last usage since result
        self.models: set[str] = set()
        self.children: set[str] = set()
        self.agents: dict[str, tuple[str, str | None]] = {}
        """Parent tool call id -> ``(task_id, subagent_type)`` of the subagent run a
        ``task_started`` record named."""
        self.child_prompted: set[str] = set()
        self.end_key: str | None = None
        self.end_error: str | None = None
        self.prompts = PromptCounter()
        self.last_prompt: dict[str, str] = {}
        """Session external id -> the ``prompt:`` alias of its last batch-opening prompt
        (the facts after it name it, ``after_prompt``: the hooks' copy shares it)."""
        self.calls = CallCounter()
        """``call:{hash}:{n}`` of each tool call, handed over (``extra["call_alias"]``)."""

    # -- input -------------------------------------------------------------------------

    def feed_line(self, line: bytes, location: str) -> list[Observation | Rejected]:
        """Facts of one line (an empty list while the line waits for its session)."""
        decoded = decode(line, self.source, location, AGENT, SOURCE_FORMAT)
        if isinstance(decoded, Rejected):
            return [decoded]
        ref = self._session_of(decoded.record)
        if ref is None:
            self.orphans.append((decoded, line, location))
            return []
        out: list[Observation | Rejected] = []
        if self.orphans:
            pending, self.orphans = self.orphans, []
            for d, oline, _ in pending:
                out.extend(self._facts(d, oline, self._ref_for(d.record, ref)))
        out.extend(self._facts(decoded, line, self._ref_for(decoded.record, ref)))
        return out

    def finish(self) -> list[Observation | Rejected]:
        """Reject records that never found a session; record the end (imports)."""
        out: list[Observation | Rejected] = [
            Rejected(
                self.source,
                loc,
                "record has no session_id and the stream has none",
                line,
                AGENT,
                SOURCE_FORMAT,
            )
            for _, line, loc in self.orphans
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

    # -- sessions ----------------------------------------------------------------------

    def _session_of(self, rec: dict[str, Any]) -> SessionRef | None:
        if self.session is None or rec.get("type") == "system":
            cwd = str_or_none(rec.get("cwd"))
            self.cwd = cwd or self.cwd
            sid = self.override or str_or_none(rec.get("session_id"))
            if sid is not None and (self.session is None or self.session.external_id != sid):
                self.session = SessionRef(AGENT, sid, None, None, self.cwd)
        return self.session

    def _ref_for(self, rec: dict[str, Any], ref: SessionRef) -> SessionRef:
        parent_call = str_or_none(rec.get("parent_tool_use_id"))
        if parent_call is None:
            return ref
        if parent_call in self.agents:
            agent_id, agent_type = self.agents[parent_call]
            return child_ref(ref.external_id, agent_id, agent_type, ref.cwd)
        return SessionRef(
            AGENT, f"{ref.external_id}/task-{parent_call}", ref.external_id, "task", ref.cwd
        )

    # -- facts -------------------------------------------------------------------------

    def _facts(self, d: Decoded, line: bytes, ref: SessionRef) -> list[Observation | Rejected]:
        rec = d.record
        rtype = rec.get("type") if isinstance(rec.get("type"), str) else "(none)"
        uuid = str_or_none(rec.get("uuid"))
        record_key = f"uuid:{uuid}" if uuid else self.keys.key(line)
        common: dict[str, Any] = {
            "source_format": SOURCE_FORMAT,
            "record_key": record_key,
            "after_prompt": self.last_prompt.get(ref.external_id),
        }
        version = str_or_none(rec.get("claude_code_version"))
        if version:
            common["source_version"] = version
        message = rec.get("message") if isinstance(rec.get("message"), dict) else {}
        facts: list[Observation] = []
        if rtype == "system":
            facts = self._system(rec, ref, record_key, common)
        elif rtype == "assistant":
            facts = self._assistant(message, ref, record_key, common)
        elif rtype == "user":
            facts = self._user(message, ref, record_key, common)
        elif rtype == "result":
            facts = self._result(rec, ref, record_key, common)
        if not facts:
            subtype = rec.get("subtype")
            label = f"{rtype}:{subtype}" if isinstance(subtype, str) else rtype
            facts = [
                Observation(ref, "RecordObserved", record_key, {"record_type": label}, **common)
            ]
        # The raw record travels with the first fact; later facts point at it.
        facts[0].raw = rec
        facts[0].redactions = d.redactions
        if ref.parent_external_id is not None and ref.external_id not in self.children:
            facts = [*self._link_child(ref, rec, common), *facts]
        return list(facts)

    def _link_child(
        self, child: SessionRef, rec: dict[str, Any], common: dict[str, Any]
    ) -> list[Observation]:
        self.children.add(child.external_id)
        parent = SessionRef(AGENT, child.parent_external_id or "", None, None, child.cwd)
        call = str(rec.get("parent_tool_use_id"))
        in_parent = {**common, "after_prompt": self.last_prompt.get(parent.external_id)}
        if call in self.agents:  # the keys a transcript and the hooks give this run's link
            agent_id, agent_type = self.agents[call]
            links = subagent_link(parent, agent_id, agent_type, call, in_parent)
            links[1].after_prompt = common.get("after_prompt")
            return links
        return [
            Observation(
                parent,
                "SubagentLinked",
                f"subagent:task-{call}:{call}",
                {
                    "child_id": child.id,
                    "child_external_id": child.external_id,
                    "agent_id": f"task-{call}",
                    "agent_type": "task",
                    "tool_use_id": call,
                },
                **in_parent,
            ),
            Observation(
                child,
                "LinkedToParent",
                f"parent:{call}",
                {"parent_id": parent.id, "parent_tool_use_id": call},
                **common,
            ),
        ]

    def _system(
        self, rec: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        subtype = rec.get("subtype")
        task_id, call = str_or_none(rec.get("task_id")), str_or_none(rec.get("tool_use_id"))
        if subtype == "task_started" and task_id and call and call not in self.agents:
            if f"{ref.external_id}/task-{call}" not in self.children:  # a run is one child
                self.agents[call] = (task_id, str_or_none(rec.get("subagent_type")))
            return []
        if subtype == "init":
            model = str_or_none(rec.get("model"))
            return [
                Observation(
                    ref,
                    "Started",
                    key,
                    {
                        "source": "stream-json",
                        "model": model,
                        "permission_mode": str_or_none(rec.get("permissionMode")),
                    },
                    **common,
                )
            ]
        if subtype == "compact_boundary":
            meta = (
                rec.get("compact_metadata") if isinstance(rec.get("compact_metadata"), dict) else {}
            )
            return [
                Observation(
                    ref,
                    "Compacted",
                    key,
                    {
                        "trigger": str_or_none(meta.get("trigger")),
                        "pre_tokens": int_or_none(meta.get("pre_tokens")),
                    },
                    **common,
                )
            ]
        return []

    def _assistant(
        self, message: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        texts = [
            b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        message_id = str_or_none(message.get("id"))
        model = str_or_none(message.get("model"))
        facts = [
            Observation(
                ref,
                "AssistantReplied",
                key,
                {
                    "message_id": message_id,
                    "model": model,
                    "text": "\n".join(texts),
                    "stop_reason": str_or_none(message.get("stop_reason")),
                    "has_thinking": any(b.get("type") == "thinking" for b in blocks),
                },
                **common,
            )
        ]
        for b in blocks:
            call_id = str_or_none(b.get("id"))
            if b.get("type") != "tool_use" or call_id is None:
                continue
            name = str_or_none(b.get("name")) or "(unknown)"
            start = Observation(
                ref,
                "ToolCallStarted",
                f"tool:{call_id}:start",
                {
                    "tool_use_id": call_id,
                    "tool_name": name,
                    "tool_input": b.get("input"),
                    "message_id": message_id,
                },
                **common,
            )
            start.extra["call_alias"] = self.calls.alias(name, b.get("input"), ref.external_id, call_id)
            facts.append(start)
        usage = message.get("usage")
        if isinstance(usage, dict):
            tokens = usage_tokens(usage)
            usage_id = message_id or key
            self.streamed[usage_id] = tokens
            if model:
                self.models.add(model)
            facts.append(
                Observation(
                    ref,
                    "UsageRecorded",
                    usage_key(usage_id, tokens),
                    {"message_id": usage_id, "model": model, **tokens},
                    **common,
                )
            )
        return facts

    def _user(
        self, message: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        facts: list[Observation] = []
        for b in blocks:
            call_id = str_or_none(b.get("tool_use_id"))
            if b.get("type") != "tool_result" or call_id is None:
                continue
            is_error = b.get("is_error") is True
            done = Observation(
                ref,
                "ToolCallCompleted",
                f"tool:{call_id}:end",
                {
                    "tool_use_id": call_id,
                    "output": b.get("content"),
                    "is_error": is_error,
                    "error": tool_error_text(b.get("content")) if is_error else None,
                },
                **common,
            )
            alias = self.calls.end(call_id)
            if alias is not None:
                done.extra["call_alias"] = alias
            facts.append(done)
        if facts:
            return facts
        parts = text_parts(content)
        kind, text = classify_prompt(parts) if parts else ("other", "")
        if kind == "other":
            return []
        if kind == "human" and ref.parent_external_id is not None:
            if ref.external_id not in self.child_prompted:
                kind = "task"  # a subagent's first prompt: the Task's, not a human's
            self.child_prompted.add(ref.external_id)
        prompt = Observation(
            ref,
            "PromptSubmitted",
            key,
            {"text": text, "prompt_kind": kind},
            alias_keys=(self.prompts.alias(ref.external_id, text),),
            **common,
        )
        if kind in BATCH_OPENERS:
            self.last_prompt[ref.external_id] = prompt.alias_keys[0]
            prompt.after_prompt = None
        return [prompt]

    def _result(
        self, rec: dict[str, Any], ref: SessionRef, key: str, common: dict[str, Any]
    ) -> list[Observation]:
        subtype = str_or_none(rec.get("subtype")) or "unknown"
        is_error = rec.get("is_error") is True or subtype.startswith("error")
        self.end_key = key
        self.end_error = f"result:{subtype}" if is_error else None
        text = rec.get("result") if isinstance(rec.get("result"), str) else None
        facts = [
            Observation(
                ref,
                "TurnEnded",
                key,
                {
                    "reason": f"result:{subtype}",
                    "last_assistant_message": text,
                    "duration_ms": int_or_none(rec.get("duration_ms")),
                },
                **common,
            )
        ]
        cost = rec.get("total_cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and abs(cost) <= MAX_COUNT:
            facts.append(
                Observation(
                    ref,
                    "CostReported",
                    f"{key}:cost",
                    {
                        "cost_usd": float(cost),
                        "scope": "run",
                        "by_model": rec.get("modelUsage"),
                    },
                    **common,
                )
            )
        usage = rec.get("usage")
        if isinstance(usage, dict):
            total = usage_tokens(usage)
            rest = {
                k: max(0, total[k] - sum(u[k] for u in self.streamed.values()))
                for k in (*TOKENS, CACHE_1H)
            }
            rest[CACHE_1H] = min(rest[CACHE_1H], rest["cache_creation_input_tokens"])
            if any(rest[k] for k in TOKENS):
                model = next(iter(self.models)) if len(self.models) == 1 else None
                facts.append(
                    Observation(
                        ref,
                        "UsageRecorded",
                        f"{key}:usage",
                        {
                            "message_id": f"{key}:unstreamed",
                            "model": model,
                            **rest,
                        },
                        **common,
                    )
                )
        self.streamed = {}
        self.models = set()
        return facts
