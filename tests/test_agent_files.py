"""Gemini CLI chat files, Cursor agent transcripts and OpenClaw session files, imported.

Real data: ``agentcmd-gemini-sessions`` (Gemini CLI chat files, Oct 2025) and the
``gemini_*``, ``cursor_*``, ``openclaw_*`` files of ``agent-sessions-schema-drift``
(sanitised from real sessions; see each PROVENANCE.md). For every file the prompts,
tool calls and token totals of the session equal a count written here with plain
``json`` over the fixture (not our parsers); re-importing appends nothing; records
without a modelled fact are kept as ``RecordObserved`` with their raw form.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.bootstrap import Services
from ledger.envelope import raw_record
from ledger.importer import import_paths
from ledger.observation import SessionRef
from ledger.parsing import detect
from projections import queries

from conftest import FIXTURES

DRIFT = FIXTURES / "agent-sessions-schema-drift"
GEMINI = FIXTURES / "agentcmd-gemini-sessions"
TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    return "\n".join(
        p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _gemini_tokens(messages: list[dict[str, Any]]) -> dict[str, int]:
    """Anthropic convention, written out: input without cache reads (+ tool-use prompt),
    output with thoughts. The four add up to Gemini's own ``total`` for each message."""
    out = dict.fromkeys(TOKENS, 0)
    for m in messages:
        t = m.get("tokens")
        if m.get("type") != "gemini" or not t:
            continue
        assert t["input"] + t["output"] + t["thoughts"] + t["tool"] == t["total"], m["id"]
        out["input_tokens"] += t["input"] - t["cached"] + t["tool"]
        out["output_tokens"] += t["output"] + t["thoughts"]
        out["cache_read_input_tokens"] += t["cached"]
    return out


def expected(path: Path) -> tuple[str, str, dict[str, Any]]:
    """(agent, session external id, counts) for one fixture, from plain json."""
    stem = path.name.removesuffix(path.suffix)
    zero = dict.fromkeys(TOKENS, 0)
    if path.name.startswith("cursor_"):
        recs = _lines(path)
        prompts = [
            _text(r["message"]["content"])
            for r in recs
            if r.get("role") == "user" and _text(r["message"]["content"])
        ]
        calls = sum(
            1
            for r in recs
            if r.get("role") == "assistant"
            for b in r["message"]["content"]
            if b.get("type") in ("tool_use", "tool_call")
        )
        no_fact = [r for r in recs if "role" not in r and r.get("type") != "turn_ended"]
        return (
            "cursor",
            stem,
            {"prompts": prompts, "tool_calls": calls, "tokens": zero, "observed": len(no_fact)},
        )
    if path.name.startswith("openclaw_"):
        recs = _lines(path)
        msgs = [r["message"] for r in recs if r["type"] == "message"]
        prompts = [_text(m["content"]) for m in msgs if m["role"] == "user"]
        calls = sum(
            1
            for m in msgs
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "toolCall"
        )
        observed = [r for r in recs if r["type"] != "message"] + [
            m for m in msgs if m["role"] == "system"
        ]
        return (
            "openclaw",
            recs[0]["id"],
            {"prompts": prompts, "tool_calls": calls, "tokens": zero, "observed": len(observed)},
        )
    if path.suffix == ".jsonl":  # Gemini v0.40 JSONL: header, message lines, $set lines
        recs = _lines(path)
        msgs = list({r["id"]: r for r in recs if "id" in r and "type" in r}.values())
        prompts = [_text(m["content"]) for m in msgs if m["type"] == "user"]
        calls = sum(len(m.get("toolCalls") or []) for m in msgs)
        observed = 1 + sum(1 for r in recs if "$set" in r)  # the header and the patches
        return (
            "gemini",
            recs[0]["sessionId"],
            {
                "prompts": prompts,
                "tool_calls": calls,
                "tokens": _gemini_tokens(msgs),
                "observed": observed,
            },
        )
    doc = json.loads(path.read_text())
    if "history" in doc:  # legacy form: no session id, no tokens
        prompts = [_text(h["parts"]) for h in doc["history"] if h["role"] == "user"]
        return "gemini", stem, {"prompts": prompts, "tool_calls": 0, "tokens": zero, "observed": 1}
    msgs = doc.get("messages", [doc])
    prompts = [_text(m["content"]) for m in msgs if m["type"] == "user"]
    calls = sum(len(m.get("toolCalls") or []) for m in msgs)
    sid = doc.get("sessionId", stem)
    observed = 1 if "messages" in doc else 0  # the session header
    return (
        "gemini",
        sid,
        {
            "prompts": prompts,
            "tool_calls": calls,
            "tokens": _gemini_tokens(msgs),
            "observed": observed,
        },
    )


