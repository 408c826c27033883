"""Hook payloads replayed against the running server give the same session as the
transcript: the same human prompts, prompt batches and tool calls.

Real data: ``coorp-serverless-plugins-hook-logs`` (Claude Code 2.1.170) holds every hook
payload of session 4f65f198 and the transcript saved by its last Stop hook. Payloads
are put in transcript order (a tool call's Pre hook at its ``tool_use`` record, Post
at its ``tool_result``, a prompt at its user record, Stop after the assistant message
it quotes) and POSTed one by one to ``hookledger serve``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from api.bootstrap import Services, build
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from projections import queries

from conftest import FIXTURES, Server

SESSION = "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
LOGS = FIXTURES / "coorp-serverless-plugins-hook-logs"


def _text(rec: dict[str, Any]) -> str:
    content = (rec.get("message") or {}).get("content")
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return content if isinstance(content, str) else ""


def _ordered_payloads() -> tuple[list[dict[str, Any]], int]:
    """Main-session hook payloads in transcript order, and how many had no counterpart."""
    transcript = json.loads((LOGS / SESSION / "chat.json").read_text())
    where: dict[str, float] = {}
    for i, rec in enumerate(transcript):
        for block in (rec.get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                where[f"pre:{block['id']}"] = i
            if isinstance(block, dict) and block.get("type") == "tool_result":
                where[f"post:{block['tool_use_id']}"] = i + 0.5
    payloads: list[tuple[float, dict[str, Any]]] = []
    unmatched = 0

    def place(at: float | None, payload: dict[str, Any]) -> None:
        nonlocal unmatched
        if at is None:
            unmatched += 1
        else:
            payloads.append((at, payload))

    for p in json.loads((LOGS / SESSION / "pre_tool_use.json").read_text()):
        if not p.get("agent_id"):
            place(where.get(f"pre:{p['tool_use_id']}"), p)
    for p in json.loads((LOGS / SESSION / "post_tool_use.json").read_text()):
        if not p.get("agent_id"):
            place(where.get(f"post:{p['tool_use_id']}"), p)
    for p in json.loads((LOGS / "user_prompt_submit.json").read_text()):
        if p["session_id"] != SESSION:
            continue
        head = p["prompt"].split(" ", 1)[-1][:60] if p["prompt"].startswith("/") else p["prompt"][:60]
        at = next(
            (i - 0.25 for i, r in enumerate(transcript) if r.get("type") == "user" and head in _text(r)),
            None,
        )
        place(at, p)
    for p in json.loads((LOGS / SESSION / "stop.json").read_text()):
        quote = (p.get("last_assistant_message") or "").strip()
        at = next(
            (i + 0.75 for i, r in enumerate(transcript) if r.get("type") == "assistant" and quote and _text(r).strip() == quote),
            None,
        )
        place(at, p)
    start = [p for p in json.loads((LOGS / "session_start.json").read_text()) if p["session_id"] == SESSION]
    return start + [p for _, p in sorted(payloads, key=lambda x: x[0])], unmatched


def _subagent_payloads(agent_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One subagent run's tool hooks (Pre then Post of each call, in the order of its
    PreToolUse hooks; ``agent_id`` set, so they belong to the child session) and its
    SubagentStop hook (which the parent's stream records)."""
    pre = [p for p in json.loads((LOGS / SESSION / "pre_tool_use.json").read_text()) if p.get("agent_id") == agent_id]
    post = {p["tool_use_id"]: p for p in json.loads((LOGS / SESSION / "post_tool_use.json").read_text())
            if p.get("agent_id") == agent_id}
    tools = [q for p in pre for q in (p, post.get(p["tool_use_id"])) if q is not None]
    (stop,) = [p for p in json.loads((LOGS / SESSION / "subagent_stop.json").read_text()) if p["agent_id"] == agent_id]
    return tools, stop


def _view(settings: Settings) -> dict[str, Any]:
    services = build(settings)
    try:
        services.runner.catch_up()
        sid = queries.find_session_id(services.models, SESSION)
        assert sid is not None
        detail = queries.get_session(services.models, sid)
        assert detail is not None
        return detail
    finally:
        services.close()


