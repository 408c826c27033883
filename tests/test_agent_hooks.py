"""Gemini CLI, Cursor and OpenClaw hook payloads -> the ledger.

No real Gemini CLI, Cursor or OpenClaw hook payload captures exist under a licence
(FORMATS.md B, "Gaps"), so the payloads below are BUILT BY HAND from the documented
shapes in ``shared/research/FORMATS.md`` A7 (Gemini CLI ``docs/hooks/reference.md``),
A8 (cursor.com/docs/agent/hooks, entireio/cli AGENT.md) and A9 (OpenClaw
``hook-types.ts``; ``session_suspend``/``session_resume`` from the akoscz/openclaw
seed design). The Gemini session id and prompt are taken from a real chat file, so
hooks and the chat import can be checked to land in one session. Gemini and OpenClaw
payloads are POSTed to a real ``hookledger serve`` process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from api.bootstrap import Services, build
from ledger.config import Settings
from ledger.envelope import raw_record
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import SessionRef
from ledger.session import Session
from ledger.session_keys import SessionKey, session_key_id
from projections import queries

from conftest import FIXTURES, Server, cli

CHAT = FIXTURES / "agentcmd-gemini-sessions" / "session-2025-10-29T10-36-453aa339.json"
OPENCLAW = FIXTURES / "agent-sessions-schema-drift" / "openclaw_session_small.jsonl"


def _in_either_order(
    services: Services, agent: str, hooks: list[dict[str, Any]], prefix: str, path: Path,
    hooks_first: bool,
) -> Callable[[], int]:
    """Deliver ``hooks`` (capture keys ``{prefix}-{i}``) and import ``path``, in the order
    asked; returns the delivery, to repeat it (it gives the events it appended)."""

    def deliver() -> int:
        return sum(
            ingest_hook(services.ledger, agent, orjson.dumps(h), f"{prefix}-{i}").result.appended
            for i, h in enumerate(hooks)
        )

    if hooks_first:
        deliver()
        import_paths(services.ledger, [path])
    else:
        import_paths(services.ledger, [path])
        deliver()
    return deliver


class _OpenClawSender:
    """Ingests OpenClaw hook payloads in order, capture keys ``oc-1``, ``oc-2`` … unless
    ``key`` names one (a redelivery); each must be accepted."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.n = 0

    def __call__(self, *payloads: dict[str, Any], key: str | None = None) -> None:
        for p in payloads:
            self.n += 1
            out = ingest_hook(self.services.ledger, "openclaw", orjson.dumps(p), key or f"oc-{self.n}")
            assert out.error is None, out.error

def _row(services: Services, external_id: str) -> dict[str, Any]:
    services.runner.catch_up()
    sid = queries.find_session_id(services.models, external_id)
    assert sid is not None, external_id
    detail = queries.get_session(services.models, sid)
    assert detail is not None
    return detail


def _kinds(services: Services, agent: str, external_id: str) -> list[str]:
    return [
        type(e).__name__
        for e in services.ledger.repository.event_store.get(SessionRef(agent, external_id).id)
    ]


def _post_all(
    url: str, agent: str, payloads: list[dict[str, Any]], prefix: str
) -> list[httpx.Response]:
    with httpx.Client(base_url=url, timeout=30) as client:
        return [
            client.post(
                f"/v1/hooks/{agent}", json=p, headers={"X-Hookledger-Capture-Key": f"{prefix}-{i}"}
            )
            for i, p in enumerate(payloads)
        ]


# -- Gemini CLI -------------------------------------------------------------------------