FILES = sorted(
    [p for p in GEMINI.glob("*.json")]
    + [p for p in DRIFT.iterdir() if p.name.startswith(("gemini_", "cursor_", "openclaw_"))]
)


def _session(services: Services, agent: str, external_id: str) -> dict[str, Any]:
    services.runner.catch_up()
    rows = [r for r in queries.list_sessions(services.models) if r["external_id"] == external_id]
    assert len(rows) == 1, external_id
    assert rows[0]["agent"] == agent
    detail = queries.get_session(services.models, rows[0]["id"])
    assert detail is not None
    return {**rows[0], "detail": detail}


def _events(services: Services, agent: str, external_id: str) -> list[Any]:
    return list(services.ledger.repository.event_store.get(SessionRef(agent, external_id).id))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_matches_independent_count(services: Services, path: Path) -> None:
    agent, sid, want = expected(path)
    summary = import_paths(services.ledger, [path])
    assert summary.files == 1 and not summary.skipped, summary.skipped
    assert summary.result.rejected == 0
    got = _session(services, agent, sid)
    assert [b["prompt"] for b in got["detail"]["batches"] if b["prompt"]] == want["prompts"]
    assert got["prompt_count"] == len(want["prompts"])
    assert got["tool_call_count"] == want["tool_calls"]
    assert len(got["detail"]["tool_calls"]) == want["tool_calls"]
    for t in TOKENS:
        assert got[t] == want["tokens"][t], t
    observed = [e for e in _events(services, agent, sid) if type(e).__name__ == "RecordObserved"]
    assert len(observed) == want["observed"]
    assert all(e.raw is not None for e in observed)

    again = import_paths(services.ledger, [path])
    assert again.result.appended == 0


def test_each_format_is_detected() -> None:
    want = {
        "session-2025-10-27T19-55-981c87cb.json": "gemini.chat",
        "gemini_jsonl_v040.jsonl": "gemini.chat-jsonl",
        "cursor_transcript_small.jsonl": "cursor.transcript",
        "openclaw_session_small.jsonl": "openclaw.transcript",
    }
    for path in FILES:
        if path.name in want:
            assert detect(path, path.read_bytes()) == want.pop(path.name)
    assert not want
    # Claude Code files are still Claude Code's.
    claude = FIXTURES / "agent-sessions-schema-drift" / "claude_small.jsonl"
    assert detect(claude, claude.read_bytes()) == "claude-code.transcript"


def test_gemini_tool_outcomes(services: Services) -> None:
    """error and cancelled tool results are failed calls; cancelled is also interrupted."""
    path = GEMINI / "session-2025-10-27T19-55-981c87cb.json"
    doc = json.loads(path.read_text())
    status = {c["id"]: c["status"] for m in doc["messages"] for c in m.get("toolCalls") or []}
    import_paths(services.ledger, [path])
    calls = _session(services, "gemini", doc["sessionId"])["detail"]["tool_calls"]
    assert {c["tool_use_id"]: c["is_error"] for c in calls} == {
        k: v != "success" for k, v in status.items()
    }
    assert (
        sorted(status.values()).count("cancelled") == 1
        and sorted(status.values()).count("error") == 1
    )
    cancelled = next(c for c in calls if status[c["tool_use_id"]] == "cancelled")
    assert "Cancelled" in (cancelled["error"] or "")


def test_unknown_record_kept(services: Services) -> None:
    """The OpenClaw ``compact`` record (unknown type) is stored whole, not dropped."""
    path = DRIFT / "openclaw_session_schema_drift.jsonl"
    unknown = next(r for r in _lines(path) if r["type"] == "compact")
    import_paths(services.ledger, [path])
    events = _events(services, "openclaw", "openclaw-stage0-drift")
    kept = [
        e for e in events if type(e).__name__ == "RecordObserved" and e.record_type == "compact"
    ]
    assert len(kept) == 1 and raw_record(kept[0]) == unknown


def _prefix_doc(doc: dict[str, Any], n: int) -> dict[str, Any]:
    out = dict(doc)
    out["messages"] = doc["messages"][:n]
    out["lastUpdated"] = doc["messages"][n - 1]["timestamp"]
    return out


