"""One tool call seen twice — by a hook and by a file import, or by a hook's completion
before its start — is counted once, whichever sighting arrives first, and the second
sighting is kept (its raw record), not dropped.

Real data: the Cursor transcripts ``cursor_transcript_schema_drift.jsonl`` and
``cursor_transcript_small.jsonl`` (jazzyalex/agent-sessions, sanitised from real
files), the Gemini CLI chat file ``session-2025-10-29T10-36-453aa339.json`` (agentcmd)
and the 2025 Claude Code ``PreToolUse``/``PostToolUse`` payloads of
``attio-mcp-server-hook-logs`` (no ``tool_use_id``). No licensed Cursor or Gemini hook
capture exists (FORMATS.md B, "Gaps"): their hook payloads are BUILT BY HAND in the
documented shapes (FORMATS.md A7, A8) from the prompts, tool names and inputs of those
real files.

Each step (an import, a run of hooks) uses its own ``build()`` of the store, so the
aggregate the later step writes to is rebuilt from the stored events.
"""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from test_analytics import differences

from api.bootstrap import Services, build
from ledger.config import Settings
from ledger.envelope import raw_record
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import SessionRef
from projections import queries
from projections.analytics import catch_up, open_snapshot
from projections.base import iso

from conftest import FIXTURES

DRIFT = FIXTURES / "agent-sessions-schema-drift"
CHAT = FIXTURES / "agentcmd-gemini-sessions" / "session-2025-10-29T10-36-453aa339.json"
ATTIO = FIXTURES / "attio-mcp-server-hook-logs"
AT = datetime(2026, 3, 1, tzinfo=UTC)

Step = Callable[[Services], None]


def _run(settings: Settings, steps: list[Step]) -> None:
    for step in steps:
        services = build(settings)
        try:
            step(services)
        finally:
            services.close()


def _facts(row: dict[str, Any]) -> dict[str, Any]:
    """What a read model says happened: counts, status, prompts, and each tool call's
    tool, input, outcome and batch (not the ids, times, positions and output detail,
    which are whichever source's sighting came first)."""
    out = {
        k: row[k]
        for k in (
            "agent", "external_id", "status", "prompt_count", "batch_count",
            "tool_call_count", "tool_error_count", "input_tokens", "output_tokens",
        )
    }
    if "batches" in row:
        out["batches"] = [
            (b["batch"], b["prompt"], b["tool_call_count"], b["tool_error_count"], b["status"])
            for b in row["batches"]
        ]
        out["tool_calls"] = sorted(
            (c["batch"], c["tool_name"], json.dumps(c["tool_input"], sort_keys=True),
             c["status"], c["is_error"])
            for c in row["tool_calls"]
        )
    return out


def _read(settings: Settings, agent: str) -> dict[str, Any]:
    """``sessions --json`` and ``show --json`` of every session of ``agent``, as facts."""
    services = build(settings)
    try:
        services.runner.catch_up()
        rows = queries.list_sessions(services.models, agent=agent)
        views = {}
        for row in rows:
            detail = queries.get_session(services.models, row["id"])
            assert detail is not None
            views[row["external_id"]] = (_facts(row), _facts(detail))
        return views
    finally:
        services.close()


def _events(settings: Settings, agent: str, external_id: str) -> list[Any]:
    services = build(settings)
    try:
        return list(services.ledger.repository.event_store.get(SessionRef(agent, external_id).id))
    finally:
        services.close()


def _hook_step(agent: str, payloads: list[dict[str, Any]], prefix: str, appended: list[int]) -> Step:
    def step(services: Services) -> None:
        n = 0
        for i, p in enumerate(payloads):
            out = ingest_hook(services.ledger, agent, json.dumps(p).encode(), f"{prefix}-{i}", AT)
            assert out.error is None, out.error
            assert out.result is not None
            n += out.result.appended
        appended.append(n)

    return step


def _import_step(paths: list[Path]) -> Step:
    def step(services: Services) -> None:
        import_paths(services.ledger, paths)

    return step


def _kept_hook_records(events: list[Any], names: set[str], field: str) -> list[str]:
    """The hook names of the raw hook payloads kept in a stream (one per capture)."""
    raws = [raw_record(e) for e in events]
    return sorted(r[field] for r in raws if isinstance(r, dict) and r.get(field) in names)


# -- Cursor: hooks and the agent transcript ---------------------------------------------


