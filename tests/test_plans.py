"""Plan capture: writes to plan directories and ExitPlanMode, checked against the tool
calls recorded in real fixtures (read with plain json), through hooks, and a rebuild."""

from __future__ import annotations

import json
from typing import Any

from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import session_id
from projections.plans import session_plans

from conftest import FIXTURES

COORP = FIXTURES / "coorp-serverless-plugins-hook-logs" / "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
TWO = FIXTURES / "agentcmd-claude-transcripts" / "full-session-two.jsonl"


def _blocks(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    out, seen = [], set()
    for r in records:
        content = (
            r.get("message", {}).get("content") if isinstance(r.get("message"), dict) else None
        )
        for b in content if isinstance(content, list) else []:
            key = b.get("id") or b.get("tool_use_id")
            if isinstance(b, dict) and b.get("type") == kind and key not in seen:
                seen.add(key)
                out.append(b)
    return out


def test_writes_to_a_plans_directory_are_captured_and_updated_in_place(services: Services) -> None:
    records = json.loads((COORP / "chat.json").read_bytes())
    writes = [
        b
        for b in _blocks(records, "tool_use")
        if b["name"] in ("Write", "Edit", "MultiEdit")
        and "/plans/" in b["input"].get("file_path", "")
    ]
    paths = {b["input"]["file_path"] for b in writes}
    assert len(paths) >= 5 and len(writes) > len(paths)  # the fixture does rewrite a plan
    import_paths(services.ledger, [COORP / "chat.json"])
    services.runner.catch_up()
    sid = str(session_id("claude-code", records[-1]["sessionId"]))
    plans = {p["plan_id"]: p for p in session_plans(services.models, sid)}
    assert set(plans) == paths
    for path in paths:
        mine = [b for b in writes if b["input"]["file_path"] == path]
        assert plans[path]["revisions"] == len(mine)
        first = mine[0]["input"]
        assert mine[0]["name"] == "Write"
        expected = first["content"]
        for b in mine[1:]:
            if b["name"] == "Write":
                expected = b["input"]["content"]
            else:
                assert b["input"]["old_string"] in expected
                expected = expected.replace(b["input"]["old_string"], b["input"]["new_string"], 1)
        assert plans[path]["content"] == expected and plans[path]["unapplied_edits"] == 0
    # reading a plan file is not writing one (the hook logs read the same files)
    reads = [
        p
        for p in json.loads((COORP / "pre_tool_use.json").read_bytes())
        if p["tool_name"] == "Read"
    ]
    assert any("/plans/" in p["tool_input"]["file_path"] for p in reads)


def test_exit_plan_mode_captures_the_version_and_the_users_answer(services: Services) -> None:
    records = [json.loads(x) for x in TWO.read_bytes().splitlines()]
    exits = [b for b in _blocks(records, "tool_use") if b["name"] == "ExitPlanMode"]
    results = {b["tool_use_id"]: b for b in _blocks(records, "tool_result")}
    assert len(exits) == 2
    import_paths(services.ledger, [TWO])
    services.runner.catch_up()
    sid = str(session_id("claude-code", records[-1]["sessionId"]))
    plans = [p for p in session_plans(services.models, sid) if p["source"] == "exit_plan_mode"]
    assert [(p["content"], p["approved"]) for p in plans] == [
        (b["input"]["plan"], not results[b["id"]].get("is_error", False)) for b in exits
    ]
    assert len({p["batch"] for p in plans}) == 2  # one plan per prompt batch


def test_hooks_update_one_plan_and_a_rebuild_reproduces_it(services: Services) -> None:
    def hook(key: str, event: str, **fields: Any) -> None:
        body = {"session_id": "plan-hooks", "cwd": "/w", "hook_event_name": event, **fields}
        assert (
            ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), key).error
            is None
        )

    path = "/w/.claude/plans/refactor.md"
    hook("h1", "UserPromptSubmit", prompt="plan the refactor")
    for i, text in enumerate(("# v1\n- a", "# v2\n- a\n- b")):
        tool = {
            "tool_name": "Write",
            "tool_use_id": f"toolu_w{i}",
            "tool_input": {"file_path": path, "content": text},
        }
        hook(f"pre{i}", "PreToolUse", **tool)
        hook(f"post{i}", "PostToolUse", tool_response={"type": "update"}, **tool)
    plan = {
        "tool_name": "ExitPlanMode",
        "tool_use_id": "toolu_x",
        "tool_input": {"plan": "# v2 approved"},
    }
    hook("pre-x", "PreToolUse", **plan)
    hook("post-x", "PostToolUse", tool_response="User has approved your plan.", **plan)
    sid = str(session_id("claude-code", "plan-hooks"))
    with TestClient(create_app(services)) as client:
        body = client.get(f"/v1/sessions/{sid}/plans").json()
        assert client.get("/v1/sessions/nope/plans").status_code == 404
    got = [
        (p["plan_id"], p["content"], p["revisions"], p["approved"], p["batch"])
        for p in body["plans"]
    ]
    assert got == [
        (path, "# v2\n- a\n- b", 2, None, 1),
        ("exit_plan_mode:1", "# v2 approved", 1, True, 1),
    ]
    services.runner.rebuild("plans")
    assert [
        (p["plan_id"], p["content"], p["revisions"], p["approved"], p["batch"])
        for p in session_plans(services.models, sid)
    ] == got