@pytest.mark.parametrize("cut", [1, 5, 9])
def test_gemini_chat_rewritten_in_place(services: Services, tmp_path: Path, cut: int) -> None:
    """The CLI rewrites the chat file as it grows: import a prefix, then the full file
    at the same path; only the new messages are appended, and the stream ends equal to
    a single import of the full file (same event keys, same session numbers)."""
    src = GEMINI / "session-2025-10-27T19-55-981c87cb.json"
    doc = json.loads(src.read_text())
    live = tmp_path / "chats" / src.name
    live.parent.mkdir()
    live.write_text(json.dumps(_prefix_doc(doc, cut), indent=2))
    first = import_paths(services.ledger, [live])
    live.write_text(json.dumps(doc, indent=2))
    second = import_paths(services.ledger, [live])
    grown = _session(services, "gemini", doc["sessionId"])
    grown_keys = [e.event_key for e in _events(services, "gemini", doc["sessionId"])]
    assert first.result.appended > 0 and second.result.appended > 0
    assert first.result.appended + second.result.appended == len(grown_keys)

    from api.bootstrap import build
    from ledger.config import Settings

    once = build(Settings(tmp_path / "once"))
    try:
        import_paths(once.ledger, [src])
        whole = _session(once, "gemini", doc["sessionId"])
        whole_keys = [e.event_key for e in _events(once, "gemini", doc["sessionId"])]
    finally:
        once.close()
    assert sorted(grown_keys) == sorted(whole_keys)
    for f in ("prompt_count", "tool_call_count", "tool_error_count", *TOKENS):
        assert grown[f] == whole[f], f
    assert [b["prompt"] for b in grown["detail"]["batches"]] == [
        b["prompt"] for b in whole["detail"]["batches"]
    ]