def _shape(detail: dict[str, Any], only: set[str] | None = None, ended: set[str] | None = None) -> dict[str, Any]:
    """Comparable form; ``ended``: calls whose outcome both sides saw (else outcome None)."""
    calls = [c for c in detail["tool_calls"] if only is None or c["tool_use_id"] in only]
    return {
        "prompts": [b["prompt"] for b in detail["batches"]],
        "batches": [b["batch"] for b in detail["batches"]],
        "tool_calls": sorted(
            (c["tool_use_id"], c["batch"], c["tool_name"], c["is_error"] if ended is None or c["tool_use_id"] in ended else None)
            for c in calls
        ),
        "batch_status": [b["status"] for b in detail["batches"][:-1]],
    }


def test_hook_replay_equals_transcript_import(settings: Settings, tmp_path: Path) -> None:
    payloads, _unmatched = _ordered_payloads()
    # The logger kept hooks for 35 of the 128 main-session tool calls, and the last
    # prompt came after the transcript snapshot: compare where both exist.
    assert len(payloads) >= 75

    srv = Server(settings).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for n, payload in enumerate(payloads):
                r = client.post("/v1/hooks/claude-code", json=payload, headers={"X-Hookledger-Capture-Key": f"replay-{n}"})
                assert r.status_code == 202, r.text
            over_http = client.get(f"/v1/sessions/{SESSION}").json()
    finally:
        srv.stop()
    from_hooks = _view(settings)
    assert _shape(over_http) == _shape(from_hooks)

    transcript_settings = Settings(tmp_path / "from-transcript")
    services = build(transcript_settings)
    try:
        import_paths(services.ledger, [LOGS / SESSION / "chat.json"])
    finally:
        services.close()
    from_transcript = _view(transcript_settings)

    seen_by_hooks = {c["tool_use_id"] for c in from_hooks["tool_calls"]}
    # A failed Bash call fires PostToolUseFailure, which this logger did not keep.
    ended = {c["tool_use_id"] for c in from_hooks["tool_calls"] if c["status"] != "started"}
    hooks = _shape(from_hooks, ended=ended)
    transcript = _shape(from_transcript, only=seen_by_hooks, ended=ended)
    assert len(seen_by_hooks) == 35
    assert hooks["prompts"] == transcript["prompts"]
    assert len(hooks["prompts"]) == 3  # `/prime …` (a prompt command) and two typed prompts
    assert hooks["batches"] == transcript["batches"]
    assert hooks["tool_calls"] == transcript["tool_calls"]
    assert hooks["batch_status"] == transcript["batch_status"]


def test_a_tool_call_seen_only_at_its_end_is_counted_once(services: Services) -> None:
    # PostToolUse without its PreToolUse (hooks installed while the tool ran, or a
    # narrower PreToolUse matcher): still one tool call, in the counts as in the rows
    posts = json.loads((LOGS / SESSION / "post_tool_use.json").read_text())
    post = next(p for p in posts if p.get("tool_use_id") and p.get("tool_input"))
    first = ingest_hook(services.ledger, "claude-code", json.dumps(post).encode(), "post-1")
    assert first.result.appended == 3  # opened, the derived start, the end
    pre = {k: v for k, v in post.items() if k not in ("tool_response", "duration_ms")}
    pre["hook_event_name"] = "PreToolUse"  # the start, arriving late: no new tool call
    ingest_hook(services.ledger, "claude-code", json.dumps(pre).encode(), "pre-1")
    services.runner.catch_up()
    (row,) = queries.list_sessions(services.models)
    detail = queries.get_session(services.models, row["id"])
    assert detail is not None
    (call,) = detail["tool_calls"]
    assert row["tool_call_count"] == 1
    assert (call["tool_use_id"], call["tool_name"]) == (post["tool_use_id"], post["tool_name"])
    assert call["tool_input"] == post["tool_input"] and call["status"] == "completed"


def test_a_start_arriving_after_its_derived_start_is_kept_not_dropped(services: Services) -> None:
    # a remote hook's PreToolUse spooled while the server was down arrives after its
    # PostToolUse: no new fact (the start was derived), but its record is kept whole,
    # naming the call it starts
    posts = json.loads((LOGS / SESSION / "post_tool_use.json").read_text())
    post = next(p for p in posts if p.get("tool_use_id") and p.get("tool_input"))
    pre = {k: v for k, v in post.items() if k not in ("tool_response", "duration_ms")}
    pre["hook_event_name"] = "PreToolUse"
    ingest_hook(services.ledger, "claude-code", json.dumps(post).encode(), "post-1")
    late = ingest_hook(services.ledger, "claude-code", json.dumps(pre).encode(), "pre-1")
    again = ingest_hook(services.ledger, "claude-code", json.dumps(pre).encode(), "pre-1")
    assert (late.result.appended, again.result.appended) == (1, 0)
    kept = [e for _, e in services.ledger.read_log(0, 100) if e.raw and '"PreToolUse"' in e.raw]
    assert [type(e).__name__ for e in kept] == ["LateStartObserved"]
    assert kept[0].record_type == "tool call start after its completion"
    assert (kept[0].tool_use_id, kept[0].tool_input) == (post["tool_use_id"], post["tool_input"])
    services.runner.catch_up()
    (row,) = queries.list_sessions(services.models)
    assert row["tool_call_count"] == 1


