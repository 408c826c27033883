"""Gemini CLI chat files -> observations.

Format source: ``shared/research/FORMATS.md`` A7 and C17; real files in
``tests/fixtures/agentcmd-gemini-sessions`` (Gemini CLI, Oct 2025) and
``tests/fixtures/agent-sessions-schema-drift/gemini_*`` (v0.40 JSONL, a legacy form).
Upstream writer: ``google-gemini/gemini-cli`` ``packages/core/src/services/
chatRecordingService.ts``.

Shapes accepted:

* ``~/.gemini/tmp/<projectHash>/chats/session-*.json``: ONE JSON document
  ``{sessionId, projectHash, startTime, lastUpdated, messages[]}`` that the CLI
  rewrites in place as the session grows. Every fact is keyed by the message ``id``
  (tool calls by their own ``id``), so importing a grown copy appends only the new
  messages, tool results, changed token counts and replies whose text grew (the
  CLI appends streamed text to the last message: each distinct text of a message is
  one ``AssistantReplied`` keyed ``msg:{id}:{text hash}``; read models show the last).
  The raw message travels with the first fact of each import; a fact added by a later
  import of the same message (a finished tool call) carries its data, not the raw.
  The hooks' copies (``BeforeAgent``, ``BeforeTool``/``AfterTool``, which know no
  message or call id: :mod:`ledger.sources.gemini_hooks`) meet the file's on
  ``prompt:{hash}:{n}`` (stored) and ``call:{hash of name and args}:{n}`` (handed
  over, not stored); the facts that follow a prompt name its ``prompt:`` alias, so
  they follow the hooks' prompt when the hooks recorded it first.
* v0.40+ JSONL: a header line ``{sessionId, projectHash, startTime, ...}``, one line
  per message (a message may be written again with the same ``id`` as it grows), and
  ``{"$set": {...}}`` patch lines for the header (kept as ``RecordObserved``).
* legacy ``{history: [{role, parts[{text}|{inlineData}]}], meta{model}, ...}``: the
  session is the file name, facts keyed by history position (the list only grows).
* a single message object (``{id, type, ...}``, how agentcmd's individual fixtures
  store one message): the session is the file name.

Messages: ``user`` -> ``PromptSubmitted``; ``gemini`` -> ``AssistantReplied``,
``ToolCallStarted``/``ToolCallCompleted`` per ``toolCalls[]`` entry (``status``
``success``; ``error`` and ``cancelled`` are failed, ``cancelled`` also interrupted;
any other status is still running and only starts the call) and ``UsageRecorded``
from ``tokens``; ``info``/``warning``/``error`` -> ``NotificationReceived``; any other
type -> ``RecordObserved`` with the raw message.

Tokens (see :func:`usage_from_tokens`): Gemini ``{input, output, cached, thoughts,
tool, total}`` with ``cached`` part of ``input`` and ``thoughts`` not part of
``output``; mapped to the Anthropic convention so that
``input_tokens + output_tokens + cache_read + cache_creation == total``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import Observation, Rejected, SessionRef, json_hash
from ledger.privacy import may_hold_private, strip_private
from ledger.sources.adapter_kit import (
    CallCounter,
    LineKeys,
    PromptCounter,
    as_int,
    as_str,
    parse_time,
    prompt_kind,
)
from ledger.sources.jsonl import guarded, numbered_lines, unreadable

AGENT = "gemini"
SOURCE_FORMAT = "gemini.chat"
SOURCE_FORMAT_JSONL = "gemini.chat-jsonl"
_DONE = {"success": False, "error": True, "cancelled": True}  # status -> is_error
_NOTICES = ("info", "warning", "error")


PRODUCES = {  # source_format -> Session events it yields (docs/events.md, ledger/catalogue.py)
    "gemini.chat": frozenset(
        {
            "AssistantReplied",
            "NotificationReceived",
            "PromptSubmitted",
            "RecordObserved",
            "ToolCallCompleted",
            "ToolCallStarted",
            "UsageRecorded",
        }
    ),
    "gemini.chat-jsonl": frozenset(
        {
            "AssistantReplied",
            "NotificationReceived",
            "PromptSubmitted",
            "RecordObserved",
            "ToolCallCompleted",
            "ToolCallStarted",
            "UsageRecorded",
        }
    ),
}

def usage_from_tokens(tokens: dict[str, Any]) -> dict[str, int]:
    """Gemini ``tokens`` -> ``UsageRecorded`` token fields (counts).

    ``input_tokens = input - cached + tool`` (tool-use prompt tokens are input the
    model read; ``cached`` is the cache-read part of ``input``), ``output_tokens =
    output + thoughts``, ``cache_read_input_tokens = cached``, no cache writes. The sum
    equals ``total`` whenever ``total == input + output + thoughts + tool`` (true for
    every message of the real fixtures, whose ``tool`` is always 0).
    """
    inp = as_int(tokens.get("input")) or 0
    cached = as_int(tokens.get("cached")) or 0
    return {
        "input_tokens": max(inp - cached, 0) + (as_int(tokens.get("tool")) or 0),
        "output_tokens": (as_int(tokens.get("output")) or 0)
        + (as_int(tokens.get("thoughts")) or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": min(cached, inp) if inp else cached,
    }


def parse_document(data: bytes, source: str, fallback_id: str) -> Iterator[Observation | Rejected]:
    """A ``.json`` chat file (any of the document shapes above).

    ``fallback_id`` (the file name without suffix) names the session when the document
    has no ``sessionId``. Raises ValueError for a JSON value that is no Gemini chat.
    """
    try:
        doc = jsontext.loads(data, max_depth=None)
    except orjson.JSONDecodeError as e:
        yield Rejected(source, "file", f"not valid JSON: {e}", data, AGENT, SOURCE_FORMAT)
        return
    if not isinstance(doc, dict):
        raise ValueError("a JSON document that is not a Gemini chat object")
    if jsontext.too_deep(doc, jsontext.MAX_DEPTH + 2):  # a message is two levels down
        yield Rejected(source, "file", str(jsontext.TooDeep()), data, AGENT, SOURCE_FORMAT)
        return
    parser = ChatParser(source, SOURCE_FORMAT, fallback_id)
    if isinstance(doc.get("messages"), list):
        yield from parser.header({k: v for k, v in doc.items() if k != "messages"}, "header")
        for i, msg in enumerate(doc["messages"]):
            where = f"messages[{i}]"
            try:  # the message's text is written only for the rejected record
                facts = list(parser.message(msg, where))
            except Exception as e:
                facts = [unreadable(e, orjson.dumps(msg), source, where, AGENT, SOURCE_FORMAT)]
            yield from facts
    elif isinstance(doc.get("history"), list):
        yield from parser.header({k: v for k, v in doc.items() if k != "history"}, "header")
        yield from parser.history(doc["history"], doc.get("meta"))
    elif isinstance(doc.get("type"), str) and "id" in doc:
        yield from parser.message(doc, "message")
    else:
        raise ValueError("a JSON object without messages[] or history[] (not a Gemini chat)")


def parse_jsonl(
    lines: Iterable[bytes], source: str, fallback_id: str
) -> Iterator[Observation | Rejected]:
    """A v0.40+ JSONL chat file: header, message lines and ``$set`` patch lines."""
    yield from ChatParser(source, SOURCE_FORMAT_JSONL, fallback_id).feed_lines(lines)


class ChatParser:
    """State of one chat file: its session, prompt order and record keys."""

    def __init__(self, source: str, fmt: str, fallback_id: str) -> None:
        self.source = source
        self.fmt = fmt
        self.fallback_id = fallback_id
        self.ref: SessionRef | None = None
        self.line_keys = LineKeys()
        self.prompts = PromptCounter()
        self.calls = CallCounter()
        """``call:{hash}:{n}`` of each tool call, handed over (``extra["call_alias"]``,
        never stored) so a hook's copy of the call (Gemini hooks carry no call id) and
        this file's are one call (``ledger.session.Session._same_call``)."""
        self.prompted: dict[str, str] = {}
        """Message id -> the ``prompt:`` alias of its first copy in the file."""
        self.last_prompt: str | None = None
        self.version: str | None = None

    def feed_lines(
        self, lines: Iterable[bytes], first: int = 1
    ) -> Iterator[Observation | Rejected]:
        """Feed the lines of a v0.40+ JSONL chat file, numbered from ``first`` (a line's
        location is ``line N``); blank lines are skipped, and counted."""
        for lineno, line in numbered_lines(lines, first):
            where = f"line {lineno}"
            try:
                rec = jsontext.loads(line)
            except orjson.JSONDecodeError as e:
                reason = f"not valid JSON: {e}"
                yield Rejected(self.source, where, reason, line, AGENT, SOURCE_FORMAT_JSONL)
                continue
            if not isinstance(rec, dict):
                reason = f"record is a JSON {type(rec).__name__}, not an object"
                yield Rejected(self.source, where, reason, line, AGENT, SOURCE_FORMAT_JSONL)
            else:
                yield from guarded(
                    lambda: self._line(rec, line, where),  # noqa: B023 (called at once)
                    line, self.source, where, AGENT, SOURCE_FORMAT_JSONL,
                )

    def _line(self, rec: dict[str, Any], line: bytes, where: str) -> Iterator[Observation]:
        """The facts of one JSONL record (an object)."""
        if "id" in rec and "type" in rec:
            yield from self.message(rec, where)
        elif "sessionId" in rec and self.ref is None:
            yield from self.header(rec, where)
        else:
            label = "$set" if "$set" in rec else (as_str(rec.get("type")) or "(none)")
            yield from self.record(rec, label, self.line_keys.key(line))

    @property
    def session(self) -> SessionRef:
        if self.ref is None:
            self.ref = SessionRef(AGENT, self.fallback_id)
        return self.ref

    def _obs(
        self, kind: str, key: str, data: dict[str, Any], at: Any, record_key: str
    ) -> Observation:
        return Observation(
            self.session,
            kind,
            key,
            data,
            source_format=self.fmt,
            source_version=self.version,
            occurred_at=parse_time(at),
            record_key=record_key,
            after_prompt=self.last_prompt,
        )

    def _with_raw(self, facts: list[Observation], raw: dict[str, Any]) -> list[Observation]:
        redactions: list[dict[str, Any]] = []
        text = orjson.dumps(raw)
        if may_hold_private(text):
            raw, redactions = strip_private(raw, raw=text)
            facts = [_strip(f) for f in facts]
        facts[0].raw = raw
        facts[0].redactions = tuple(redactions)
        return facts

    def header(self, head: dict[str, Any], where: str) -> Iterator[Observation]:
        sid = as_str(head.get("sessionId"))
        self.ref = SessionRef(AGENT, sid or self.fallback_id)
        self.version = as_str(head.get("version"))
        at = head.get("startTime") or head.get("start_time")
        obs = self._obs(
            "RecordObserved", "gemini:session", {"record_type": "session"}, at, "gemini:session"
        )
        yield from self._with_raw([obs], head)

    def record(self, rec: dict[str, Any], label: str, key: str) -> Iterator[Observation]:
        """A line with no modelled fact (``$set`` patch, unknown type): kept whole."""
        obs = self._obs("RecordObserved", key, {"record_type": label}, rec.get("timestamp"), key)
        yield from self._with_raw([obs], rec)

    def message(self, msg: Any, where: str) -> Iterator[Observation | Rejected]:
        if not isinstance(msg, dict):
            data = orjson.dumps(msg)
            yield Rejected(
                self.source, where, "message is not a JSON object", data, AGENT, self.fmt
            )
            return
        mid = as_str(msg.get("id")) or self.line_keys.key(
            orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)
        )
        mtype = as_str(msg.get("type")) or "(none)"
        key = f"msg:{mid}"
        at = msg.get("timestamp")
        if mtype == "user":
            facts = self._user(msg, mid, key, at)
        elif mtype == "gemini":
            facts = self._gemini(msg, mid, key, at)
        elif mtype in _NOTICES:
            text = _text(msg.get("content"))
            facts = [
                self._obs(
                    "NotificationReceived",
                    key,
                    {"message": text, "notification_type": mtype},
                    at,
                    key,
                )
            ]
        else:
            facts = []
        if not facts:
            facts = [self._obs("RecordObserved", key, {"record_type": f"message:{mtype}"}, at, key)]
        yield from self._with_raw(facts, msg)

    def _user(self, msg: dict[str, Any], mid: str, key: str, at: Any) -> list[Observation]:
        text = _text(msg.get("content"))
        if not text.strip():
            return []
        kind = prompt_kind(text)
        obs = self._obs("PromptSubmitted", key, {"text": text, "prompt_kind": kind}, at, key)
        obs.after_prompt = None
        if mid not in self.prompted:  # a message written again keeps its first alias
            self.prompted[mid] = self.prompts.alias(self.session.external_id, _stored(text))
            obs.alias_keys = (self.prompted[mid],)
        if kind == "human":  # its followers name the alias, which the hook's copy shares
            self.last_prompt = self.prompted[mid]
        return [obs]

    def _gemini(self, msg: dict[str, Any], mid: str, key: str, at: Any) -> list[Observation]:
        model = as_str(msg.get("model"))
        calls = [c for c in msg.get("toolCalls") or [] if isinstance(c, dict)]
        thoughts = msg.get("thoughts")
        text = _text(msg.get("content"))
        # The CLI appends streamed text to the message in place: a longer text is a new
        # reply fact for the same message_id (read models show the last one).
        facts = [
            self._obs(
                "AssistantReplied",
                f"{key}:{json_hash(text)}",
                {
                    "message_id": mid,
                    "model": model,
                    "text": text,
                    "has_thinking": bool(thoughts) if isinstance(thoughts, list) else False,
                },
                at,
                key,
            )
        ]
        for i, call in enumerate(calls):
            facts.extend(self._tool_call(call, f"{mid}:tool{i}", mid, at, key))
        tokens = msg.get("tokens")
        if isinstance(tokens, dict):
            usage = usage_from_tokens(tokens)
            ukey = f"usage:{mid}:{json_hash(usage)}"
            facts.append(
                self._obs(
                    "UsageRecorded", ukey, {"message_id": mid, "model": model, **usage}, at, key
                )
            )
        return facts

    def _tool_call(
        self, call: dict[str, Any], fallback: str, mid: str, at: Any, key: str
    ) -> list[Observation]:
        cid = as_str(call.get("id")) or fallback
        name = as_str(call.get("name")) or "(unknown)"
        started = self._obs(
            "ToolCallStarted",
            f"tool:{cid}:start",
            {
                "tool_use_id": cid,
                "tool_name": name,
                "tool_input": call.get("args"),
                "message_id": mid,
            },
            at,
            key,
        )
        alias = self.calls.alias(name, _stored(call.get("args")), call_id=cid)
        started.extra["call_alias"] = alias
        status = as_str(call.get("status"))
        if status not in _DONE:
            return [started]
        is_error = _DONE[status]
        error = _tool_error(call) if is_error else None
        ended = self._obs(
            "ToolCallCompleted",
            f"tool:{cid}:end",
            {
                "tool_use_id": cid,
                "tool_name": name,
                "output": call.get("result"),
                "is_error": is_error,
                "error": error or (status if is_error else None),
                "interrupted": status == "cancelled",
            },
            call.get("timestamp") or at,
            key,
        )
        ended.extra["call_alias"] = f"{alias}:end"
        return [started, ended]

    def history(self, items: list[Any], meta: Any) -> Iterator[Observation | Rejected]:
        """Legacy ``history[]`` of ``{role, parts[]}`` entries (no ids: keyed by position)."""
        model = as_str(meta.get("model")) if isinstance(meta, dict) else None
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                data = orjson.dumps(item)
                yield Rejected(
                    self.source,
                    f"history[{i}]",
                    "entry is not a JSON object",
                    data,
                    AGENT,
                    self.fmt,
                )
                continue
            key = f"history:{i}"
            role = as_str(item.get("role")) or "(none)"
            text = _text(item.get("parts"))
            if role == "user" and text.strip():
                self.last_prompt = None
                obs = self._obs(
                    "PromptSubmitted",
                    key,
                    {"text": text, "prompt_kind": prompt_kind(text)},
                    None,
                    key,
                )
                obs.alias_keys = (self.prompts.alias(self.session.external_id, _stored(text)),)
                self.last_prompt = obs.alias_keys[0]  # as in :meth:`_user`
            elif role in ("gemini", "model"):
                obs = self._obs(
                    "AssistantReplied",
                    key,
                    {"message_id": key, "model": model, "text": text},
                    None,
                    key,
                )
            else:
                obs = self._obs(
                    "RecordObserved", key, {"record_type": f"history:{role}"}, None, key
                )
            yield from self._with_raw([obs], item)


def _text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of ``{text}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _tool_error(call: dict[str, Any]) -> str | None:
    for part in call.get("result") or []:
        fr = part.get("functionResponse") if isinstance(part, dict) else None
        resp = fr.get("response") if isinstance(fr, dict) else None
        if isinstance(resp, dict) and isinstance(resp.get("error"), str):
            return resp["error"]
    return as_str(call.get("resultDisplay"))


def _stored(value: Any) -> Any:
    """``value`` as a hook payload stores it (private spans and secrets removed): the
    ``prompt:`` and ``call:`` aliases hash this, as the hooks' copies do."""
    return strip_private(value)[0]


def _strip(obs: Observation) -> Observation:
    obs.data, _ = strip_private(obs.data)
    return obs