def test_gemini_message_growing_in_place(services: Services, tmp_path: Path) -> None:
    """A message first written with half its streamed text, its tool call still running
    and early token counts, then rewritten complete: the call completes, usage is
    replaced (not added), and the reply shows the full text."""
    src = GEMINI / "session-2025-10-27T19-55-981c87cb.json"
    doc = json.loads(src.read_text())
    n = next(
        i
        for i, m in enumerate(doc["messages"])
        if m["type"] == "gemini" and m["content"] and m.get("toolCalls")
    )
    early = json.loads(src.read_text())
    msg = early["messages"][n]
    full_text = doc["messages"][n]["content"]
    msg["content"] = full_text[: len(full_text) // 2]  # streamed text still arriving
    for call in msg["toolCalls"]:
        call["status"], call["result"] = "executing", None
    msg["tokens"] = {**msg["tokens"], "output": 1, "thoughts": 0}
    early["messages"] = early["messages"][: n + 1]
    live = tmp_path / src.name
    live.write_text(json.dumps(early))
    import_paths(services.ledger, [live])
    live.write_text(json.dumps(doc))
    import_paths(services.ledger, [live])
    got = _session(services, "gemini", doc["sessionId"])
    assert got["tool_call_count"] == sum(len(m.get("toolCalls") or []) for m in doc["messages"])
    assert all(c["status"] != "started" for c in got["detail"]["tool_calls"])
    for t in TOKENS:
        assert got[t] == _gemini_tokens(doc["messages"])[t], t
    replies = [
        e
        for e in _events(services, "gemini", doc["sessionId"])
        if type(e).__name__ == "AssistantReplied" and e.message_id == msg["id"]
    ]
    assert [e.text for e in replies] == [msg["content"], full_text]
    last_reply = [m for m in doc["messages"] if m["type"] == "gemini"][-1]["content"]
    assert got["detail"]["batches"][-1]["last_assistant_message"] == last_reply


def test_cursor_reimport_of_grown_transcript(services: Services, tmp_path: Path) -> None:
    """Cursor lines have no ids: keys from line hash + ordinal stay stable as it grows."""
    src = DRIFT / "cursor_transcript_small.jsonl"
    lines = src.read_text().splitlines(keepends=True)
    live = tmp_path / "conv-1.jsonl"
    live.write_text("".join(lines[:2]))
    import_paths(services.ledger, [live])
    live.write_text("".join(lines + lines[2:3]))  # grows, and repeats a line verbatim
    import_paths(services.ledger, [live])
    assert import_paths(services.ledger, [live]).result.appended == 0
    got = _session(services, "cursor", "conv-1")
    user_lines = [json.loads(x) for x in lines + lines[2:3] if '"role":"user"' in x]
    assert got["prompt_count"] == len(user_lines) == 3
    assert got["tool_call_count"] == 1


@pytest.mark.parametrize(
    "name",
    ["openclaw_session_small.jsonl", "cursor_transcript_small.jsonl", "gemini_jsonl_v040.jsonl"],
)
def test_bad_lines_are_rejected_and_the_rest_imports(
    services: Services, tmp_path: Path, name: str
) -> None:
    """A truncated line, a JSON value that is not an object and invalid UTF-8 are each
    kept as rejected input with a reason; every good line still imports."""
    src = DRIFT / name
    lines = src.read_bytes().splitlines(keepends=True)
    bad = [
        lines[1][: len(lines[1]) // 2] + b"\n",
        b"[1, 2]\n",
        b'{"role": "user", "x": "\xff\xfe"}\n',
    ]
    broken = tmp_path / name
    broken.write_bytes(b"".join(lines[:2] + bad + lines[2:]))
    agent, sid, want = expected(src)
    summary = import_paths(services.ledger, [broken])
    assert summary.result.rejected == len(bad)
    services.runner.catch_up()
    assert queries.stats(services.models)["rejected"] == len(bad)
    got = _session(services, agent, sid if agent != "cursor" else broken.stem)
    assert got["prompt_count"] == len(want["prompts"])
    assert got["tool_call_count"] == want["tool_calls"]


def test_truncated_gemini_chat_file_is_rejected_then_imports(
    services: Services, tmp_path: Path
) -> None:
    """Caught mid-rewrite, the chat file is not JSON: kept as rejected, nothing else
    recorded; the next import of the complete file records the session."""
    src = GEMINI / "session-2025-10-29T10-36-453aa339.json"
    live = tmp_path / src.name
    live.write_bytes(src.read_bytes()[:4000])
    first = import_paths(services.ledger, [live])
    assert first.result.rejected == 1 and first.result.sessions == []  # no session fact
    live.write_bytes(src.read_bytes())
    import_paths(services.ledger, [live])
    agent, sid, want = expected(src)
    assert _session(services, agent, sid)["prompt_count"] == len(want["prompts"])


def test_openclaw_usage_and_own_cost(services: Services, tmp_path: Path) -> None:
    """The fixtures carry no ``usage``; this adds one assistant line BUILT BY HAND from
    OpenClaw's documented ``message.usage`` shape (input, output, cacheRead, cacheWrite,
    totalTokens, cost.total in USD) to a real session file."""
    src = DRIFT / "openclaw_session_small.jsonl"
    usage = {
        "input": 210,
        "output": 45,
        "cacheRead": 3000,
        "cacheWrite": 120,
        "totalTokens": 3375,
        "cost": {"input": 0.00063, "output": 0.000675, "cacheRead": 0.0009, "total": 0.0022},
    }
    line = {
        "type": "message",
        "id": "m4",
        "parentId": "m3",
        "timestamp": "2026-02-24T09:00:05Z",
        "message": {
            "role": "assistant",
            "model": "openclaw-small",
            "usage": usage,
            "content": [{"type": "text", "text": "Two entries."}],
        },
    }
    live = tmp_path / src.name
    live.write_text(src.read_text() + json.dumps(line) + "\n")
    import_paths(services.ledger, [live])
    got = _session(services, "openclaw", "openclaw-stage0-small")
    tokens = [got[t] for t in TOKENS]
    assert tokens == [210, 45, 120, 3000]
    assert sum(tokens) == usage["totalTokens"]
    costs = [
        e.cost_usd
        for e in _events(services, "openclaw", "openclaw-stage0-small")
        if type(e).__name__ == "CostReported"
    ]
    assert costs == [usage["cost"]["total"]]


def test_gemini_prompt_log_and_checkpoints_beside_the_chats_are_no_sessions(
    services: Services, tmp_path: Path
) -> None:
    # Review finding: `hookledger import ~/.gemini/tmp` (the README's example) also read
    # the files Gemini CLI keeps beside chats/ (upstream packages/core/src/core/logger.ts):
    # logs.json became a Claude Code session (status CREATED, 0 prompts) per Gemini
    # session id, and a `/chat save` checkpoint-<tag>.json a Gemini session
    # "checkpoint-<tag>" holding the saved chat's prompts again.
    chat = GEMINI / "session-2025-10-27T19-55-981c87cb.json"
    doc = json.loads(chat.read_text())
    users = [m for m in doc["messages"] if m["type"] == "user"]
    project = tmp_path / "tmp" / doc["projectHash"]
    (project / "chats").mkdir(parents=True)
    (project / "chats" / chat.name).write_bytes(chat.read_bytes())
    log = [
        {"sessionId": doc["sessionId"], "messageId": i, "type": "user",
         "message": _text(m["content"]), "timestamp": m["timestamp"]}
        for i, m in enumerate(users)
    ]
    (project / "logs.json").write_text(json.dumps(log, indent=2))
    history = [{"role": "user" if m["type"] == "user" else "model",
                "parts": [{"text": _text(m["content"])}]} for m in doc["messages"]]
    (project / "checkpoint-before-refactor.json").write_text(
        json.dumps({"history": history, "authType": "oauth-personal"}, indent=2)
    )
    (project / "checkpoint-old.json").write_text(json.dumps(history))  # the legacy bare array

    summary = import_paths(services.ledger, [tmp_path / "tmp"])
    assert summary.files == 1
    assert sorted(Path(p).name for p, _ in summary.skipped) == [
        "checkpoint-before-refactor.json", "checkpoint-old.json", "logs.json"
    ]
    services.runner.catch_up()
    (only,) = queries.list_sessions(services.models)
    assert (only["agent"], only["external_id"]) == ("gemini", doc["sessionId"])
    assert only["prompt_count"] == len(users)