def test_hook_prompts_after_the_transcript_match_its_copies_in_order(services, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The same words typed twice are in the transcript imported first; the hooks then
    # deliver them, and a third time. The first two hooks are the transcript's two
    # prompts (kept as records), the third is a new prompt. Before, each hook was matched
    # with the first copy again, so the third prompt was lost.
    import json as _json
    from uuid import UUID

    from ledger.importer import import_paths
    from ledger.ingest import ingest_hook
    from projections import queries

    real = (FIXTURES / "spotter-claude-transcripts" / "short.jsonl").read_text().splitlines()
    (first,) = [r for r in map(_json.loads, real) if r.get("type") == "user" and isinstance(r["message"]["content"], str)]
    again = {**first, "uuid": "00000000-0000-4000-8000-0000000000aa", "timestamp": "2026-02-10T21:30:00.000Z"}
    path = tmp_path / "55604662-cf2a-4331-851a-ec234028f8ca.jsonl"
    path.write_text("\n".join([*real, _json.dumps(again)]) + "\n")
    import_paths(services.ledger, [path])
    services.runner.catch_up()
    (before,) = queries.list_sessions(services.models)
    for n in range(3):
        body = {"session_id": first["sessionId"], "transcript_path": str(path), "cwd": first["cwd"],
                "hook_event_name": "UserPromptSubmit", "prompt": first["message"]["content"]}
        ingest_hook(services.ledger, "claude-code", _json.dumps(body).encode(), f"capture-{n}")
    services.runner.catch_up()
    (after,) = queries.list_sessions(services.models)
    assert after["prompt_count"] == before["prompt_count"] + 1
    kept = [e for e in services.ledger.events.get(UUID(after["id"]))
            if getattr(e, "record_type", None) == "prompt captured again"]
    assert [e.event_key for e in kept] == ["hook:capture-0", "hook:capture-1"]


def test_hook_tool_calls_after_the_transcript_are_kept_not_counted_again(services: Services) -> None:
    # The transcript was imported first (a remote machine's spooled hooks forwarded
    # later); its tool calls carry the hooks' tool_use_ids. Each hook PreToolUse and
    # PostToolUse is no new call but is kept whole, as a hook prompt is. Before, the
    # hooks' tool payloads were dropped without a trace.
    from uuid import UUID

    payloads, _ = _ordered_payloads()
    import_paths(services.ledger, [LOGS / SESSION / "chat.json"])
    services.runner.catch_up()
    (before,) = [r for r in queries.list_sessions(services.models) if r["external_id"] == SESSION]
    for n, p in enumerate(payloads):
        assert ingest_hook(services.ledger, "claude-code", json.dumps(p).encode(), f"late-{n}").error is None
    services.runner.catch_up()
    (after,) = [r for r in queries.list_sessions(services.models) if r["external_id"] == SESSION]
    assert after["tool_call_count"] == before["tool_call_count"] == 128
    events = list(services.ledger.events.get(UUID(after["id"])))
    kept = [e for e in events if getattr(e, "record_type", None) == "tool call captured again"]
    tool_hooks = [p for p in payloads if p["hook_event_name"] in ("PreToolUse", "PostToolUse")]
    assert len(kept) == len(tool_hooks) == 69
    assert sorted(e.event_key for e in kept) == sorted(
        f"hook:late-{n}" for n, p in enumerate(payloads) if p in tool_hooks
    )
    assert all(json.loads(e.raw)["tool_use_id"] for e in kept)
    # delivered again (same capture keys): nothing more
    head = services.ledger.max_position()
    for n, p in enumerate(payloads):
        ingest_hook(services.ledger, "claude-code", json.dumps(p).encode(), f"late-{n}")
    assert services.ledger.max_position() == head