def _gemini_tool_hooks(doc: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """A BeforeTool and an AfterTool hook payload for each tool call of chat ``doc``."""
    hooks: list[dict[str, Any]] = []
    for m in doc["messages"]:
        for c in m.get("toolCalls") or []:
            tool = {**base, "tool_name": c["name"], "tool_input": c["args"]}
            hooks += [{**tool, "hook_event_name": "BeforeTool"},
                      {**tool, "hook_event_name": "AfterTool",
                       "tool_response": {"llmContent": "ok", "returnDisplay": ""}}]
    return hooks


def _gemini_payloads() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = json.loads(CHAT.read_text())
    sid = doc["sessionId"]
    prompt = next(m["content"] for m in doc["messages"] if m["type"] == "user")
    base = {"session_id": sid, "transcript_path": str(CHAT), "cwd": "/work/demo"}

    def hook(name: str, **fields: Any) -> dict[str, Any]:
        return {**base, "hook_event_name": name, "timestamp": "2025-10-29T10:37:00.000Z", **fields}

    request = {"model": "gemini-2.5-pro", "messages": [{"role": "user", "content": prompt}]}
    usage = {
        "promptTokenCount": 5367,
        "candidatesTokenCount": 18,
        "cachedContentTokenCount": 1000,
        "thoughtsTokenCount": 244,
        "totalTokenCount": 5629,
    }
    chunk = {"candidates": [{"content": {"role": "model", "parts": ["Reading"]}}]}
    final = {
        "candidates": [
            {"content": {"role": "model", "parts": [" the file."]}, "finishReason": "STOP"}
        ],
        "usageMetadata": usage,
    }
    payloads = [
        hook("SessionStart", source="startup"),
        hook("BeforeAgent", prompt=prompt),
        hook("BeforeModel", llm_request=request),
        hook("AfterModel", llm_request=request, llm_response=chunk),
        hook("AfterModel", llm_request=request, llm_response=chunk),
        hook("AfterModel", llm_request=request, llm_response=final),
        hook(
            "AfterModel", llm_request=request, llm_response={"usageMetadata": usage}
        ),  # same usage again
        hook("BeforeToolSelection", llm_request=request),
        hook("BeforeTool", tool_name="read_file", tool_input={"absolute_path": "/work/demo/a.py"}),
        hook(
            "AfterTool",
            tool_name="read_file",
            tool_input={"absolute_path": "/work/demo/a.py"},
            tool_response={"llmContent": "print(1)", "returnDisplay": ""},
        ),
        hook("BeforeTool", tool_name="list_directory", tool_input={"path": "."}),
        hook(
            "AfterTool",
            tool_name="list_directory",
            tool_input={"path": "."},
            tool_response={
                "llmContent": "",
                "returnDisplay": "",
                "error": "Path must be absolute: .",
            },
        ),
        hook("Notification", notification_type="ToolPermission", message="Allow?", details={}),
        hook("PreCompress", trigger="auto"),
        hook("AfterAgent", prompt=prompt, prompt_response="Done.", stop_hook_active=False),
        hook("BeforeFutureThing", anything=1),
        hook("SessionEnd", reason="exit"),
    ]
    want = {
        "session": sid,
        "prompts": [prompt],
        # Anthropic convention: input without cache reads, output with thoughts.
        "tokens": {
            "input_tokens": 5367 - 1000,
            "output_tokens": 18 + 244,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 0,
        },
        "tools": {"read_file": False, "list_directory": True},
    }
    return payloads, want


def test_gemini_hooks_posted_to_server(settings: Settings) -> None:
    payloads, want = _gemini_payloads()
    srv = Server(settings).start()
    try:
        responses = _post_all(srv.url, "gemini", payloads, "gem")
        again = _post_all(srv.url, "gemini", payloads, "gem")  # retries: same capture keys
        bad = _post_all(srv.url, "gemini", [{"hook_event_name": "SessionStart"}], "bad")[0]
    finally:
        srv.stop()
    assert [r.status_code for r in responses] == [202] * len(payloads)
    assert sum(r.json()["appended"] for r in again) == 0
    assert bad.status_code == 400 and "session_id" in bad.json()["error"]

    services = build(settings)
    try:
        detail = _row(services, want["session"])
        assert detail["agent"] == "gemini"
        assert [b["prompt"] for b in detail["batches"]] == want["prompts"]
        assert {c["tool_name"]: c["is_error"] for c in detail["tool_calls"]} == want["tools"]
        assert all(c["status"] != "started" for c in detail["tool_calls"])
        for t, n in want["tokens"].items():
            assert detail[t] == n, t
        assert detail["status"] == "COMPLETED"
        kinds = _kinds(services, "gemini", want["session"])
        # Four AfterModel chunks: one reply, one usage (the repeat appends nothing),
        # two plain chunks kept as records.
        assert kinds.count("UsageRecorded") == 1
        assert kinds.count("AssistantReplied") == 1
        assert kinds.count("UnknownHookEvent") == 1
        assert kinds.count("Compacted") == 1

        # The chat file of the same session: its prompt is the hook's prompt (one fact).
        import_paths(services.ledger, [CHAT])
        detail = _row(services, want["session"])
        doc = json.loads(CHAT.read_text())
        assert detail["prompt_count"] == sum(1 for m in doc["messages"] if m["type"] == "user")
    finally:
        services.close()



@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-then-chat", "chat-then-hooks"])
def test_gemini_hook_calls_and_the_chat_files_calls_are_one_call_each(
    services: Services, tmp_path: Path, hooks_first: bool
) -> None:
    """A real Gemini CLI chat file (3 tool calls, two of them ``read_file`` of the same
    path) and BeforeTool/AfterTool hooks of the same calls BUILT BY HAND in the
    documented shape (Gemini hooks carry no call id). Before, nothing met the hooks'
    calls with the file's: 6 calls for 3. The n-th hook call of a tool and input meets
    the file's n-th: the two read_file calls stay two."""
    doc = json.loads(CHAT.read_text())
    sid = doc["sessionId"]
    base = {"session_id": sid, "transcript_path": str(CHAT), "cwd": "/work/demo",
            "timestamp": "2025-10-29T10:37:00.000Z"}
    hooks = _gemini_tool_hooks(doc, base)
    assert len(hooks) == 6

    deliver = _in_either_order(services, "gemini", hooks, "gem", CHAT, hooks_first)
    detail = _row(services, sid)
    assert detail["tool_call_count"] == 3 == len(detail["tool_calls"])
    assert sorted(c["tool_name"] for c in detail["tool_calls"]) == ["read_file", "read_file", "replace"]
    assert {c["status"] for c in detail["tool_calls"]} == {"completed"}
    kinds = _kinds(services, "gemini", sid)
    assert kinds.count("ToolCallStarted") == kinds.count("ToolCallCompleted") == 3
    events = list(services.ledger.repository.event_store.get(SessionRef("gemini", sid).id))
    kept = [e for e in events if getattr(e, "record_type", None) == "tool call captured again"]
    assert len(kept) == (0 if hooks_first else 6)
    assert deliver() == 0 and import_paths(services.ledger, [CHAT]).result.appended == 0
    session = services.ledger.session(SessionRef("gemini", sid).id)
    assert session is not None and session.unpaired_calls == {}  # every hook call closed

@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-then-chat", "chat-then-hooks"])
def test_gemini_prompt_and_call_holding_a_secret_are_one_each_with_the_hooks(
    services: Services, tmp_path: Path, hooks_first: bool
) -> None:
    """Review finding: a prompt with a ``<private>`` span or a token, or a tool call whose
    args hold a token, counted twice when both the hooks and the chat file were recorded
    (2 prompts, 4 calls for 1 and 3): the hooks' aliases hash the stored (redacted)
    text, the chat file's hashed the text before redaction. The real chat file, its
    prompt and one call's args given a secret."""
    token = "ghp_" + "a1B2c3D4e5" * 4
    doc = json.loads(CHAT.read_text())
    sid = doc["sessionId"]
    user = doc["messages"][0]
    user["content"] = f"{user['content'].strip()} <private>staging</private> token {token}"
    doc["messages"][2]["toolCalls"][0]["args"]["new_string"] = f"Goodbye {token}"
    chat = tmp_path / CHAT.name
    chat.write_text(json.dumps(doc))
    base = {"session_id": sid, "transcript_path": str(chat), "cwd": "/work/demo",
            "timestamp": "2025-10-29T10:37:00.000Z"}
    hooks = [
        {**base, "hook_event_name": "BeforeAgent", "prompt": user["content"]},
        *_gemini_tool_hooks(doc, base),
    ]

    deliver = _in_either_order(services, "gemini", hooks, "gem", chat, hooks_first)
    detail = _row(services, sid)
    assert (detail["prompt_count"], detail["tool_call_count"]) == (1, 3)
    assert token not in json.dumps(detail) and "staging" not in json.dumps(detail)
    assert deliver() == 0 and import_paths(services.ledger, [chat]).result.appended == 0


# -- Cursor -------------------------------------------------------------------------------

EMAIL = "dev.person@example.com"


def _cursor_payloads() -> list[dict[str, Any]]:
    base = {
        "conversation_id": "c0ffee-1",
        "generation_id": "gen-1",
        "model": "claude-4.5-sonnet",
        "cursor_version": "2.1.0",
        "workspace_roots": ["/home/dev/project"],
        "user_email": EMAIL,
        "transcript_path": None,
    }

    def hook(name: str, **fields: Any) -> dict[str, Any]:
        return {**base, "hook_event_name": name, **fields}

    tool_id = "call_abc\nctc_def"  # Cursor ids hold a newline (FORMATS.md C19)
    return [
        hook(
            "sessionStart", session_id="c0ffee-1", is_background_agent=False, composer_mode="agent"
        ),
        hook("beforeSubmitPrompt", prompt="Run the tests", attachments=[]),
        hook(
            "preToolUse", tool_name="Shell", tool_input={"command": "pytest"}, tool_use_id=tool_id
        ),
        hook("beforeShellExecution", command="pytest", cwd="/home/dev/project"),
        hook("afterShellExecution", command="pytest", output="1 passed", duration=812),
        hook(
            "postToolUse",
            tool_name="Shell",
            tool_input={"command": "pytest"},
            tool_use_id=tool_id,
            tool_output=json.dumps({"output": "1 passed"}),
            duration=812,
        ),
        hook(
            "preToolUse",
            tool_name="Read",
            tool_input={"path": "missing.py"},
            tool_use_id="call_2\nctc_2",
        ),
        hook(
            "postToolUseFailure",
            tool_name="Read",
            tool_input={"path": "missing.py"},
            tool_use_id="call_2\nctc_2",
            error_message="File not found",
        ),
        hook(
            "subagentStart",
            subagent_id="sub-1",
            subagent_type="explore",
            task="Find the config",
            parent_conversation_id="c0ffee-1",
        ),
        hook("subagentStop", subagent_id="sub-1", subagent_type="explore", status="completed"),
        hook("afterAgentThought", text="thinking..."),
        hook("afterAgentResponse", text="All tests pass."),
        hook("preCompact", trigger="auto"),
        hook("stop", status="completed", loop_count=0),
        hook(
            "sessionEnd",
            session_id="c0ffee-1",
            reason="user_closed",
            duration_ms=60000,
            final_status="ok",
        ),
        hook("afterTabFileEditV2", file_path="x"),
    ]


def test_cursor_hooks(services: Services) -> None:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    for i, p in enumerate(_cursor_payloads()):
        out = ingest_hook(services.ledger, "cursor", orjson.dumps(p), f"cur-{i}", at)
        assert out.error is None, out.error
    detail = _row(services, "c0ffee-1")
    assert detail["agent"] == "cursor" and detail["cwd"] == "/home/dev/project"
    assert [b["prompt"] for b in detail["batches"]] == ["Run the tests"]
    calls = {
        c["tool_use_id"]: (c["tool_name"], c["is_error"], c["error"]) for c in detail["tool_calls"]
    }
    assert calls == {
        "call_abc\nctc_def": ("Shell", False, None),
        "call_2\nctc_2": ("Read", True, "File not found"),
    }
    assert detail["status"] == "COMPLETED"
    child = _row(services, "c0ffee-1/subagent-sub-1")
    assert child["parent_id"] == detail["id"] and child["agent_type"] == "explore"
    assert child["status"] == "COMPLETED"
    assert [b["prompt"] for b in child["batches"]] == ["Find the config"]

    events = list(services.ledger.repository.event_store.get(SessionRef("cursor", "c0ffee-1").id))
    kinds = [type(e).__name__ for e in events]
    assert (
        kinds.count("RecordObserved") == 3
    )  # shell before/after, thought: kept, not counted as calls
    assert kinds.count("UnknownHookEvent") == 1
    # The email is in no derived fact; the raw payloads keep it (documented).
    for e in events:
        derived = e.model_dump(exclude={"raw"})
        assert EMAIL not in orjson.dumps(derived, default=str).decode()
    raws = [raw_record(e) for e in events]
    assert any(isinstance(r, dict) and r.get("user_email") == EMAIL for r in raws)


def test_cursor_hook_prompt_and_transcript_prompt_are_one_fact(
    services: Services, tmp_path: Path
) -> None:
    """Cursor's transcript wraps the typed prompt in ``<user_query>`` (as real Cursor
    transcripts do); the hook's ``beforeSubmitPrompt.prompt`` is the bare text. The
    transcript lines here are BUILT BY HAND in the documented line shape."""
    hook = {**_cursor_payloads()[1]}
    out = ingest_hook(services.ledger, "cursor", orjson.dumps(hook), "p-1", datetime.now(UTC))
    assert out.error is None
    lines = [
        {
            "role": "user",
            "message": {
                "content": [{"type": "text", "text": "<user_query>\nRun the tests\n</user_query>"}]
            },
        },
        {"role": "assistant", "message": {"content": [{"type": "text", "text": "Running."}]}},
    ]
    path = tmp_path / f"{hook['conversation_id']}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    import_paths(services.ledger, [path])
    detail = _row(services, hook["conversation_id"])
    assert [b["prompt"] for b in detail["batches"]] == ["Run the tests"]


CURSOR_DRIFT = FIXTURES / "agent-sessions-schema-drift" / "cursor_transcript_schema_drift.jsonl"


def test_cursor_hook_tool_call_and_transcript_tool_call_are_one_call(
    services: Services, tmp_path: Path
) -> None:
    """A real (sanitised) Cursor transcript whose ``tool_call`` carries no id, and the
    hook payloads of the same turn BUILT BY HAND in the documented shape (the
    transcript's prompt, tool name and input): hooks, then the transcript import, give
    one tool call (the hook's id), and the import of an ended turn leaves the status
    the hooks' ``stop`` set."""
    lines = [json.loads(x) for x in CURSOR_DRIFT.read_text().splitlines()]
    prompt = lines[0]["message"]["content"][0]["text"]
    (call,) = [b for b in lines[1]["message"]["content"] if b["type"] == "tool_call"]
    base = {"conversation_id": "c0ffee-2", "generation_id": "g", "model": "cursor-auto",
            "cursor_version": "2.6.1", "workspace_roots": ["/w"], "transcript_path": None}
    tool = {"tool_name": call["name"], "tool_input": call["input"], "tool_use_id": "call_9\nctc_9"}
    hooks = [
        {"hook_event_name": "sessionStart", "session_id": "c0ffee-2"},
        {"hook_event_name": "beforeSubmitPrompt", "prompt": prompt, "attachments": []},
        {"hook_event_name": "preToolUse", **tool},
        {"hook_event_name": "postToolUse", **tool, "tool_output": "{}", "duration": 5},
        {"hook_event_name": "stop", "status": "completed", "loop_count": 0},
    ]
    for i, h in enumerate(hooks):
        out = ingest_hook(services.ledger, "cursor", orjson.dumps({**base, **h}), f"c2-{i}")
        assert out.error is None, out.error
    assert _row(services, "c0ffee-2")["status"] == "WAITING"

    path = tmp_path / "c0ffee-2.jsonl"
    path.write_bytes(CURSOR_DRIFT.read_bytes())
    for _ in range(2):  # and a re-import adds nothing
        import_paths(services.ledger, [path])
        detail = _row(services, "c0ffee-2")
        assert [(c["tool_use_id"], c["tool_name"]) for c in detail["tool_calls"]] == [
            ("call_9\nctc_9", "read_file")
        ]
        assert detail["tool_call_count"] == 1 and detail["prompt_count"] == 1
        assert detail["status"] == "WAITING"
    kinds = _kinds(services, "cursor", "c0ffee-2")
    assert kinds.count("ToolCallStarted") == kinds.count("ToolCallCompleted") == 1



@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "transcript-first"])
def test_cursor_write_spelled_two_ways_is_one_call(
    services: Services, tmp_path: Path, hooks_first: bool
) -> None:
    """A ``Write`` as Cursor records it (entireio/cli ``cmd/entire/cli/agent/cursor/
    AGENT.md`` @126f2ac, BUILT BY HAND from its examples): the hooks' ``tool_input`` is
    ``{file_path, content}``, the transcript's ``tool_use.input`` ``{path, contents}``.
    Review finding: the two copies never met (the call hash was over the input as each
    spelled it), so `hookledger hook cursor` + `hookledger import` showed 2 tool calls
    for the 1 write, in either order."""
    sid = "7d1c0000-0000-4000-8000-0000000000c1"
    base = {"conversation_id": sid, "generation_id": "g1", "model": "gpt-5.2",
            "cursor_version": "2026.02.13-41ac335", "workspace_roots": ["/r"],
            "user_email": "user@example.com", "transcript_path": None}
    tool = {"tool_name": "Write", "tool_input": {"file_path": "/r/hello.txt", "content": "hi\n"},
            "tool_use_id": "call_abc\nctc_abc"}
    hooks = [
        {"hook_event_name": "sessionStart", "session_id": sid, "is_background_agent": False},
        {"hook_event_name": "beforeSubmitPrompt", "prompt": "create hello.txt", "attachments": []},
        {"hook_event_name": "preToolUse", **tool},
        {"hook_event_name": "postToolUse", **tool, "tool_output": '{"success":true}', "duration": 36.8},
        {"hook_event_name": "stop", "status": "completed", "loop_count": 0},
    ]
    lines = [
        {"role": "user", "message": {"content": [
            {"type": "text", "text": "<user_query>\ncreate hello.txt\n</user_query>"}]}},
        {"role": "assistant", "message": {"content": [
            {"type": "text", "text": "Creating it."},
            {"type": "tool_use", "name": "Write", "input": {"path": "/r/hello.txt", "contents": "hi\n"}}]}},
        {"role": "assistant", "message": {"content": [{"type": "text", "text": "Created the file."}]}},
    ]
    path = tmp_path / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))

    def send() -> None:
        for i, h in enumerate(hooks):
            assert ingest_hook(services.ledger, "cursor", orjson.dumps({**base, **h}), f"w-{i}").error is None

    if hooks_first:
        send()
    import_paths(services.ledger, [path])
    if not hooks_first:
        send()
    detail = _row(services, sid)
    # independent count: one tool_use block in the file, one preToolUse in the hooks
    assert detail["tool_call_count"] == 1 == len(detail["tool_calls"])
    assert detail["tool_calls"][0]["status"] == "completed"
    assert detail["prompt_count"] == 1


