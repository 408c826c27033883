"""Claude Code transcript JSONL -> observations.

Format source: ``shared/research/FORMATS.md`` A3 and C (no official schema exists; the
rules below are the union of what CC 1.0.x–2.1.x files show):

* ``~/.claude/projects/<project>/<sessionId>.jsonl``; subagent runs in
  ``<sessionId>/subagents/agent-<agentId>.jsonl`` (records carry ``agentId``, the
  session is ``"{sessionId}/agent-{agentId}"``, a child of ``sessionId``; records whose
  ``sessionId`` is the run's own ``"agent-{agentId}"`` name no parent: it is the
  ``<sessionId>`` folder the file is in); 1.0.x wrote
  subagent records inline with ``isSidechain: true`` (child ``"{sessionId}/sidechain-
  {root uuid}"``, the root found by following ``parentUuid``).
* One file may hold several ``sessionId``s; records without one (``summary``,
  ``file-history-snapshot``) belong to the session of the nearest record with one.
* A record repeated with the same ``uuid`` is one fact (the event key is the uuid).
* One API message is written as several records with the same ``message.id``; each
  distinct usage becomes a ``UsageRecorded`` and read models keep the last one; its
  cache writes carry their 1-hour part (``usage.cache_creation.ephemeral_1h_input_tokens``,
  ``claude_common.usage_tokens``), priced at the 1-hour rate.
* A line that is not UTF-8 JSON, or not a JSON object, is a :class:`Rejected` input
  with the reason; it never stops the import.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import (
    BATCH_OPENERS,
    BEFORE_FIRST_PROMPT,
    MAX_COUNT,
    Observation,
    Rejected,
    SessionRef,
)
from ledger.privacy import may_hold_private, strip_private
from ledger.sources.adapter_kit import CallCounter, text_parts
from ledger.sources.claude_common import (
    AGENT,
    classify_prompt,
    parse_time,
    subagent_link,
    text_hash,
    tool_error_text,
    usage_key,
    usage_tokens,
)
from ledger.sources.jsonl import guarded, numbered_lines

SOURCE_FORMAT = "claude-code.transcript"
PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    SOURCE_FORMAT: frozenset(
        {
            "PromptSubmitted",
            "AssistantReplied",
            "ToolCallStarted",
            "ToolCallCompleted",
            "UsageRecorded",
            "TurnEnded",
            "Compacted",
            "SubagentLinked",
            "LinkedToParent",
            "RecordObserved",
        }
    )
}


def parse_records(
    lines: Iterable[bytes],
    source: str,
    agent_type: str | None = None,
    parent_session_id: str | None = None,
) -> Iterator[Observation | Rejected]:
    """Parse transcript lines (bytes, one JSON object each) from ``source`` (a path).

    ``agent_type`` names the subagent type of an ``agent-*.jsonl`` file (from its
    ``.meta.json``), when known; ``parent_session_id`` the session whose
    ``subagents/`` folder holds it, for records whose ``sessionId`` is the run's own
    ``agent-<agentId>``.
    """
    parser = TranscriptParser(source, agent_type, parent_session_id)
    yield from parser.feed_lines(lines)
    yield from parser.finish()


def parse_array(records: list[Any], source: str) -> Iterator[Observation | Rejected]:
    """Parse the records of a JSON-array transcript (what some hook loggers save)."""
    parser = TranscriptParser(source)
    for i, rec in enumerate(records):
        yield from parser.feed_value(rec, orjson.dumps(rec), f"[{i}]")
    yield from parser.finish()


class TranscriptParser:
    """Streaming state for one transcript file (sidechain roots, prompt order)."""

    def __init__(
        self, source: str, agent_type: str | None = None, parent_session_id: str | None = None
    ) -> None:
        self.source = source
        self.agent_type = agent_type
        self.parent_session_id = parent_session_id
        self.parent_of: dict[str, str | None] = {}
        self.sidechain_root: dict[str, str] = {}
        self.task_prompts: dict[str, list[str]] = {}
        """Task prompt text -> the ``tool_use_id`` of each Task call with it not yet linked
        to an inline sidechain, oldest first (a prompt given twice starts two runs)."""
        self.task_calls: set[str] = set()
        self.last_prompt_key: dict[str, str] = {}
        """Session external id -> the ``prompt:`` alias of its last batch-opening prompt
        (the facts after it name it, ``after_prompt``: the hooks' copy shares it)."""
        self.calls = CallCounter()
        """``call:{hash}:{n}`` of each tool call, handed over (``extra["call_alias"]``,
        never stored) so a hook's copy of the call without its id (2025 builds) and this
        file's are one call (``ledger.session.Session._same_call``)."""
        self.prompt_counts: dict[tuple[str, str], int] = {}
        self.child_prompted: set[str] = set()
        self.current: SessionRef | None = None
        self.refs: dict[tuple[str, str | None, str | None, str | None], SessionRef] = {}
        self.orphans: list[tuple[dict[str, Any], bytes, str, list[dict[str, Any]]]] = []
        self.linked_children: set[str] = set()
        self.seen_uuids: set[str] = set()

    # -- input ---------------------------------------------------------------------

    def feed_lines(
        self, lines: Iterable[bytes], first: int = 1
    ) -> Iterator[Observation | Rejected]:
        """Feed ``lines``, numbered from ``first`` (a line's location is ``line N``);
        blank lines are skipped, and counted. Call :meth:`finish` after the last."""
        for lineno, line in numbered_lines(lines, first):
            yield from guarded(
                lambda: self.feed_line(line, str(lineno)),  # noqa: B023 (called at once)
                line, self.source, f"line {lineno}", AGENT, SOURCE_FORMAT,
            )

    def feed_line(self, line: bytes, location: str) -> Iterator[Observation | Rejected]:
        try:
            rec = jsontext.loads(line)
        except orjson.JSONDecodeError as e:
            reason = f"not valid JSON: {e}"
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                reason = "not valid UTF-8"
            yield Rejected(self.source, f"line {location}", reason, line, AGENT, SOURCE_FORMAT)
            return
        yield from self.feed_value(rec, line, f"line {location}")

    def feed_value(self, rec: Any, line: bytes, location: str) -> Iterator[Observation | Rejected]:
        if not isinstance(rec, dict):
            reason = f"record is a JSON {type(rec).__name__}, not an object"
            yield Rejected(self.source, location, reason, line, AGENT, SOURCE_FORMAT)
            return
        redactions: list[dict[str, Any]] = []
        if may_hold_private(line):  # walking every string is the slow part
            rec, redactions = strip_private(rec, raw=line)
        ref = self._session_of(rec)
        if ref is None:
            self.orphans.append((rec, line, location, redactions))
            return
        uuid = rec.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in self.seen_uuids:
                # The same record written again: the first copy's facts stand; a copy
                # that differs is kept as a plain record (identical copies collapse).
                key = f"uuid:{uuid}:repeat:{_line_key(line)[5:]}"
                rtype = rec.get("type") if isinstance(rec.get("type"), str) else "(none)"
                yield Observation(
                    ref, "RecordObserved", key, {"record_type": f"repeated:{rtype}"},
                    source_format=SOURCE_FORMAT, raw=line if not redactions else rec, record_key=key,
                    occurred_at=parse_time(rec.get("timestamp")),
                    after_prompt=self.last_prompt_key.get(ref.external_id, BEFORE_FIRST_PROMPT),
                    redactions=tuple(redactions),
                )
                return
            self.seen_uuids.add(uuid)
        if self.orphans:
            pending, self.orphans = self.orphans, []
            for orec, oline, _, oredactions in pending:
                yield from self._facts(orec, oline, ref, oredactions)
        yield from self._facts(rec, line, ref, redactions)

    def finish(self) -> Iterator[Observation | Rejected]:
        for _rec, line, location, _redactions in self.orphans:
            reason = "record has no sessionId and the file has no session to attach it to"
            yield Rejected(self.source, location, reason, line, AGENT, SOURCE_FORMAT)
        self.orphans = []

    # -- session attribution ----------------------------------------------------------

    def _session_of(self, rec: dict[str, Any]) -> SessionRef | None:
        sid = rec.get("sessionId")
        uuid = rec.get("uuid")
        parent = rec.get("parentUuid")
        if isinstance(uuid, str):
            self.parent_of.setdefault(uuid, parent if isinstance(parent, str) else None)
        if not isinstance(sid, str) or not sid:
            return self.current
        cwd = rec.get("cwd") if isinstance(rec.get("cwd"), str) else None
        agent_id = rec.get("agentId")
        if isinstance(agent_id, str) and agent_id:
            if sid == f"agent-{agent_id}" and self.parent_session_id:
                sid = self.parent_session_id  # the record names the run, not its parent
            agent_type = self.agent_type or _agent_type(agent_id)
            key = (f"{sid}/agent-{agent_id}", sid, agent_type, cwd)
        elif rec.get("isSidechain") is True and isinstance(uuid, str):
            key = (f"{sid}/sidechain-{self._root(uuid)}", sid, "sidechain", cwd)
        else:
            key = (sid, None, None, cwd)
        ref = self.refs.get(key)
        if ref is None:  # one shared (frozen) reference per session and cwd
            ref = self.refs[key] = SessionRef(AGENT, *key)
        if ref.parent_external_id is None or self.current is None:
            self.current = ref
        return ref

    def _root(self, uuid: str) -> str:
        if uuid in self.sidechain_root:
            return self.sidechain_root[uuid]
        chain = [uuid]
        node = uuid
        for _ in range(100_000):
            parent = self.parent_of.get(node)
            if parent is None or parent not in self.parent_of:
                break
            if parent in self.sidechain_root:
                node = self.sidechain_root[parent]
                break
            chain.append(parent)
            node = parent
        root = self.sidechain_root.get(node, node)
        for u in chain:
            self.sidechain_root[u] = root
        return root

    # -- facts ----------------------------------------------------------------------

    def _facts(
        self, rec: dict[str, Any], line: bytes, ref: SessionRef, redactions: list[dict[str, Any]]
    ) -> Iterator[Observation]:
        rtype = rec.get("type") if isinstance(rec.get("type"), str) else "(none)"
        uuid = rec.get("uuid")
        record_key = f"uuid:{uuid}" if isinstance(uuid, str) and uuid else _line_key(line)
        version = rec.get("version") if isinstance(rec.get("version"), str) else None
        common: dict[str, Any] = {
            "source_format": SOURCE_FORMAT,
            "source_version": version,
            "occurred_at": parse_time(rec.get("timestamp")),
            "record_key": record_key,
            "after_prompt": self.last_prompt_key.get(ref.external_id, BEFORE_FIRST_PROMPT),
        }
        facts: list[Observation] = []
        message = rec.get("message") if isinstance(rec.get("message"), dict) else {}
        if rtype == "user":
            facts = self._user(rec, message, ref, record_key, common)
        elif rtype == "assistant":
            facts = self._assistant(message, ref, record_key, common)
        elif rtype == "system":
            facts = self._system(rec, ref, record_key, common)
        if not facts:
            subtype = rec.get("subtype")
            label = f"{rtype}:{subtype}" if isinstance(subtype, str) else rtype
            facts = [Observation(ref, "RecordObserved", record_key, {"record_type": label}, **common)]
        # The raw record travels with the first fact; later facts point at it. It is the
        # line as read when privacy changed nothing, else the cleaned record.
        facts[0].raw = line if not redactions else rec
        facts[0].redactions = tuple(redactions)
        yield from facts

    def _user(
        self,
        rec: dict[str, Any],
        message: dict[str, Any],
        ref: SessionRef,
        record_key: str,
        common: dict[str, Any],
    ) -> list[Observation]:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return self._tool_results(rec, results, ref, record_key, common)
        if rec.get("isMeta") is True or rec.get("isCompactSummary") is True:
            return []
        origin = rec.get("origin")
        if isinstance(origin, dict) and origin.get("kind") == "task-notification":
            kind, text = "task_notification", _join_text(content)
        else:
            parts = text_parts(content)
            if not parts:
                return []
            kind, text = classify_prompt(parts)
        if kind == "other":
            return []
        if kind == "human" and ref.parent_external_id is not None:
            if ref.external_id not in self.child_prompted:
                kind = "task"
            self.child_prompted.add(ref.external_id)
        return self._prompt(rec, ref, record_key, common, kind, text)

    def _prompt(
        self,
        rec: dict[str, Any],
        ref: SessionRef,
        record_key: str,
        common: dict[str, Any],
        kind: str,
        text: str,
    ) -> list[Observation]:
        """The ``PromptSubmitted`` of one input (``kind``: the prompt kind of
        :func:`classify_prompt`, or ``task``), with the alias ``prompt:{hash}:{n}`` a
        hook's copy shares; a subagent's task prompt also links its sidechain."""
        thash = text_hash(text)
        n = self.prompt_counts.get((ref.external_id, thash), 0) + 1
        self.prompt_counts[(ref.external_id, thash)] = n
        alias = f"prompt:{thash}:{n}"
        obs = Observation(
            ref,
            "PromptSubmitted",
            record_key,
            {
                "text": text,
                "prompt_id": rec.get("promptId") if isinstance(rec.get("promptId"), str) else None,
                "prompt_kind": kind,
            },
            alias_keys=(alias,),
            **common,
        )
        if kind in BATCH_OPENERS:
            self.last_prompt_key[ref.external_id] = alias
            obs.after_prompt = None
        if kind == "task" and ref.external_id.split("/", 1)[-1].startswith("sidechain-"):
            waiting = self.task_prompts.get(text.strip())
            if waiting and ref.external_id not in self.linked_children:
                tool_use_id = waiting.pop(0)
                self.linked_children.add(ref.external_id)
                parent = SessionRef(AGENT, ref.parent_external_id or "", None, None, ref.cwd)
                agent_id = ref.external_id.split("/", 1)[1]
                return [obs, *_sidechain_link(parent, agent_id, tool_use_id, common)]
        return [obs]

    def _tool_results(
        self,
        rec: dict[str, Any],
        results: list[dict[str, Any]],
        ref: SessionRef,
        record_key: str,
        common: dict[str, Any],
    ) -> list[Observation]:
        facts: list[Observation] = []
        tur = rec.get("toolUseResult")
        for block in results:
            tool_use_id = block.get("tool_use_id")
            if not isinstance(tool_use_id, str) or not tool_use_id:
                continue
            is_error = block.get("is_error") is True
            content = block.get("content")
            done = Observation(
                ref,
                "ToolCallCompleted",
                f"tool:{tool_use_id}:end",
                {
                    "tool_use_id": tool_use_id,
                    "output": content,
                    "is_error": is_error,
                    "error": tool_error_text(content) if is_error else None,
                    "duration_ms": _int(tur.get("totalDurationMs") or tur.get("durationMs"))
                    if isinstance(tur, dict)
                    else None,
                    "interrupted": bool(isinstance(tur, dict) and tur.get("interrupted") is True),
                },
                **common,
            )
            alias = self.calls.end(tool_use_id)
            if alias is not None:
                done.extra["call_alias"] = alias
            facts.append(done)
            if isinstance(tur, dict) and isinstance(tur.get("agentId"), str) and len(results) == 1:
                agent_id = tur["agentId"]
                links = subagent_link(ref, agent_id, _agent_type(agent_id), tool_use_id, common)
                for link in links[1:]:  # the child's: ``common`` names the parent's prompts
                    link.after_prompt = None
                facts.extend(links)
        return facts

    def _assistant(
        self, message: dict[str, Any], ref: SessionRef, record_key: str, common: dict[str, Any]
    ) -> list[Observation]:
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        if isinstance(content, str):
            texts = [content]
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        model = message.get("model") if isinstance(message.get("model"), str) else None
        facts = [
            Observation(
                ref,
                "AssistantReplied",
                record_key,
                {
                    "message_id": message_id,
                    "model": model,
                    "text": "\n".join(t for t in texts if isinstance(t, str)),
                    "stop_reason": message.get("stop_reason")
                    if isinstance(message.get("stop_reason"), str)
                    else None,
                    "has_thinking": any(b.get("type") == "thinking" for b in blocks),
                },
                **common,
            )
        ]
        for b in blocks:
            if b.get("type") != "tool_use" or not isinstance(b.get("id"), str) or not b["id"]:
                continue
            name = b.get("name") if isinstance(b.get("name"), str) else "(unknown)"
            tool_input = b.get("input")
            if name in ("Task", "Agent") and isinstance(tool_input, dict):
                prompt = tool_input.get("prompt")
                if isinstance(prompt, str) and b["id"] not in self.task_calls:
                    self.task_calls.add(b["id"])
                    self.task_prompts.setdefault(prompt.strip(), []).append(b["id"])
            start = Observation(
                ref,
                "ToolCallStarted",
                f"tool:{b['id']}:start",
                {
                    "tool_use_id": b["id"],
                    "tool_name": name,
                    "tool_input": tool_input,
                    "message_id": message_id,
                },
                **common,
            )
            start.extra["call_alias"] = self.calls.alias(name, tool_input, ref.external_id, b["id"])
            facts.append(start)
        usage = message.get("usage")
        if isinstance(usage, dict):
            tokens = usage_tokens(usage)
            usage_id = message_id or record_key
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

    def _system(
        self, rec: dict[str, Any], ref: SessionRef, record_key: str, common: dict[str, Any]
    ) -> list[Observation]:
        subtype = rec.get("subtype")
        if subtype == "compact_boundary":
            meta = rec.get("compactMetadata") if isinstance(rec.get("compactMetadata"), dict) else {}
            return [
                Observation(
                    ref,
                    "Compacted",
                    record_key,
                    {"trigger": meta.get("trigger"), "pre_tokens": _int(meta.get("preTokens"))},
                    **common,
                )
            ]
        if subtype == "local_command":  # 2.1.x writes a local slash command (/model, /mcp) so
            content = rec.get("content")
            kind, text = classify_prompt([content]) if isinstance(content, str) else ("other", "")
            if kind == "command":  # its output (<local-command-stdout>) is no input
                return self._prompt(rec, ref, record_key, common, kind, text)
            return []
        if subtype == "turn_duration":
            return [
                Observation(
                    ref,
                    "TurnEnded",
                    record_key,
                    {"reason": "turn_duration", "duration_ms": _int(rec.get("durationMs"))},
                    **common,
                )
            ]
        return []


def _sidechain_link(
    parent: SessionRef, agent_id: str, tool_use_id: str, common: dict[str, Any]
) -> list[Observation]:
    links = subagent_link(parent, agent_id, "sidechain", tool_use_id, common)
    # subagent_link names the child "{parent}/agent-{id}"; inline sidechains use their own id.
    child_ext = f"{parent.external_id}/{agent_id}"
    child = SessionRef(AGENT, child_ext, parent.external_id, "sidechain", parent.cwd)
    links[0].data["child_id"] = child.id
    links[0].data["child_external_id"] = child_ext
    links[0].after_prompt = None  # the parent's link: ``common`` names the child's prompts
    links[1].session = child
    return links


def _agent_type(agent_id: str) -> str | None:
    return "compact" if agent_id.startswith("acompact") else None


def _join_text(content: Any) -> str:
    return "\n".join(text_parts(content))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_COUNT <= value <= MAX_COUNT else None
    if isinstance(value, float) and value.is_integer() and -MAX_COUNT <= value <= MAX_COUNT:
        return int(value)
    return None


def _line_key(line: bytes) -> str:
    return "line:" + hashlib.sha256(line.strip()).hexdigest()[:32]