def _cursor(tmp_path: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """Two conversations: the drift transcript (prompt, a ``tool_call`` and its result),
    and the small one (two prompts, a ``tool_use`` whose result only the hooks saw);
    transcripts named by conversation id, and hook payloads of the same turns."""
    base = {"generation_id": "g", "model": "cursor-auto", "cursor_version": "2.6.1",
            "workspace_roots": ["/w"], "transcript_path": None}
    drift = [json.loads(x) for x in (DRIFT / "cursor_transcript_schema_drift.jsonl").read_text().splitlines()]
    (call,) = [b for b in drift[1]["message"]["content"] if b["type"] == "tool_call"]
    tool = {"tool_name": call["name"], "tool_input": call["input"], "tool_use_id": "call_9\nctc_9"}
    small = [json.loads(x) for x in (DRIFT / "cursor_transcript_small.jsonl").read_text().splitlines()]
    (use,) = [b for b in small[3]["message"]["content"] if b["type"] == "tool_use"]
    bash = {"tool_name": use["name"], "tool_input": use["input"], "tool_use_id": "call_1\nctc_1"}
    hooks = [
        {"conversation_id": "c-drift", "hook_event_name": "sessionStart", "session_id": "c-drift"},
        {"conversation_id": "c-drift", "hook_event_name": "beforeSubmitPrompt",
         "prompt": drift[0]["message"]["content"][0]["text"], "attachments": []},
        {"conversation_id": "c-drift", "hook_event_name": "preToolUse", **tool},
        {"conversation_id": "c-drift", "hook_event_name": "postToolUse", **tool,
         "tool_output": "{}", "duration": 5},
        {"conversation_id": "c-drift", "hook_event_name": "stop", "status": "completed"},
        {"conversation_id": "c-small", "hook_event_name": "sessionStart", "session_id": "c-small"},
        {"conversation_id": "c-small", "hook_event_name": "beforeSubmitPrompt",
         "prompt": small[0]["message"]["content"][0]["text"]},
        {"conversation_id": "c-small", "hook_event_name": "stop", "status": "completed"},
        {"conversation_id": "c-small", "hook_event_name": "beforeSubmitPrompt",
         "prompt": small[2]["message"]["content"][0]["text"]},
        {"conversation_id": "c-small", "hook_event_name": "preToolUse", **bash},
        {"conversation_id": "c-small", "hook_event_name": "postToolUse", **bash,
         "tool_output": json.dumps({"output": "a.py"}), "duration": 7},
        {"conversation_id": "c-small", "hook_event_name": "stop", "status": "completed"},
    ]
    paths = []
    for name, conv in (("cursor_transcript_schema_drift.jsonl", "c-drift"),
                       ("cursor_transcript_small.jsonl", "c-small")):
        path = tmp_path / f"{conv}.jsonl"
        path.write_bytes((DRIFT / name).read_bytes())
        paths.append(path)
    return paths, [{**base, **h} for h in hooks]


def test_cursor_transcript_before_its_hooks_counts_what_hooks_before_it_count(
    settings: Settings, other_settings: Settings, tmp_path: Path
) -> None:
    """Hooks then the transcript, and the transcript then the hooks (then the hooks
    replayed and the transcript imported again): the same sessions, batches and tool
    calls. Each call once: before, a transcript imported first made the hook's
    ``preToolUse`` a duplicate and its ``postToolUse`` a second call."""
    paths, hooks = _cursor(tmp_path)
    first: list[int] = []
    again: list[int] = []
    _run(settings, [_hook_step("cursor", hooks, "h", first), _import_step(paths)])
    _run(other_settings, [
        _import_step(paths),
        _hook_step("cursor", hooks, "h", first),
        _hook_step("cursor", hooks, "h", again),  # a replay of the same captures
        _import_step(paths),
    ])
    hooks_first, import_first = _read(settings, "cursor"), _read(other_settings, "cursor")
    assert import_first == hooks_first
    assert again == [0]
    for conv, prompts in (("c-drift", 1), ("c-small", 2)):
        row, detail = import_first[conv]
        assert (row["tool_call_count"], row["prompt_count"]) == (1, prompts)
        assert [c[3] for c in detail["tool_calls"]] == ["completed"]
        assert row["status"] == "WAITING"

    # The transcript came first: the hooks' copies of its prompts and calls are kept
    # whole (their raw payloads), one record per capture; the call whose result only
    # the hooks saw is completed by the hook's postToolUse, under the transcript's call.
    tools = {"beforeSubmitPrompt", "preToolUse", "postToolUse"}
    for conv in ("c-drift", "c-small"):
        sent = sorted(h["hook_event_name"] for h in hooks
                      if h["conversation_id"] == conv and h["hook_event_name"] in tools)
        kept = _kept_hook_records(_events(other_settings, "cursor", conv), tools, "hook_event_name")
        assert kept == sent


def test_a_cursor_post_tool_use_without_its_pre_or_before_it_is_one_call(
    services: Services, tmp_path: Path
) -> None:
    """A ``postToolUse`` whose ``preToolUse`` never arrives, or arrives after it (a
    capture spooled and delivered late), with the transcript imported before the hooks,
    after them or not at all: one call per conversation, the same facts as the hooks in
    order give, completed with the ``postToolUse``'s outcome; a ``preToolUse`` arriving
    later gives the call its capture time and input. Before, the completion derived a
    start with no input and no ``call:`` alias, so the transcript's copy of the call was
    a second call whichever came first, and the late ``preToolUse`` changed nothing.

    Each hook is captured in the order of the turn (one second apart) and delivered in
    the order given; the aggregate is read back from the store after each delivery."""
    paths, hooks = _cursor(tmp_path)
    in_order = [(AT + timedelta(seconds=i), h) for i, h in enumerate(hooks)]
    captured = {id(h): at for at, h in in_order}
    orders = {
        "in-order": in_order,
        "posts-first": [(captured[id(h)], h) for h in _posts_first(hooks, "preToolUse", "postToolUse")],
        "no-pre": [(at, h) for at, h in in_order if h["hook_event_name"] != "preToolUse"],
    }
    seen: dict[str, set[str]] = {"c-drift": set(), "c-small": set()}
    for order, delivered in orders.items():
        for transcript in ("first", "last", "none"):
            tag = f"{order}-{transcript}"
            copies = []
            for path in paths:
                copy = tmp_path / f"{path.stem}-{tag}.jsonl"
                copy.write_bytes(path.read_bytes())
                copies.append(copy)
            mine = [(at, {**h, "conversation_id": f"{h['conversation_id']}-{tag}"}) for at, h in delivered]
            if transcript == "first":
                import_paths(services.ledger, copies)
            for i, (at, h) in enumerate(mine):
                out = ingest_hook(services.ledger, "cursor", json.dumps(h).encode(), f"{tag}-{i}", at)
                assert out.error is None, out.error
                # the next delivery meets the session as rebuilt from the store
                services.ledger.session(SessionRef("cursor", h["conversation_id"]).id)
            if transcript == "last":
                import_paths(services.ledger, copies)
            for i, (at, h) in enumerate(mine):  # a redelivery appends nothing
                out = ingest_hook(services.ledger, "cursor", json.dumps(h).encode(), f"{tag}-{i}", at)
                assert out.result is not None and out.result.appended == 0, tag
            services.runner.catch_up()
            for conv in seen:
                detail = queries.get_session(services.models, str(SessionRef("cursor", f"{conv}-{tag}").id))
                assert detail is not None
                facts = _facts(detail)
                del facts["external_id"]
                assert (facts["tool_call_count"], len(detail["tool_calls"])) == (1, 1), (conv, tag)
                seen[conv].add(json.dumps(facts, sort_keys=True))
                (call,) = detail["tool_calls"]
                pre, post = (
                    next((at, h) for at, h in in_order
                         if h["conversation_id"] == conv and h["hook_event_name"] == name)
                    for name in ("preToolUse", "postToolUse")
                )
                assert call["status"] == "completed" and call["tool_input"] == pre[1]["tool_input"]
                if conv == "c-small":  # only the hooks saw its result: the post's outcome
                    assert call["output"] == json.loads(post[1]["tool_output"])
                    assert call["duration_ms"] == post[1]["duration"]
                    assert call["completed_at"] == iso(post[0])
                if order != "no-pre" and transcript != "first":  # the start the hooks captured
                    assert call["started_at"] == iso(pre[0]), (conv, tag)
    assert all(len(facts) == 1 for facts in seen.values()), seen


# -- Gemini CLI: hooks and the chat file ------------------------------------------------


def _gemini_hooks() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Hook payloads of the real chat file's turn: its prompt, each ``toolCalls[]``
    entry's ``BeforeTool``/``AfterTool`` (``name``, ``args``), and the turn's end."""
    doc = json.loads(CHAT.read_text())
    base = {"session_id": doc["sessionId"], "transcript_path": str(CHAT), "cwd": "/private/tmp/gemini-test"}
    calls = [c for m in doc["messages"] for c in m.get("toolCalls") or []]
    prompt = next(m for m in doc["messages"] if m["type"] == "user")
    hooks = [
        {**base, "hook_event_name": "SessionStart", "source": "startup", "timestamp": doc["startTime"]},
        {**base, "hook_event_name": "BeforeAgent", "prompt": prompt["content"],
         "timestamp": prompt["timestamp"]},
    ]
    for c in calls:
        tool = {"tool_name": c["name"], "tool_input": c["args"], "timestamp": c["timestamp"]}
        hooks.append({**base, "hook_event_name": "BeforeTool", **tool})
        hooks.append({**base, "hook_event_name": "AfterTool", **tool,
                      "tool_response": {"llmContent": "ok", "returnDisplay": ""}})
    hooks.append({**base, "hook_event_name": "AfterAgent", "prompt": prompt["content"],
                  "prompt_response": "Done.", "timestamp": doc["lastUpdated"]})
    return doc["sessionId"], calls, hooks


def test_gemini_hook_tool_calls_and_chat_tool_calls_are_one_call_in_either_order(
    settings: Settings, other_settings: Settings
) -> None:
    """``BeforeTool``/``AfterTool`` carry no call id; the chat file's ``toolCalls[]`` do.
    They meet on tool name and input (n-th such call): three calls, not six, whichever
    source comes first; the chat imported first keeps its ids, the hooks' sightings
    are kept as records."""
    sid, calls, hooks = _gemini_hooks()
    assert len(calls) == 3 and len({c["id"] for c in calls}) == 3
    assert calls[0]["name"] == calls[2]["name"] and calls[0]["args"] == calls[2]["args"]
    first: list[int] = []
    again: list[int] = []
    _run(settings, [_hook_step("gemini", hooks, "g", first), _import_step([CHAT])])
    _run(other_settings, [
        _import_step([CHAT]),
        _hook_step("gemini", hooks, "g", first),
        _hook_step("gemini", hooks, "g", again),
    ])
    hooks_first, chat_first = _read(settings, "gemini"), _read(other_settings, "gemini")
    assert chat_first == hooks_first
    assert again == [0]
    row, detail = chat_first[sid]
    assert row["tool_call_count"] == len(calls) and row["prompt_count"] == 1
    assert [c[3] for c in detail["tool_calls"]] == ["completed"] * 3

    services = build(other_settings)
    try:
        services.runner.catch_up()
        shown = queries.get_session(services.models, str(SessionRef("gemini", sid).id))
        assert shown is not None
        assert [c["tool_use_id"] for c in shown["tool_calls"]] == [c["id"] for c in calls]
    finally:
        services.close()
    tools = {"BeforeTool", "AfterTool"}
    kept = _kept_hook_records(_events(other_settings, "gemini", sid), tools, "hook_event_name")
    assert kept == sorted(h["hook_event_name"] for h in hooks if h["hook_event_name"] in tools)


# -- Claude Code 2025 hooks: a completion before its start -------------------------------


def _attio(name: str) -> list[dict[str, Any]]:
    sessions = {"4111cd2e-9717-438e-877c-d300c22459a8", "6706089d-9d7e-4f48-bd2d-8f2a2546eb78"}
    return [p for p in json.loads((ATTIO / f"{name}.json").read_text()) if p["session_id"] in sessions]


def test_2025_hooks_count_each_call_once_whether_posts_or_pres_come_first(
    settings: Settings, other_settings: Settings
) -> None:
    """The real 2025 payloads (no ``tool_use_id``; paired by tool and input) of the two
    attio sessions that have both ``PreToolUse`` and ``PostToolUse``: every ``Pre``
    first, or every ``Post`` first (as a replay of the files in name order delivers
    them). A ``Post`` first derives its call's start; the ``Pre`` arriving later is that
    start, kept as a record, not a second call (before, it was appended as one: 221
    calls too many here). Replaying the captures adds nothing."""
    pres, posts = _attio("pre_tool_use"), _attio("post_tool_use")
    assert not any("tool_use_id" in p for p in pres + posts)
    first: list[int] = []
    again: list[int] = []
    _run(settings, [_hook_step("claude-code", pres, "pre", first),
                    _hook_step("claude-code", posts, "post", first)])
    _run(other_settings, [_hook_step("claude-code", posts, "post", first),
                          _hook_step("claude-code", pres, "pre", first),
                          _hook_step("claude-code", posts, "post", again),  # replayed
                          _hook_step("claude-code", pres, "pre", again)])
    assert again == [0, 0]
    pres_first, posts_first = _read(settings, "claude-code"), _read(other_settings, "claude-code")
    assert pres_first.keys() == posts_first.keys()
    for sid, (row, detail) in pres_first.items():
        other_row, other_detail = posts_first[sid]
        assert other_row["tool_call_count"] == row["tool_call_count"]
        assert other_detail["tool_calls"] == detail["tool_calls"]

    def call(p: dict[str, Any]) -> tuple[str, str]:
        return (p["tool_name"], json.dumps(p["tool_input"], sort_keys=True))

    want = Counter(map(call, pres)) | Counter(map(call, posts))  # max(#Pre, #Post) per call
    got = Counter(c[1:3] for _, detail in posts_first.values() for c in detail["tool_calls"])
    assert got == want
    assert sum(row["tool_call_count"] for row, _ in posts_first.values()) == sum(want.values())


# -- both agents: the import arriving anywhere among the hooks ---------------------------


def test_an_import_arriving_anywhere_among_the_hooks_counts_each_call_once(
    services: Services, tmp_path: Path
) -> None:
    """The file imported after the first k hooks of its session, for every k (one
    session per k: a copy of the real file under its own session id). Same prompts and
    calls every time. Before, among others: a Gemini call the hooks started and the
    chat file completed was counted again when the hooks' ``AfterTool`` arrived."""
    paths, cursor_hooks = _cursor(tmp_path)
    small = [h for h in cursor_hooks if h["conversation_id"] == "c-small"]
    sid, calls, gemini_hooks = _gemini_hooks()
    doc = json.loads(CHAT.read_text())
    seen: dict[str, set[tuple[Any, ...]]] = {"cursor": set(), "gemini": set()}
    for k in range(len(gemini_hooks) + 1):
        conv = f"c-small-{k}"
        cursor_path = tmp_path / f"{conv}.jsonl"
        cursor_path.write_bytes(paths[1].read_bytes())
        chat_path = tmp_path / f"chat-{k}.json"
        chat_path.write_text(json.dumps({**doc, "sessionId": f"{sid}-{k}"}))
        sessions = (
            ("cursor", conv, [{**h, "conversation_id": conv} for h in small], cursor_path),
            ("gemini", f"{sid}-{k}", [{**h, "session_id": f"{sid}-{k}"} for h in gemini_hooks], chat_path),
        )
        for agent, external, hooks, path in sessions:
            for i, h in enumerate(hooks[:k]):
                ingest_hook(services.ledger, agent, json.dumps(h).encode(), f"{external}-{i}", AT)
            import_paths(services.ledger, [path])
            for i, h in enumerate(hooks[k:], start=k):
                ingest_hook(services.ledger, agent, json.dumps(h).encode(), f"{external}-{i}", AT)
            services.runner.catch_up()
            detail = queries.get_session(services.models, str(SessionRef(agent, external).id))
            assert detail is not None
            facts = _facts(detail)
            del facts["external_id"]
            seen[agent].add(json.dumps(facts, sort_keys=True))
    assert len(seen["cursor"]) == len(seen["gemini"]) == 1
    cursor, gemini = (json.loads(next(iter(seen[a]))) for a in ("cursor", "gemini"))
    assert (cursor["tool_call_count"], cursor["prompt_count"]) == (1, 2)
    assert (gemini["tool_call_count"], gemini["prompt_count"]) == (len(calls), 1)


# -- a hook's completion before its start, the file imported first ---------------------


def _events_of(services: Services, agent: str, external_id: str) -> list[Any]:
    return list(services.ledger.repository.event_store.get(SessionRef(agent, external_id).id))


def _posts_first(hooks: list[dict[str, Any]], pre: str, post: str) -> list[dict[str, Any]]:
    """``hooks`` with each completion moved before its start (a spooled start delivered
    after its completion, or a replay of hook logs in name order)."""
    out = list(hooks)
    for i in range(len(out) - 1):
        if out[i]["hook_event_name"] == pre and out[i + 1]["hook_event_name"] == post:
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def test_a_hook_completion_before_its_start_meets_the_file_imported_first(
    services: Services, tmp_path: Path
) -> None:
    """An id-less hook's completion that arrives before its start (no start open) and a
    file that recorded the call first: the completion is the file's call's (kept as a
    record, or its completion when the file has none), its start arriving later is the
    late start of that call. Each call once, whatever the order of file, starts and
    completions: before, a start after its completion was a second call, and so was a
    completion with no open start when the file came first (completions first: Gemini 5
    calls for 3, the attio 2025 session 74 for 37, file first or last).

    Gemini: the real chat file and hooks of its calls (built by hand, above). Claude
    Code 2025: the real ``PreToolUse`` payloads of attio session 8664c04e and its
    transcript; the logger kept no ``PostToolUse`` of that session, so each is built
    from its ``PreToolUse`` (same tool and input, documented shape)."""
    sid, calls, gemini = _gemini_hooks()
    doc = json.loads(CHAT.read_text())
    claude_sid = "8664c04e-75fa-497d-ac11-57d69997e3ec"
    transcript = ATTIO / "chat.json"
    pres = [p for p in json.loads((ATTIO / "pre_tool_use.json").read_text()) if p["session_id"] == claude_sid]
    claude: list[dict[str, Any]] = []
    for p in pres:
        claude += [p, {**p, "hook_event_name": "PostToolUse", "tool_response": "ok"}]
    cases = (
        ("gemini", sid, gemini, ("BeforeTool", "AfterTool"), len(calls)),
        ("claude-code", claude_sid, claude, ("PreToolUse", "PostToolUse"), len(pres)),
    )
    for agent, external, hooks, (pre, post), want in cases:
        seen = set()
        for order in ("starts-first", "completions-first"):
            ordered = hooks if order == "starts-first" else _posts_first(hooks, pre, post)
            for file_first in (True, False):
                name = f"{external}-{order}-{file_first}"
                if agent == "gemini":
                    path = tmp_path / f"{name}.json"
                    path.write_text(json.dumps({**doc, "sessionId": name}))
                else:
                    path = tmp_path / f"{name}.jsonl"
                    path.write_text(transcript.read_text().replace(claude_sid, name))
                mine = [{**h, "session_id": name} for h in ordered]
                if file_first:
                    import_paths(services.ledger, [path])
                for i, h in enumerate(mine):
                    ingest_hook(services.ledger, agent, json.dumps(h).encode(), f"{name}-{i}", AT)
                if not file_first:
                    import_paths(services.ledger, [path])
                for i, h in enumerate(mine):  # a redelivery appends nothing
                    out = ingest_hook(services.ledger, agent, json.dumps(h).encode(), f"{name}-{i}", AT)
                    assert out.result is not None and out.result.appended == 0
                services.runner.catch_up()
                detail = queries.get_session(services.models, str(SessionRef(agent, name).id))
                assert detail is not None
                facts = _facts(detail)
                del facts["external_id"]
                assert facts["tool_call_count"] == want, (agent, order, file_first)
                seen.add(json.dumps(facts, sort_keys=True))
                kept = _kept_hook_records(
                    _events_of(services, agent, name), {pre, post}, "hook_event_name"
                )
                assert kept == sorted(h["hook_event_name"] for h in hooks if h["hook_event_name"] in (pre, post))
        assert len(seen) == 1, agent



# -- Claude Code: 2025 hooks and stream-json (hookledger run, import) --------------------

STREAMS = [p for p in sorted((FIXTURES / "claude_code-elixir-stream-json").glob("*.jsonl"))
           if '"tool_use"' in p.read_text()]


def _stream_turn(path: Path) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A real ``claude -p --output-format stream-json`` recording (mid 2025): its session
    id, its records, and the hook payloads of its tool calls as that era's Claude Code
    sent them: a ``PreToolUse``, and a ``PostToolUse`` unless the tool failed, without
    ``tool_use_id``. No hook capture of these runs exists: each payload is the first real
    attio payload of its kind with the stream's session, tool name, input and result."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    sid = records[0]["session_id"]
    pre = json.loads((ATTIO / "pre_tool_use.json").read_text())[0]
    post = json.loads((ATTIO / "post_tool_use.json").read_text())[0]
    results = {b["tool_use_id"]: b for r in records if r["type"] == "user" for b in r["message"]["content"]}
    hooks = []
    for r in records:
        for b in r["message"]["content"] if r["type"] == "assistant" else []:
            if b["type"] != "tool_use":
                continue
            tool = {"session_id": sid, "tool_name": b["name"], "tool_input": b["input"]}
            hooks.append({**pre, **tool})
            if results[b["id"]].get("is_error") is not True:
                hooks.append({**post, **tool, "tool_response": results[b["id"]]["content"]})
    return sid, records, hooks


def test_2025_hooks_and_a_stream_json_import_are_each_call_once_in_either_order(
    settings: Settings, other_settings: Settings
) -> None:
    """The hooks (no ``tool_use_id``) of a stream's tool calls, then the stream imported,
    and the other way round (then both delivered again): the same sessions and calls,
    each call once. Before, the stream's calls handed over no ``call:`` alias, so the
    stream imported after the hooks counted each call a second time."""
    hooks = [h for path in STREAMS for h in _stream_turn(path)[2]]
    first: list[int] = []
    again: list[int] = []
    _run(settings, [_hook_step("claude-code", hooks, "h", first), _import_step(STREAMS)])
    _run(other_settings, [
        _import_step(STREAMS),
        _hook_step("claude-code", hooks, "h", first),
        _hook_step("claude-code", hooks, "h", again),
        _import_step(STREAMS),
    ])
    hooks_first, stream_first = _read(settings, "claude-code"), _read(other_settings, "claude-code")
    assert hooks_first == stream_first
    assert again == [0]
    for path in STREAMS:
        sid, records, _ = _stream_turn(path)
        calls = [b for r in records if r["type"] == "assistant" for b in r["message"]["content"]
                 if b["type"] == "tool_use"]
        row, detail = hooks_first[sid]
        assert row["tool_call_count"] == len(calls) == len(detail["tool_calls"]), path.name
        assert [c[1:3] for c in detail["tool_calls"]] == [
            (c["name"], json.dumps(c["input"], sort_keys=True)) for c in calls
        ]
        kinds = [type(e).__name__ for e in _events(settings, "claude-code", sid)]
        assert kinds.count("ToolCallStarted") == len(calls)


def _hooks_ahead(services: Services, sid: str, records: list[dict[str, Any]],
                hooks: list[dict[str, Any]], delivered: list[str]) -> Callable[[bytes], None]:
    """``run_agent``'s ``on_line``: delivers the hooks of the recording's one tool call once
    the line before its ``tool_use`` line is recorded (the hook's HTTP post beating the
    agent's buffered stdout)."""
    (call_line,) = [i for i, r in enumerate(records) if r["type"] == "assistant"
                    and any(b["type"] == "tool_use" for b in r["message"]["content"])]
    recorded = 0

    def on_line(_line: bytes) -> None:
        nonlocal recorded
        recorded += 1
        if recorded == call_line:
            for h in hooks:
                key = f"{sid}-{len(delivered)}"
                out = ingest_hook(services.ledger, "claude-code", json.dumps(h).encode(), key, AT)
                assert out.error is None, out.error
                delivered.append(key)

    return on_line


def test_a_run_whose_2025_hooks_arrive_before_its_stream_lines_counts_each_call_once(
    services: Services,
) -> None:
    """``hookledger run`` replaying each real recording while the hooks of its tool call
    arrive ahead of the stream, then the recording imported: each call once, with its
    outcome. Before, the run recorded the stream's copy of the call as a second call."""
    from ledger.agent_runner import run_agent

    fake = Path(__file__).parent / "tools" / "fake_agent.py"
    for path in STREAMS:
        sid, records, hooks = _stream_turn(path)
        delivered: list[str] = []
        run_agent(services.ledger, [sys.executable, str(fake), str(path)], out=io.BytesIO(),
                  prompt="(the recording's prompt)",
                  on_line=_hooks_ahead(services, sid, records, hooks, delivered))
        assert len(delivered) == len(hooks)
        assert import_paths(services.ledger, [path]).result.appended == 0
        services.runner.catch_up()
        detail = queries.get_session(services.models, str(SessionRef("claude-code", sid).id))
        assert detail is not None
        assert detail["tool_call_count"] == 1 == len(detail["tool_calls"]), path.name
        failed = path.name == "error_case.jsonl"
        assert detail["tool_calls"][0]["status"] == ("failed" if failed else "completed")


def test_a_stream_json_prompt_and_the_hooks_copy_of_it_are_one_prompt(
    services: Services, tmp_path: Path
) -> None:
    """A stream with the user's prompt in it (``--input-format stream-json``: a ``user``
    record with text; the real recording with that record BUILT BY HAND after its
    ``init``, in the documented shape) and the hook's ``UserPromptSubmit`` of it (the
    first real attio payload with this session and text): one prompt, whichever comes
    first, as a transcript's prompt and the hook's are. Before, the stream's prompt had no
    ``prompt:`` alias and was a second prompt."""
    path = STREAMS[0]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    submit = json.loads((ATTIO / "user_prompt_submit.json").read_text())[0]
    text = "Read the README and tell me what this project is about"
    for order in ("hook-first", "stream-first"):
        sid = f"{records[0]['session_id']}-{order}"
        user = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]},
                "session_id": sid}
        stream = tmp_path / f"{order}.jsonl"
        stream.write_text("".join(json.dumps(r) + "\n" for r in
                                  [{**records[0], "session_id": sid}, user,
                                   *({**r, "session_id": sid} for r in records[1:])]))
        hook = json.dumps({**submit, "session_id": sid, "prompt": text}).encode()
        if order == "stream-first":
            import_paths(services.ledger, [stream])
        assert ingest_hook(services.ledger, "claude-code", hook, f"{order}-prompt", AT).error is None
        import_paths(services.ledger, [stream])
        services.runner.catch_up()
        detail = queries.get_session(services.models, str(SessionRef("claude-code", sid).id))
        assert detail is not None
        assert detail["prompt_count"] == 1, order
        assert [(b["batch"], b["prompt"], b["tool_call_count"]) for b in detail["batches"]] == [(1, text, 1)]