def _cursor_turn(sid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The documented hook payloads (BUILT BY HAND) of the real drift transcript's turn:
    (the call's fields, [preToolUse, postToolUse])."""
    lines = [json.loads(x) for x in CURSOR_DRIFT.read_text().splitlines()]
    (call,) = [b for b in lines[1]["message"]["content"] if b["type"] == "tool_call"]
    base = {"conversation_id": sid, "generation_id": "g", "model": "cursor-auto",
            "cursor_version": "2.6.1", "workspace_roots": ["/w"], "transcript_path": None}
    tool = {**base, "tool_name": call["name"], "tool_input": call["input"]}
    return tool, [
        {**tool, "hook_event_name": "preToolUse"},
        {**tool, "hook_event_name": "postToolUse", "tool_output": "{}", "duration": 5},
    ]


def test_cursor_hook_calls_after_the_transcript_meet_its_copies_in_order(
    services: Services, tmp_path: Path
) -> None:
    """The transcript (one ``read_file`` call, no id) is imported first; the hooks then
    deliver that call and the same call again. The first is the transcript's call (its
    Pre and Post kept as records), the second a new call. Before, the first Pre was
    dropped without being counted, so its Post derived a second start (2 calls), and the
    second Pre met the transcript's copy again and was lost."""
    path = tmp_path / "c0ffee-3.jsonl"
    path.write_bytes(CURSOR_DRIFT.read_bytes())
    import_paths(services.ledger, [path])
    _tool, (pre, post) = _cursor_turn("c0ffee-3")
    deliveries = [
        {**pre, "tool_use_id": "call_1\nctc_1"}, {**post, "tool_use_id": "call_1\nctc_1"},
        {**pre, "tool_use_id": "call_2\nctc_2"}, {**post, "tool_use_id": "call_2\nctc_2"},
    ]
    for i, h in enumerate(deliveries):
        assert ingest_hook(services.ledger, "cursor", orjson.dumps(h), f"c3-{i}").error is None
    detail = _row(services, "c0ffee-3")
    assert detail["tool_call_count"] == 2 == len(detail["tool_calls"])
    assert sorted(c["status"] for c in detail["tool_calls"]) == ["completed", "completed"]
    assert "call_2\nctc_2" in {c["tool_use_id"] for c in detail["tool_calls"]}
    events = list(services.ledger.repository.event_store.get(SessionRef("cursor", "c0ffee-3").id))
    kept = [e for e in events if getattr(e, "record_type", None) == "tool call captured again"]
    assert [e.event_key for e in kept] == ["hook:c3-0", "hook:c3-1"]
    for i, h in enumerate(deliveries):  # delivered again: nothing more
        assert ingest_hook(services.ledger, "cursor", orjson.dumps(h), f"c3-{i}").result.appended == 0


def test_cursor_transcript_completes_a_hook_call_whose_post_was_lost(
    services: Services, tmp_path: Path
) -> None:
    """The hooks saw the call start but not its end (no postToolUse); the transcript,
    imported after, has the result: it completes the hook's call. Before, its completion
    kept the transcript's own call id and derived a second start (2 calls)."""
    _tool, (pre, _post) = _cursor_turn("c0ffee-4")
    pre = {**pre, "tool_use_id": "call_1\nctc_1"}
    assert ingest_hook(services.ledger, "cursor", orjson.dumps(pre), "c4-0").error is None
    path = tmp_path / "c0ffee-4.jsonl"
    path.write_bytes(CURSOR_DRIFT.read_bytes())
    import_paths(services.ledger, [path])
    detail = _row(services, "c0ffee-4")
    assert [(c["tool_use_id"], c["status"]) for c in detail["tool_calls"]] == [
        ("call_1\nctc_1", "completed")
    ]
    assert detail["tool_call_count"] == 1
    assert import_paths(services.ledger, [path]).result.appended == 0

# -- OpenClaw -----------------------------------------------------------------------------


def _openclaw_payloads(sid: str) -> list[dict[str, Any]]:
    ctx = {"agentId": "main", "sessionId": sid, "sessionKey": "agent:main:main"}

    def hook(name: str, **event: Any) -> dict[str, Any]:
        return {"hook": name, "event": event, "ctx": ctx}

    return [
        hook("session_start", sessionId=sid, sessionKey="agent:main:main"),
        hook(
            "message_received",
            **{"from": "user", "content": "List files", "timestamp": 1771923602000},
        ),
        hook("before_tool_call", toolName="shell_exec", params={"command": "ls"}, toolCallId="tc1"),
        hook(
            "after_tool_call",
            toolName="shell_exec",
            params={"command": "ls"},
            toolCallId="tc1",
            result="main.swift\nResources\n",
            durationMs=40,
        ),
        hook(
            "llm_output",
            model="openclaw-small",
            usage={"input": 120, "output": 30, "cacheRead": 900, "cacheWrite": 50, "total": 1100},
        ),
        hook("agent_end", success=True, durationMs=2000, messages=[]),
        hook("session_suspend", sessionId=sid, reason="idle"),
        hook("session_resume", sessionId=sid),
        hook("before_compaction", messageCount=12, tokenCount=80000),
        hook("after_compaction", messageCount=4, compactedCount=8),
        hook("gateway_start", port=1234),
        hook("session_end", sessionId=sid, messageCount=12, reason="shutdown"),
    ]


def test_openclaw_hooks_and_transcript(settings: Settings) -> None:
    """Envelope ``{hook, event, ctx}`` over HTTP; suspend/resume move PAUSED/ACTIVE; the
    transcript of the same session adds no second tool call (shared ``toolCallId`` keys)."""
    sid = json.loads(OPENCLAW.read_text().splitlines()[0])["id"]
    payloads = _openclaw_payloads(sid)
    srv = Server(settings).start()
    try:
        responses = _post_all(srv.url, "openclaw", payloads, "oc")
        bad = _post_all(
            srv.url, "openclaw", [{"event": {"sessionId": sid}}, {"hook": "x", "event": {}}], "bad"
        )
    finally:
        srv.stop()
    assert [r.status_code for r in responses] == [202] * len(payloads)
    assert [r.status_code for r in bad] == [400, 400]

    services = build(settings)
    try:
        detail = _row(services, sid)
        assert detail["agent"] == "openclaw"
        path = [h["to_status"] for h in detail["status_history"]]
        assert path[-4:] == ["WAITING", "PAUSED", "ACTIVE", "COMPLETED"]
        assert (detail["input_tokens"], detail["output_tokens"]) == (120, 30)
        assert (detail["cache_read_input_tokens"], detail["cache_creation_input_tokens"]) == (
            900,
            50,
        )
        assert 120 + 30 + 900 + 50 == 1100  # the hook's own total, by the same convention
        assert [b["prompt"] for b in detail["batches"]] == ["List files"]
        assert [(c["tool_use_id"], c["is_error"]) for c in detail["tool_calls"]] == [("tc1", False)]
        kinds = _kinds(services, "openclaw", sid)
        assert {"Suspended", "Resumed", "Compacted", "UnknownHookEvent"} <= set(kinds)

        import_paths(services.ledger, [OPENCLAW])
        detail = _row(services, sid)
        transcript = [json.loads(x) for x in OPENCLAW.read_text().splitlines()]
        calls = {
            b["id"]
            for r in transcript
            if r["type"] == "message"
            for b in r["message"]["content"]
            if isinstance(b, dict) and b.get("type") == "toolCall"
        }
        assert {c["tool_use_id"] for c in detail["tool_calls"]} == calls == {"tc1"}
        assert detail["prompt_count"] == 1
    finally:
        services.close()



@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-then-transcript", "transcript-then-hooks"])
def test_openclaw_hook_call_without_id_and_the_transcripts_call_are_one_call(
    services: Services, hooks_first: bool
) -> None:
    """OpenClaw hooks may omit ``toolCallId``; the (sanitised real) transcript's call has
    one. The hooks (BUILT BY HAND, the documented shape without the id) and the
    transcript meet on ``call:{hash}:{n}``. Before, they were two calls."""
    sid = json.loads(OPENCLAW.read_text().splitlines()[0])["id"]
    hooks = [
        p for p in _openclaw_payloads(sid)
        if p["hook"] in ("session_start", "before_tool_call", "after_tool_call")
    ]
    for p in hooks:
        p["event"].pop("toolCallId", None)

    deliver = _in_either_order(services, "openclaw", hooks, "oc", OPENCLAW, hooks_first)
    detail = _row(services, sid)
    assert detail["tool_call_count"] == 1
    assert [(c["tool_name"], c["status"]) for c in detail["tool_calls"]] == [("shell_exec", "completed")]
    assert deliver() == 0 and import_paths(services.ledger, [OPENCLAW]).result.appended == 0

KEY = "agent:main:main"


def _upstream_turn(sid: str, run: str, prompt: str) -> list[dict[str, Any]]:
    """One OpenClaw turn with upstream's field names (``hook-message.types.ts``,
    ``hook-types.ts``): ``message_received`` carries the session key and run id but no
    ``sessionId``; the agent hooks' ctx carries both. BUILT BY HAND."""
    agent_ctx = {"agentId": "main", "sessionKey": KEY, "sessionId": sid, "runId": run}
    tool = {"toolName": "shell_exec", "params": {"command": "ls"}, "runId": run,
            "toolCallId": f"{run}-tc"}
    return [
        {"hook": "message_received",
         "event": {"from": "telegram:1", "content": prompt, "timestamp": 1771923602000,
                   "sessionKey": KEY, "runId": run},
         "ctx": {"channelId": "telegram", "conversationId": "1", "sessionKey": KEY,
                 "runId": run}},
        {"hook": "before_tool_call", "event": tool, "ctx": agent_ctx},
        {"hook": "after_tool_call", "event": {**tool, "result": "a\nb", "durationMs": 9},
         "ctx": agent_ctx},
        {"hook": "llm_output",
         "event": {"runId": run, "sessionId": sid, "provider": "p", "model": "m",
                   "assistantTexts": ["a, b"],
                   "usage": {"input": 100, "output": 20, "cacheRead": 1000, "cacheWrite": 0,
                             "total": 1120}},
         "ctx": agent_ctx},
        {"hook": "agent_end", "event": {"runId": run, "messages": [], "success": True},
         "ctx": agent_ctx},
    ]


def _start(sid: str, resumed_from: str | None = None) -> dict[str, Any]:
    event = {"sessionId": sid, "sessionKey": KEY}
    if resumed_from:
        event["resumedFrom"] = resumed_from
    return {"hook": "session_start", "event": event,
            "ctx": {"agentId": "main", "sessionId": sid, "sessionKey": KEY}}


def _openclaw_sessions(services: Services) -> dict[str, dict[str, Any]]:
    services.runner.catch_up()
    return {
        r["external_id"]: r
        for r in queries.list_sessions(services.models, limit=100)
        if r["agent"] == "openclaw"
    }


def test_openclaw_prompt_without_session_id_joins_the_session_its_key_names(
    services: Services,
) -> None:
    """Upstream ``message_received`` has only ``sessionKey``, which stays the same across
    ``/new``: the prompt goes to the session the key names (learnt from
    ``session_start``, ``session_end.nextSessionId`` and hooks carrying both), not to a
    session named after the key. The first session id is the real transcript's."""
    sid = json.loads(OPENCLAW.read_text().splitlines()[0])["id"]
    sid2 = "5b0e1f7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    send = _OpenClawSender(services)

    first = _upstream_turn(sid, "r1", "List files")
    send(_start(sid), *first)
    rows = _openclaw_sessions(services)
    assert list(rows) == [sid]
    row = rows[sid]
    assert (row["prompt_count"], row["tool_call_count"], row["status"]) == (1, 1, "WAITING")
    assert (row["input_tokens"], row["output_tokens"]) == (100, 20)

    # /new: the command reaches the old session, then the key moves on (session_end
    # names the next session, session_start starts it); a late hook of the old session
    # does not move it back.
    new = {**first[0], "event": {**first[0]["event"], "content": "/new", "runId": "r2"}}
    end = {"hook": "session_end",
           "event": {"sessionId": sid, "sessionKey": KEY, "messageCount": 4, "reason": "new",
                     "nextSessionId": sid2},
           "ctx": {"agentId": "main", "sessionId": sid, "sessionKey": KEY}}
    late = {**first[2], "event": {**first[2]["event"], "toolCallId": "late"}}
    send(new, end, _start(sid2, resumed_from=sid), late, *_upstream_turn(sid2, "r3", "hello"))
    # The first prompt delivered again (same capture key) after the key moved on: the
    # session of its first resolution, so nothing is appended.
    before = services.ledger.max_position()
    send(first[0], key="oc-2")
    assert services.ledger.max_position() == before

    rows = _openclaw_sessions(services)
    assert set(rows) == {sid, sid2}
    assert [b["prompt"] for b in _row(services, sid2)["batches"]] == ["hello"]
    assert rows[sid2]["prompt_count"] == 1 and rows[sid2]["tool_call_count"] == 1
    assert [b["prompt"] for b in _row(services, sid)["batches"]] == ["List files"]

    # A key no hook ever tied to a session id: today's behaviour (a session named after
    # the key), recorded as an unbound resolution.
    other = "agent:main:telegram:dm:9"
    send({"hook": "message_received",
          "event": {"from": "telegram:9", "content": "hi", "sessionKey": other},
          "ctx": {"channelId": "telegram", "sessionKey": other}})
    assert _openclaw_sessions(services)[other]["prompt_count"] == 1
    stream = services.ledger.repository.event_store.get(session_key_id("openclaw", other))
    resolved = [e for e in stream if isinstance(e, SessionKey.Resolved)]
    assert [(e.external_id, e.bound) for e in resolved] == [(other, False)]
    bound = [
        (e.external_id, e.previous, e.hook)
        for e in services.ledger.repository.event_store.get(session_key_id("openclaw", KEY))
        if isinstance(e, SessionKey.Bound)
    ]
    assert bound == [(sid, None, "session_start"), (sid2, sid, "session_end")]


def test_openclaw_key_resolution_through_the_spool_the_cli_and_http(settings: Settings) -> None:
    """``hookledger hook openclaw`` with the server down spools to the journal, the
    server drains it at start, later hooks are POSTed: the prompt still joins its
    session."""
    sid = json.loads(OPENCLAW.read_text().splitlines()[0])["id"]
    turn = _upstream_turn(sid, "r1", "List files")
    for p in (_start(sid), turn[0]):
        out = cli(settings, "hook", "openclaw", stdin=orjson.dumps(p), check=False,
                  extra_env={"HOOKLEDGER_URL": "http://127.0.0.1:9"})
        assert out.returncode == 0, out.stderr
    srv = Server(settings).start()
    try:
        responses = _post_all(srv.url, "openclaw", turn[1:], "http")
    finally:
        srv.stop()
    assert [r.status_code for r in responses] == [202] * 4
    services = build(settings)
    try:
        rows = _openclaw_sessions(services)
        assert list(rows) == [sid]
        assert (rows[sid]["prompt_count"], rows[sid]["tool_call_count"]) == (1, 1)
    finally:
        services.close()


# -- the CLI: hook client and import ---------------------------------------------------------


def test_cli_hook_and_import_for_every_new_agent(settings: Settings) -> None:
    """``hookledger hook cursor`` through a real server, then ``hookledger import`` of the
    Gemini, Cursor and OpenClaw fixture files: one session list holds all three agents."""
    srv = Server(settings).start()
    try:
        for p in _cursor_payloads()[:3]:
            out = cli(
                settings,
                "hook",
                "cursor",
                stdin=orjson.dumps(p),
                check=False,
                extra_env={"HOOKLEDGER_URL": srv.url},
            )
            assert out.returncode == 0 and json.loads(out.stdout) == {}
    finally:
        srv.stop()
    drift = FIXTURES / "agent-sessions-schema-drift"
    files = sorted(
        p for p in drift.iterdir() if p.name.startswith(("gemini_", "cursor_", "openclaw_"))
    )
    summary = json.loads(cli(settings, "import", "--json", *map(str, files)).stdout)
    assert summary["files"] == len(files) and summary["files_skipped"] == []
    rows = json.loads(cli(settings, "sessions", "--json").stdout)
    agents = {r["external_id"]: r["agent"] for r in rows}
    assert agents["c0ffee-1"] == "cursor"
    assert {"gemini", "cursor", "openclaw"} == set(agents.values())
    assert sum(1 for a in agents.values() if a == "openclaw") == 3


def test_openclaw_new_with_text_gives_the_new_session_its_first_prompt(
    services: Services,
) -> None:
    """``/new text`` (or ``/reset text``) starts a new session whose first prompt is
    ``text``. OpenClaw emits ``message_received`` before it rotates the session
    (``dispatch-from-config.ts`` fires it ahead of ``initSessionState``, which matches
    the reset trigger and ends/starts the sessions), and that hook names only the key:
    the command belongs to the old session, its text to the next one. Both session ids
    and the new session's first prompt are those of the real transcripts; the hooks are
    BUILT BY HAND from the documented shapes."""
    small = FIXTURES / "agent-sessions-schema-drift" / "openclaw_session_small.jsonl"
    large = FIXTURES / "agent-sessions-schema-drift" / "openclaw_session_large.jsonl"
    sid1, sid2 = (json.loads(p.read_text().splitlines()[0])["id"] for p in (small, large))
    text = next(
        r["message"]["content"][0]["text"]
        for r in map(json.loads, large.read_text().splitlines())
        if r["type"] == "message" and r["message"]["role"] == "user"
    )
    send = _OpenClawSender(services)

    def end(sid: str, reason: str, nxt: str) -> dict[str, Any]:
        return {"hook": "session_end",
                "event": {"sessionId": sid, "sessionKey": KEY, "messageCount": 4,
                          "reason": reason, "nextSessionId": nxt},
                "ctx": {"agentId": "main", "sessionId": sid, "sessionKey": KEY}}

    def prompts(sid: str) -> list[tuple[str, str]]:
        return [(e.text, e.prompt_kind)
                for e in services.ledger.repository.event_store.get(SessionRef("openclaw", sid).id)
                if isinstance(e, Session.PromptSubmitted)]

    first = _upstream_turn(sid1, "r1", "List files")
    send(_start(sid1), *first)
    new = {**first[0], "event": {**first[0]["event"], "content": f"/new {text}", "runId": "r2"}}
    # the new session's turn: its agent hooks (no second message_received)
    send(new, end(sid1, "new", sid2), _start(sid2, resumed_from=sid1),
         *_upstream_turn(sid2, "r2", text)[1:])
    assert prompts(sid1) == [("List files", "human"), ("/new", "command")]
    assert prompts(sid2) == [(text, "human")]
    # placed with the new session's start, after it (a session starts, then is prompted)
    assert _kinds(services, "openclaw", sid2)[:3] == ["Opened", "Started", "PromptSubmitted"]
    rows = _openclaw_sessions(services)
    assert (rows[sid2]["prompt_count"], rows[sid2]["tool_call_count"]) == (1, 1)
    assert [b["prompt"] for b in _row(services, sid2)["batches"]] == [text]
    assert [b["prompt"] for b in _row(services, sid1)["batches"]] == ["List files"]

    # The command, and the start that placed its prompt, delivered again (same capture
    # keys): nothing new anywhere.
    before = services.ledger.max_position()
    send(new, key="oc-7")
    send(_start(sid2, resumed_from=sid1), key="oc-9")
    assert services.ledger.max_position() == before
    # The new session's transcript holds the same first prompt: one prompt.
    import_paths(services.ledger, [large])
    assert prompts(sid2)[0] == (text, "human")
    assert _openclaw_sessions(services)[sid2]["prompt_count"] == sum(
        1 for r in map(json.loads, large.read_text().splitlines())
        if r["type"] == "message" and r["message"]["role"] == "user"
    )

    # /reset without text: the command stays with the session it ends; the next session
    # starts with no prompt (OpenClaw gives its agent a greeting prompt of its own).
    sid3 = "5b0e1f7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    bare = {**first[0], "event": {**first[0]["event"], "content": "/reset", "runId": "r3"}}
    send(bare, end(sid2, "reset", sid3), _start(sid3, resumed_from=sid2))
    assert prompts(sid2)[-1] == ("/reset", "command")
    assert prompts(sid3) == []
    # /reset soft keeps the session: one command there, as typed.
    soft = {**first[0], "event": {**first[0]["event"], "content": "/reset soft keep going"}}
    send(soft)
    assert prompts(sid3) == [("/reset soft keep going", "command")]

    # The new session's hooks recorded before the command (OpenClaw fires them all without
    # waiting): the prompt goes with the next message, to the session the key names.
    sid4 = "0f6c1d2e-3a4b-4c5d-8e9f-a0b1c2d3e4f5"
    late = {**first[0], "event": {**first[0]["event"], "content": "/new fix it", "runId": "r4"}}
    send(end(sid3, "new", sid4), _start(sid4, resumed_from=sid3), late)
    assert prompts(sid4) == [("/new", "command")]
    send({**first[0], "event": {**first[0]["event"], "content": "and the docs", "runId": "r5"}})
    assert prompts(sid4) == [("/new", "command"), ("fix it", "human"), ("and the docs", "human")]

    stream = services.ledger.repository.event_store.get(session_key_id("openclaw", KEY))
    assert [(type(e).__name__, getattr(e, "external_id", None)) for e in stream
            if type(e).__name__.startswith("Prompt")] == [
        ("PromptHeld", None), ("PromptPlaced", sid2), ("PromptHeld", None), ("PromptPlaced", sid4)
    ]


def test_a_chat_file_imported_before_the_hooks_learns_its_cwd_from_them(services: Services) -> None:
    # a Gemini chat file names no cwd: imported first, its session had none for good,
    # though every hook names it (busiest-projects: "(unknown)"; /v1/context: no match)
    import_paths(services.ledger, [CHAT])
    payloads, want = _gemini_payloads()
    services.runner.catch_up()
    [before] = queries.list_sessions(services.models, agent="gemini")
    assert before["cwd"] is None and before["external_id"] == want["session"]
    for i, payload in enumerate(payloads):
        ingest_hook(services.ledger, "gemini", orjson.dumps(payload), f"cwd-{i}", None)
    services.runner.catch_up()
    [after] = queries.list_sessions(services.models, agent="gemini")
    assert after["cwd"] == payloads[0]["cwd"]
    learned = [k for k in _kinds(services, "gemini", want["session"]) if k == "CwdLearned"]
    assert learned == ["CwdLearned"]  # once: later facts naming it append nothing more


def test_an_openclaw_session_start_after_the_transcript_does_not_rewind_it(
    services: Services,
) -> None:
    """The (sanitised real) OpenClaw transcript is imported first; the ``session_start``
    hook of its session, captured when the session began (09:00:00, the transcript's
    header time), arrives after it. It is recorded as history and leaves the session
    where the transcript left it. Before, it moved the session back to ACTIVE."""
    sid = json.loads(OPENCLAW.read_text().splitlines()[0])["id"]
    import_paths(services.ledger, [OPENCLAW])
    before = _row(services, sid)
    assert before["status"] == "PROCESSING"
    start = _openclaw_payloads(sid)[0]
    outcome = ingest_hook(
        services.ledger, "openclaw", json.dumps(start).encode(), "late-start",
        datetime(2026, 2, 24, 9, 0, 0, tzinfo=UTC),
    )
    assert outcome.error is None
    after = _row(services, sid)
    assert after["status"] == "PROCESSING"
    assert after["status_history"] == before["status_history"]
    assert _kinds(services, "openclaw", sid).count("Started") == 1
