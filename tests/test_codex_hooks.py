"""Codex command hooks through ``POST /v1/hooks/codex`` on a real server.

No licensed capture of Codex hook payloads exists (FORMATS.md B, gaps), so the payloads
are built here with the fields of ``openai/codex`` ``codex-rs/hooks/schema/generated/
*.command.input.schema.json``, around a real tool call taken from a real rollout: the
hooks and the later import of that rollout must land in one session with the tool call
counted once (both use the Codex ``call_id``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from uuid import UUID

import httpx
import pytest

from api.bootstrap import Services, build
from api.jobs import run_jobs
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import SessionRef
from projections import queries

from conftest import FIXTURES, Server

ROLLOUT = (
    FIXTURES
    / "agentcmd-codex-rollouts"
    / "rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl"
)


def _rollout() -> list[dict]:
    return [json.loads(line) for line in ROLLOUT.read_text().splitlines() if line.strip()]


def test_codex_hooks_and_rollout_share_one_session(settings: Settings, server: Server) -> None:
    records = _rollout()
    meta = records[0]["payload"]
    call = next(r["payload"] for r in records if r["payload"].get("type") == "function_call")
    prompt = next(
        r["payload"]["message"] for r in records if r["payload"].get("type") == "user_message"
    )
    common = _common(meta, "turn-1")
    hooks = [
        {**common, "hook_event_name": "SessionStart", "source": "startup"},
        {**common, "hook_event_name": "UserPromptSubmit", "prompt": prompt},
        {
            **common,
            "hook_event_name": "PreToolUse",
            "tool_name": call["name"],
            "tool_input": json.loads(call["arguments"]),
            "tool_use_id": call["call_id"],
        },
        {
            **common,
            "hook_event_name": "PostToolUse",
            "tool_name": call["name"],
            "tool_input": json.loads(call["arguments"]),
            "tool_use_id": call["call_id"],
            "tool_response": {"exit_code": 1, "output": "boom"},
        },
        {
            **common,
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "last_assistant_message": "done",
        },
        {**common, "hook_event_name": "PostCompact"},  # newer than this parser: kept as unknown
    ]
    for i, h in enumerate(hooks):
        r = httpx.post(
            server.url + "/v1/hooks/codex",
            content=json.dumps(h).encode(),
            headers={"X-Hookledger-Capture-Key": f"codex-{i}"},
            timeout=30,
        )
        assert r.status_code == 202, r.text
    bad = httpx.post(
        server.url + "/v1/hooks/codex", content=b'{"hook_event_name": "Stop"}', timeout=30
    )
    assert bad.status_code == 400 and "session_id" in bad.text

    services = build(settings)
    try:
        services.runner.catch_up()
        (s,) = queries.list_sessions(services.models, agent="codex")
        assert (s["external_id"], s["status"]) == (meta["id"], "WAITING")
        assert s["prompt_count"] == 1 and s["tool_call_count"] == 1 and s["tool_error_count"] == 1
        detail = queries.get_session(services.models, s["id"])
        assert [b["prompt"] for b in detail["batches"]] == [prompt]
        # import the rollout of the same thread: its copy of the hooked tool call adds nothing
        summary = import_paths(services.ledger, [ROLLOUT])
        assert not summary.skipped
        services.runner.catch_up()
        (s,) = queries.list_sessions(services.models, agent="codex")
        calls = {
            r["payload"]["call_id"] for r in records if r["payload"].get("type") == "function_call"
        }
        assert s["tool_call_count"] == len(calls)
        # and its copy of the hooked prompt is the same fact (prompt text + occurrence)
        prompts = [
            r["payload"]["message"] for r in records if r["payload"].get("type") == "user_message"
        ]
        assert s["prompt_count"] == len(prompts)
    finally:
        services.close()


BIG_ROLLOUT = (
    FIXTURES
    / "agentcmd-codex-rollouts"
    / "rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl"
)


def _common(meta: dict, turn_id: str) -> dict:
    """The fields every Codex hook of the rollout's session carries (``meta``: its
    ``session_meta`` payload)."""
    return {
        "session_id": meta["id"],
        "cwd": meta["cwd"],
        "model": "gpt-5-codex",
        "permission_mode": "default",
        "transcript_path": None,
        "turn_id": turn_id,
    }


def _hooks_of(records: list[dict]) -> list[dict]:
    """The command hooks Codex fires for the session a rollout records: SessionStart, a
    UserPromptSubmit per prompt, PreToolUse / PostToolUse per call (``tool_use_id`` =
    ``call_id``), a Stop per finished turn."""
    meta = records[0]["payload"]
    common = _common(meta, "t0")
    hooks = [{**common, "hook_event_name": "SessionStart", "source": "startup"}]
    calls: dict[str, tuple[str, object]] = {}
    for r in records:
        p = r["payload"]
        if r["type"] == "event_msg" and p.get("type") == "user_message":
            hooks.append({**common, "hook_event_name": "UserPromptSubmit", "prompt": p["message"]})
        elif r["type"] == "response_item" and p.get("type") == "function_call":
            calls[p["call_id"]] = (p["name"], json.loads(p["arguments"]))
            name, args = calls[p["call_id"]]
            hooks.append(
                {
                    **common,
                    "hook_event_name": "PreToolUse",
                    "tool_name": name,
                    "tool_input": args,
                    "tool_use_id": p["call_id"],
                }
            )
        elif r["type"] == "response_item" and p.get("type") == "function_call_output":
            name, args = calls[p["call_id"]]
            hooks.append(
                {
                    **common,
                    "hook_event_name": "PostToolUse",
                    "tool_name": name,
                    "tool_input": args,
                    "tool_use_id": p["call_id"],
                    "tool_response": {"output": p.get("output")},
                }
            )
        elif r["type"] == "event_msg" and p.get("type") in ("task_complete", "turn_aborted"):
            hooks.append({**common, "hook_event_name": "Stop", "stop_hook_active": False})
    return hooks


def _batches(settings: Settings) -> list[tuple]:
    services = build(settings)
    try:
        services.runner.catch_up()
        (s,) = queries.list_sessions(services.models, agent="codex")
        detail = queries.get_session(services.models, s["id"])
        calls = {}
        for c in detail["tool_calls"]:
            calls[c["batch"]] = calls.get(c["batch"], 0) + 1
        return [
            (
                b["batch"],
                b["input_tokens"],
                b["output_tokens"],
                b["cache_read_input_tokens"],
                round(b["cost_usd"], 9),
                calls.get(b["batch"], 0),
            )
            for b in detail["batches"]
        ]
    finally:
        services.close()


def test_a_rollout_imported_after_the_hooks_counts_each_turn_in_its_own_batch(
    settings: Settings, other_settings: Settings
) -> None:
    # The hooks of a real 13-prompt session were recorded first (a journal drained
    # late, or `hookledger import ~/.codex/sessions` afterwards); the rollout then adds
    # the token usage. Each turn's usage belongs to the batch of its prompt, as when the
    # rollout alone is imported. Before, the rollout's facts named no prompt, so all of
    # the session's usage (and cost) went to the last batch.
    records = [json.loads(line) for line in BIG_ROLLOUT.read_text().splitlines() if line.strip()]
    hooks = _hooks_of(records)
    services = build(settings)
    try:
        for n, h in enumerate(hooks):
            assert (
                ingest_hook(services.ledger, "codex", json.dumps(h).encode(), f"c-{n}").error
                is None
            )
        import_paths(services.ledger, [BIG_ROLLOUT])
    finally:
        services.close()
    alone = build(other_settings)
    try:
        import_paths(alone.ledger, [BIG_ROLLOUT])
    finally:
        alone.close()
    after_hooks, rollout_only = _batches(settings), _batches(other_settings)
    assert len(after_hooks) == 13
    assert after_hooks == rollout_only
    # the rollout's session_meta (its Started, before its first prompt) is history: it
    # does not move the session back to ACTIVE after the hooks' prompts
    services = build(settings)
    try:
        (s,) = queries.list_sessions(services.models, agent="codex")
        history = queries.get_session(services.models, s["id"])["status_history"]
        assert [h["cause"] for h in history].count("Started") == 1
    finally:
        services.close()


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_late_session_start_neither_rewinds_nor_reopens_the_session(services: Services) -> None:
    # The real rollout of a thread is imported (its turn is still running: PROCESSING);
    # then the thread's SessionStart hook arrives, captured when the thread started (a
    # journal drained late). It is the past: recorded, the state kept. Before, it moved
    # the session back to ACTIVE.
    records = _rollout()
    meta = records[0]["payload"]
    late_start = {**_common(meta, "t0"), "hook_event_name": "SessionStart", "source": "startup"}
    first, last = _at(records[0]["timestamp"]), _at(records[-1]["timestamp"])

    def start(key: str, at: datetime) -> list[tuple[str | None, str, str]]:
        body = json.dumps(late_start).encode()
        assert ingest_hook(services.ledger, "codex", body, key, at).error is None
        services.runner.catch_up()
        (s,) = queries.list_sessions(services.models, agent="codex")
        history = queries.get_session(services.models, s["id"])["status_history"]
        return [(h["from_status"], h["to_status"], h["cause"]) for h in history]

    import_paths(services.ledger, [ROLLOUT])
    services.runner.catch_up()
    (s,) = queries.list_sessions(services.models, agent="codex")
    assert s["status"] == "PROCESSING"
    before = queries.get_session(services.models, s["id"])["status_history"]
    history = start("late-start", first)
    assert len(history) == len(before) and history[-1][1] == "PROCESSING"
    kinds = [e.kind for e in services.ledger.events.get(UUID(s["id"]))]
    assert kinds.count("Started") == 2  # the hook's start is kept, as history
    # The idle timeout ends the session; another copy of that start spooled elsewhere
    # arrives: it does not reopen the session either.
    run_jobs(services, last + timedelta(hours=2))
    assert start("late-start-again", first + timedelta(seconds=1))[-1][1] == "COMPLETED"
    # A start after the session's last activity is a new start (codex resume): it reopens.
    assert start("resumed", last + timedelta(hours=3))[-1] == ("COMPLETED", "ACTIVE", "Reopened")


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "rollout-first"])
def test_a_failed_call_counts_as_failed_whichever_source_comes_first(
    services: Services, hooks_first: bool
) -> None:
    # The real 13-prompt rollout has 12 failed calls: outputs whose metadata.exit_code is
    # not 0, and Codex's "failed in sandbox …" / "patch rejected by user" texts. Its
    # PostToolUse hooks (BUILT BY HAND: tool_response is the output Codex gives the
    # model, the rollout's output string) name the same failures. Before, a hook counted
    # a call failed only on a top-level exit_code, so with the hooks first the session
    # had 0 tool errors, and 12 with the rollout first.
    records = [json.loads(line) for line in BIG_ROLLOUT.read_text().splitlines() if line.strip()]
    hooks = _hooks_of(records)
    outputs = {
        r["payload"]["call_id"]: r["payload"].get("output")
        for r in records
        if r["payload"].get("type") == "function_call_output"
    }
    for h in hooks:
        if h["hook_event_name"] == "PostToolUse":
            h["tool_response"] = outputs[h["tool_use_id"]]

    def send_hooks() -> None:
        for n, h in enumerate(hooks):
            body = json.dumps(h).encode()
            assert ingest_hook(services.ledger, "codex", body, f"c-{n}").error is None

    if hooks_first:
        send_hooks()
    import_paths(services.ledger, [BIG_ROLLOUT])
    if not hooks_first:
        send_hooks()
    services.runner.catch_up()
    (s,) = queries.list_sessions(services.models, agent="codex")
    assert s["tool_call_count"] == 123 and s["tool_error_count"] == 12
    failed = [c for c in queries.get_session(services.models, s["id"])["tool_calls"] if c["is_error"]]
    assert {c["error"].split(" ")[0] for c in failed} <= {"exit", "failed", "patch"}


def _subagent_session(parent: dict) -> tuple[list[dict], list[dict]]:
    """A subagent the thread of ``parent`` (its ``session_meta`` payload) spawned: the
    child's rollout records (``session_meta.id`` = the child thread,
    ``source.subagent.thread_spawn`` naming the parent) and the hooks Codex fires for it,
    BUILT BY HAND from ``subagent-start`` / ``subagent-stop`` / ``pre-tool-use`` /
    ``post-tool-use.command.input.schema.json``: SubagentStart and SubagentStop on the
    parent's ``session_id`` with the child's ``agent_id``, and the child's tool hooks
    carrying that ``agent_id`` (optional in the tool schemas)."""
    child = "019b0000-0000-7000-8000-00000000c0de"
    at = "2026-03-01T10:00:{:02d}.000Z"
    calls = [("call_a", "ls", 0), ("call_b", "false", 1)]
    spawn = {"thread_spawn": {"parent_thread_id": parent["id"], "depth": 1}}
    rollout: list[dict] = [
        {"type": "session_meta", "payload": {"id": child, "session_id": parent["id"],
                                             "cwd": parent["cwd"], "source": {"subagent": spawn}}},
        {"type": "turn_context", "payload": {"cwd": parent["cwd"], "model": "gpt-5-codex"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "look at the tests"}},
    ]
    for call_id, cmd, code in calls:
        output = {"output": "", "metadata": {"exit_code": code}}
        rollout += [
            {"type": "response_item", "payload": {"type": "function_call", "name": "shell",
                                                  "call_id": call_id,
                                                  "arguments": json.dumps({"command": cmd})}},
            {"type": "response_item", "payload": {"type": "function_call_output",
                                                  "call_id": call_id, "output": json.dumps(output)}},
        ]
    rollout.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    for i, r in enumerate(rollout):
        r["timestamp"] = at.format(i)
    common = _common(parent, "turn-9")
    sub = {**common, "agent_id": child, "agent_type": "explorer"}
    hooks: list[dict] = [{**sub, "hook_event_name": "SubagentStart"}]
    for call_id, cmd, code in calls:
        tool = {**sub, "tool_name": "Bash", "tool_input": {"command": cmd}, "tool_use_id": call_id}
        hooks += [
            {**tool, "hook_event_name": "PreToolUse"},
            {**tool, "hook_event_name": "PostToolUse", "tool_response": {"exit_code": code}},
        ]
    hooks.append({**sub, "hook_event_name": "SubagentStop", "stop_hook_active": False,
                  "agent_transcript_path": None, "last_assistant_message": "done"})
    return rollout, hooks


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "rollout-first"])
def test_a_subagent_seen_by_hooks_and_its_rollout_is_one_child_session(
    services: Services, tmp_path, hooks_first: bool
) -> None:
    # Review finding: SubagentStart/SubagentStop were unknown hooks, and a subagent's tool
    # hooks went to the thread that spawned it: with the hooks and the child's rollout,
    # `sessions --json` showed the parent with the child's 2 tool calls and the child
    # (no parent_id before the rollout fix) with the same 2 again: 4 calls for 2.
    parent = _rollout()[0]["payload"]
    rollout, hooks = _subagent_session(parent)
    path = tmp_path / f"rollout-2026-03-01T10-00-00-{rollout[0]['payload']['id']}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rollout))

    def send_hooks() -> None:
        for n, h in enumerate(hooks):
            body = json.dumps(h).encode()
            assert ingest_hook(services.ledger, "codex", body, f"s-{n}").error is None

    if hooks_first:
        send_hooks()
    import_paths(services.ledger, [ROLLOUT, path])
    if not hooks_first:
        send_hooks()
    services.runner.catch_up()
    sessions = {s["external_id"]: s for s in queries.list_sessions(services.models, agent="codex")}
    assert set(sessions) == {parent["id"], rollout[0]["payload"]["id"]}
    child, top = sessions[rollout[0]["payload"]["id"]], sessions[parent["id"]]
    assert child["parent_id"] == top["id"]
    # independent count: the child's calls are its rollout's call_ids, one failed (exit 1)
    calls = {r["payload"]["call_id"] for r in rollout if r["payload"].get("type") == "function_call"}
    assert child["tool_call_count"] == len(calls) == 2 and child["tool_error_count"] == 1
    assert child["prompt_count"] == 1
    # the parent keeps only its own rollout's calls
    own = {r["payload"]["call_id"] for r in _rollout() if r["payload"].get("type") == "function_call"}
    assert top["tool_call_count"] == len(own)
    assert child["status"] == "WAITING"  # its turn ended; SubagentStop is no session end


def test_each_turn_of_a_subagent_ends_with_its_own_subagent_stop(services: Services) -> None:
    # SubagentStop fires at the end of each of a subagent's turns, in place of Stop
    # (openai/codex#22873); send_input gives the child another turn. Keyed per child
    # (subagent:{id}:end), the second SubagentStop was dropped as a duplicate of the
    # first. Hooks BUILT BY HAND as in _subagent_session.
    parent = _rollout()[0]["payload"]
    _, hooks = _subagent_session(parent)
    start, stop = hooks[0], hooks[-1]
    child = start["agent_id"]
    second = {**stop, "turn_id": "turn-10", "last_assistant_message": "done again"}

    def status_after(n: int, hook: dict) -> str:
        assert ingest_hook(services.ledger, "codex", json.dumps(hook).encode(), f"r-{n}").error is None
        services.runner.catch_up()
        sessions = {s["external_id"]: s for s in queries.list_sessions(services.models, agent="codex")}
        return sessions[child]["status"]

    assert [status_after(n, h) for n, h in enumerate([start, stop, second])] == [
        "ACTIVE", "WAITING", "WAITING"
    ]
    events = list(services.ledger.repository.event_store.get(SessionRef("codex", child).id))
    ends = [e.last_assistant_message for e in events if type(e).__name__ == "TurnEnded"]
    assert ends == ["done", "done again"]


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "rollout-first"])
def test_a_command_whose_text_says_it_failed_counts_failed_whichever_source_comes_first(
    services: Services, tmp_path, hooks_first: bool
) -> None:
    # Newer Codex gives the model (and a PostToolUse hook, as tool_response) a command's
    # result as text whose header says `Process exited with code N` (openai/codex#45917;
    # no structured exit code reaches the hook: #34289). Review finding: with the hooks
    # first, `sessions --json` showed tool_error_count 0 for a session whose `false`
    # exited 1 (the rollout's copy, recorded second, adds nothing). BUILT BY HAND: the
    # hooks from the pre/post-tool-use schemas, the rollout in the 0.146 fixture's shapes.
    sid = "019fc8be-3658-7ca3-9e29-0000000e71e7"

    def result(code: int, body: str) -> str:
        return (f"Chunk ID: 3f2a1c\nWall time: 0.0104 seconds\nProcess exited with code {code}\n"
                f"Original token count: 4\nOutput:\n{body}")

    # the second command's own output prints a status line: only the header counts
    calls = [("call-1", "ls", 0, "a.txt\nProcess exited with code 3\n"), ("call-2", "false", 1, "")]
    rollout: list[dict] = [
        {"type": "session_meta", "payload": {"id": sid, "cwd": "/tmp/repo", "cli_version": "0.146.0"}},
        {"type": "turn_context", "payload": {"cwd": "/tmp/repo", "model": "gpt-5.6"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "run them"}},
    ]
    hooks: list[dict] = []
    common = {"session_id": sid, "cwd": "/tmp/repo", "model": "gpt-5.6",
              "permission_mode": "default", "transcript_path": None, "turn_id": "turn-1"}
    for cid, cmd, code, body in calls:
        rollout += [
            {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command",
                                                  "call_id": cid, "arguments": json.dumps({"cmd": cmd})}},
            {"type": "event_msg", "payload": {"type": "exec_command_end", "call_id": cid, "exit_code": code}},
            {"type": "response_item", "payload": {"type": "function_call_output", "call_id": cid,
                                                  "output": {"type": "input_text", "text": result(code, body)}}},
        ]
        tool = {**common, "tool_name": "Bash", "tool_input": {"command": cmd}, "tool_use_id": cid}
        hooks += [{**tool, "hook_event_name": "PreToolUse"},
                  {**tool, "hook_event_name": "PostToolUse", "tool_response": result(code, body)}]
    path = tmp_path / f"rollout-2026-08-03T10-48-56-{sid}.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": f"2026-08-03T10:48:{i:02d}.000Z", **r}) + "\n"
        for i, r in enumerate(rollout)
    ))

    def send_hooks() -> None:
        for n, h in enumerate(hooks):
            assert ingest_hook(services.ledger, "codex", json.dumps(h).encode(), f"x-{n}").error is None

    if hooks_first:
        send_hooks()
    import_paths(services.ledger, [path])
    if not hooks_first:
        send_hooks()
    services.runner.catch_up()
    (s,) = queries.list_sessions(services.models, agent="codex")
    failed = {cid for cid, _, code, _ in calls if code != 0}  # independent: the exit codes
    assert s["tool_call_count"] == len(calls) and s["tool_error_count"] == len(failed)
    detail = queries.get_session(services.models, s["id"])
    assert {c["tool_use_id"] for c in detail["tool_calls"] if c["is_error"]} == failed