def _subagent_run(tmp_path: Path) -> tuple[str, str, Path, Path, list[dict[str, Any]]]:
    """One ``claude -p --output-format stream-json --verbose`` run (CC 2.1.x) whose Agent
    call runs a subagent, BUILT BY HAND in the documented shapes (FORMATS.md A3, A4; no
    licensed 2.x stream capture with a subagent exists): the stream, with the
    ``system``/``task_started`` record naming the run (``task_id``: the agent id the
    transcript's ``subagents/agent-<id>.jsonl`` and the hooks' ``agent_id`` give;
    ``tool_use_id``: the Agent call), the transcript the same run wrote, and the
    subagent's 2026 tool hooks. Returns the session id, the agent id, the stream file,
    the transcript folder and the hooks."""
    sid, agent, task, read = "57575757-0000-4000-8000-000000000001", "ad45b564dde8739b1", "toolu_01Agent", "toolu_01Read"
    prompt = "Use the Read tool to read notes.txt and summarise it"

    def usage(i: int, o: int) -> dict[str, int]:
        return {"input_tokens": i, "output_tokens": o, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def msg(mid: str, model: str, content: list[dict[str, Any]], u: dict[str, int]) -> dict[str, Any]:
        return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content, "usage": u}

    agent_call = {"type": "tool_use", "id": task, "name": "Agent",
                  "input": {"description": "read notes", "subagent_type": "general-purpose", "prompt": prompt}}
    read_call = {"type": "tool_use", "id": read, "name": "Read", "input": {"file_path": "/w/notes.txt"}}
    main = [
        ("user", {"role": "user", "content": "read my notes with a subagent"}, {}),
        ("assistant", msg("msg_p1", "claude-opus-4-6", [agent_call], usage(10, 5)), {}),
        ("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": task, "content": "notes"}]},
         {"toolUseResult": {"status": "completed", "agentId": agent}}),
        ("assistant", msg("msg_p2", "claude-opus-4-6", [{"type": "text", "text": "Done."}], usage(40, 8)), {}),
    ]
    side = [
        ("user", {"role": "user", "content": prompt}, {}),
        ("assistant", msg("msg_s1", "claude-haiku-4-5", [read_call], usage(20, 6)), {}),
        ("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": read, "content": "notes"}]}, {}),
        ("assistant", msg("msg_s2", "claude-haiku-4-5", [{"type": "text", "text": "notes"}], usage(30, 7)), {}),
    ]
    folder = tmp_path / "projects" / "-w"
    (folder / sid / "subagents").mkdir(parents=True)
    for path, records, extra in ((folder / f"{sid}.jsonl", main, {}),
                                 (folder / sid / "subagents" / f"agent-{agent}.jsonl", side, {"isSidechain": True, "agentId": agent})):
        lines, parent = [], None
        for n, (rtype, message, more) in enumerate(records):
            uuid = f"{path.stem[-6:]}-0000-4000-8000-{n:012d}"
            lines.append(json.dumps({"parentUuid": parent, "isSidechain": False, "cwd": "/w", "sessionId": sid,
                                     "version": "2.1.170", "type": rtype, "message": message, "uuid": uuid,
                                     "timestamp": f"2026-06-01T10:00:0{n}.000Z", **extra, **more}))
            parent = uuid
        path.write_text("\n".join(lines) + "\n")
    started = {"type": "system", "subtype": "task_started", "task_id": agent, "tool_use_id": task,
               "subagent_type": "general-purpose", "task_type": "local_agent", "prompt": prompt, "session_id": sid}
    stream = [{"type": "system", "subtype": "init", "session_id": sid, "cwd": "/w", "model": "claude-opus-4-6"},
              {"type": "assistant", "message": main[1][1], "parent_tool_use_id": None, "session_id": sid},
              started]
    stream += [{"type": rtype, "message": message, "parent_tool_use_id": task, "session_id": sid}
               for rtype, message, _ in side]
    stream += [{"type": "user", "message": main[2][1], "parent_tool_use_id": None, "session_id": sid,
                "tool_use_result": main[2][2]["toolUseResult"]},
               {"type": "assistant", "message": main[3][1], "parent_tool_use_id": None, "session_id": sid},
               {"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "num_turns": 2}]
    stream_path = tmp_path / "run.jsonl"
    stream_path.write_text("".join(json.dumps(r) + "\n" for r in stream))
    base = {"session_id": sid, "transcript_path": str(folder / f"{sid}.jsonl"), "cwd": "/w",
            "agent_id": agent, "agent_type": "general-purpose", "tool_name": "Read",
            "tool_input": read_call["input"], "tool_use_id": read}
    hooks = [{**base, "hook_event_name": "PreToolUse"},
             {**base, "hook_event_name": "PostToolUse", "tool_response": {"type": "text"}}]
    return sid, agent, stream_path, folder, hooks


def test_a_subagent_run_seen_by_stream_json_transcript_and_hooks_is_one_child_session(
    settings: Settings, tmp_path: Path
) -> None:
    """`hookledger run` of a `claude -p` stream with hooks installed records a subagent
    run three ways. Before, the stream named its child ``…/task-<Agent call id>`` and
    the transcript and hooks ``…/agent-<agent id>``: two children, the subagent's tool
    call and tokens counted twice, and the stream's child took its task prompt for a
    human one."""
    sid, agent, stream, folder, hooks = _subagent_run(tmp_path)
    _run(settings, [_import_step([stream]), _import_step([folder]), _hook_step("claude-code", hooks, "h", [])])
    # expected, from the subagent's own file: one run, its calls and its usage
    side = [json.loads(line) for line in (folder / sid / "subagents" / f"agent-{agent}.jsonl").read_text().splitlines()]
    usage = {r["message"]["id"]: r["message"]["usage"] for r in side if r["type"] == "assistant"}
    calls = {b["id"] for r in side if r["type"] == "assistant" for b in r["message"]["content"] if b["type"] == "tool_use"}
    services = build(settings)
    try:
        services.runner.catch_up()
        children = [r for r in queries.list_sessions(services.models) if r["parent_id"]]
        assert [r["external_id"] for r in children] == [f"{sid}/agent-{agent}"]
        (row,) = children
        detail = queries.get_session(services.models, row["id"])
    finally:
        services.close()
    assert detail is not None and row["parent_tool_use_id"] == "toolu_01Agent"
    assert {c["tool_use_id"] for c in detail["tool_calls"]} == calls and row["tool_call_count"] == len(calls)
    for t in ("input_tokens", "output_tokens"):
        assert row[t] == sum(u[t] for u in usage.values())
    assert [(b["prompt_kind"], b["prompt"]) for b in detail["batches"]] == [("task", side[0]["message"]["content"])]


def test_a_subagent_run_named_only_after_its_first_records_stays_one_child(
    settings: Settings, tmp_path: Path
) -> None:
    # the same stream with its task_started record after the subagent's first records:
    # those already made the child …/task-<call>; the rest of the run stays in it
    sid, _agent, stream, _folder, _hooks = _subagent_run(tmp_path)
    records = [json.loads(line) for line in stream.read_text().splitlines()]
    started = next(r for r in records if r.get("subtype") == "task_started")
    records.remove(started)
    first_sub = next(i for i, r in enumerate(records) if r.get("parent_tool_use_id"))
    records.insert(first_sub + 1, started)
    stream.write_text("".join(json.dumps(r) + "\n" for r in records))
    calls = {b["id"] for r in records if r["type"] == "assistant" and r.get("parent_tool_use_id")
             for b in r["message"]["content"] if b["type"] == "tool_use"}
    _run(settings, [_import_step([stream])])
    services = build(settings)
    try:
        services.runner.catch_up()
        children = [r for r in queries.list_sessions(services.models) if r["parent_id"]]
        assert [r["external_id"] for r in children] == [f"{sid}/task-{started['tool_use_id']}"]
        assert children[0]["tool_call_count"] == len(calls) and children[0]["prompt_count"] == 1
    finally:
        services.close()


def _live_subagent_hooks(sid: str, agent: str, folder: Path) -> list[tuple[dict[str, Any], datetime]]:
    """The 2026 hooks of :func:`_subagent_run`'s session as ``hookledger serve`` gets them
    live (FORMATS.md A1; BUILT BY HAND from its transcript's prompts, calls and ids): the
    prompt, the parent's ``PreToolUse`` of the Agent call, ``SubagentStart``, the
    subagent's Read (``agent_id`` set), ``SubagentStop`` (``agent_transcript_path``), the
    Agent call's ``PostToolUse`` (``agentId``) and ``Stop``; each with its capture time,
    after the transcript records it follows (the files are flushed before the hooks)."""
    main = [json.loads(line) for line in (folder / f"{sid}.jsonl").read_text().splitlines()]
    call = main[1]["message"]["content"][0]
    side_path = folder / sid / "subagents" / f"agent-{agent}.jsonl"
    side = [json.loads(line) for line in side_path.read_text().splitlines()]
    read = side[1]["message"]["content"][0]
    base = {"session_id": sid, "transcript_path": str(folder / f"{sid}.jsonl"), "cwd": "/w",
            "permission_mode": "default"}
    sub = {**base, "agent_id": agent, "agent_type": "general-purpose"}
    agent_call = {"tool_name": call["name"], "tool_input": call["input"], "tool_use_id": call["id"]}
    read_call = {"tool_name": read["name"], "tool_input": read["input"], "tool_use_id": read["id"]}
    hooks = [
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": main[0]["message"]["content"]},
        {**base, "hook_event_name": "PreToolUse", **agent_call},
        {**sub, "hook_event_name": "SubagentStart"},
        {**sub, "hook_event_name": "PreToolUse", **read_call},
        {**sub, "hook_event_name": "PostToolUse", **read_call, "tool_response": {"type": "text"}},
        {**sub, "hook_event_name": "SubagentStop", "stop_hook_active": False,
         "agent_transcript_path": str(side_path), "last_assistant_message": "notes"},
        {**base, "hook_event_name": "PostToolUse", **agent_call,
         "tool_response": {"status": "completed", "agentId": agent, "content": [{"type": "text", "text": "notes"}]}},
        {**base, "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "Done."},
    ]
    at = datetime.fromisoformat(side[-1]["timestamp"])
    return [(h, at + timedelta(milliseconds=100 * (i + 1))) for i, h in enumerate(hooks)]


def test_a_subagent_whose_transcript_follows_its_hooks_has_its_task_batch(
    settings: Settings, tmp_path: Path
) -> None:
    """`hookledger serve` records a subagent's hooks as they happen and imports its
    transcript after its SubagentStop. Before, `show <child> --json` of that order gave
    prompt_count 1, batch_count 0 and the subagent's Read in batch 0: its task prompt
    was recorded after the run's end (history, batch 0) and its calls before any prompt.
    The transcript first gave batch 1 of kind task holding the Read; both orders now
    do, and the DuckDB copy agrees."""
    sid, agent, _stream, folder, _ = _subagent_run(tmp_path)
    hooks = _live_subagent_hooks(sid, agent, folder)

    def hook_step(services: Services) -> None:
        for i, (payload, at) in enumerate(hooks):
            out = ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), f"live-{i}", at)
            assert out.error is None, out.error

    # expected, from the subagent's own file: its first input is the task, then its calls
    side = [json.loads(line) for line in (folder / sid / "subagents" / f"agent-{agent}.jsonl").read_text().splitlines()]
    task = side[0]["message"]["content"]
    calls = [b for r in side if r["type"] == "assistant" for b in r["message"]["content"] if b["type"] == "tool_use"]
    child = f"{sid}/agent-{agent}"
    seen = {}
    for order, steps in (("hooks first", [hook_step, _import_step([folder])]),
                         ("transcript first", [_import_step([folder]), hook_step])):
        s = Settings(tmp_path / order.replace(" ", "-"))
        _run(s, steps)
        seen[order] = views = _read(s, "claude-code")
        row, detail = views[child]
        assert (row["prompt_count"], row["batch_count"], row["tool_call_count"]) == (1, 1, len(calls)), order
        assert detail["batches"] == [(1, task, len(calls), 0, "completed")], order
        assert [(c[0], c[1]) for c in detail["tool_calls"]] == [(1, b["name"]) for b in calls], order
        services = build(s)
        try:
            services.runner.catch_up()
            catch_up(services.ledger, s.data_dir)
            con = open_snapshot(s.data_dir)
            try:
                assert differences(services, con) == {}, order
            finally:
                con.close()
        finally:
            services.close()
    assert seen["hooks first"] == seen["transcript first"]
    # the log says why the hooks' call moved: a decision after the late task prompt
    kinds = [type(e).__name__ for e in _events(Settings(tmp_path / "hooks-first"), "claude-code", child)]
    assert kinds[kinds.index("PromptSubmitted"):][:3] == ["PromptSubmitted", "ActivitiesAttached", "BatchClosed"]
