"""2025 hook payloads (no ``tool_use_id``, no ``last_assistant_message``) replayed against
the running server give the same session as importing its transcript.

Real data: ``attio-mcp-server-hook-logs`` (Claude Code ~1.0.7x, Aug 2025) holds the hook
payloads of session 8664c04e and its transcript (``chat.json``), saved by the logger at
a Stop hook. Payloads are put in transcript order — a prompt at its user record, a
``PreToolUse`` at the ``tool_use`` block with the same tool name and input (taken in
order, since 2025 payloads carry no id), and the k-th ``Stop`` at the end of the k-th
prompt batch — and POSTed one by one to ``hookledger serve``. The logger kept no
``PostToolUse`` for this session, so tool calls are compared by what both sides hold:
their prompt batch, tool name and input.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.config import Settings

from conftest import FIXTURES, Server, cli

SESSION = "8664c04e-75fa-497d-ac11-57d69997e3ec"
LOGS = FIXTURES / "attio-mcp-server-hook-logs"


def _load(name: str) -> list[dict[str, Any]]:
    return [p for p in json.loads((LOGS / f"{name}.json").read_text()) if p.get("session_id") == SESSION]


def _ordered_payloads() -> tuple[list[dict[str, Any]], int]:
    """The session's payloads in transcript order, and how many have no transcript record."""
    transcript = json.loads((LOGS / "chat.json").read_text())
    prompts_at = [
        i
        for i, r in enumerate(transcript)
        if r.get("type") == "user" and isinstance((r.get("message") or {}).get("content"), str)
    ]
    uses: list[tuple[int, str, str]] = []  # (index, name, input as JSON)
    for i, r in enumerate(transcript):
        for b in (r.get("message") or {}).get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                uses.append((i, b["name"], json.dumps(b["input"], sort_keys=True)))
    placed: list[tuple[float, dict[str, Any]]] = []
    unmatched = 0
    for p in _load("user_prompt_submit"):
        at = next(
            (i for i in prompts_at if transcript[i]["message"]["content"].strip() == p["prompt"].strip()),
            None,
        )
        if at is None:
            unmatched += 1
        else:
            placed.append((at - 0.5, p))
    taken: set[int] = set()
    for p in _load("pre_tool_use"):
        key = (p["tool_name"], json.dumps(p["tool_input"], sort_keys=True))
        found = next((n for n, u in enumerate(uses) if n not in taken and (u[1], u[2]) == key), None)
        if found is None:
            unmatched += 1
        else:
            taken.add(found)
            placed.append((uses[found][0], p))
    batch_ends = [*[i - 0.75 for i in prompts_at[1:]], len(transcript)]
    for k, p in enumerate(_load("stop")):
        placed.append((batch_ends[k], p))
    placed.sort(key=lambda x: x[0])
    return _load("session_start") + [p for _, p in placed], unmatched


def _shape(detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompts": [b["prompt"] for b in detail["batches"]],
        "batch_status": [b["status"] for b in detail["batches"]],
        "tool_calls": Counter(
            (c["batch"], c["tool_name"], json.dumps(c["tool_input"], sort_keys=True))
            for c in detail["tool_calls"]
        ),
    }


def test_2025_hook_replay_equals_transcript_import(settings: Settings, tmp_path: Path) -> None:
    payloads, unmatched = _ordered_payloads()
    # After the transcript snapshot the session went on: one more prompt and 7 tool calls.
    assert unmatched == 8
    assert len(payloads) == 1 + 2 + 30 + 2

    srv = Server(settings).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            for n, payload in enumerate(payloads):
                headers = {"X-Hookledger-Capture-Key": f"attio-replay-{n}"}
                r = client.post("/v1/hooks/claude-code", json=payload, headers=headers)
                assert r.status_code == 202, r.text
    finally:
        srv.stop()
    from_hooks = json.loads(cli(settings, "show", SESSION, "--json").stdout)

    transcript_settings = Settings(tmp_path / "from-transcript")
    cli(transcript_settings, "import", str(LOGS / "chat.json"))
    from_transcript = json.loads(cli(transcript_settings, "show", SESSION, "--json").stdout)

    hooks, transcript = _shape(from_hooks), _shape(from_transcript)
    assert len(hooks["prompts"]) == 2
    assert hooks["prompts"] == transcript["prompts"]
    assert sum(hooks["tool_calls"].values()) == 30
    assert hooks["tool_calls"] == transcript["tool_calls"]
    assert hooks["batch_status"] == ["completed", "completed"]
    # Every hook call is still open (no PostToolUse was logged), and none is counted twice.
    assert {c["status"] for c in from_hooks["tool_calls"]} == {"started"}
    assert from_hooks["tool_call_count"] == 30


def _calls(services: Any) -> tuple[dict[str, Any], list[Any]]:
    """(session row, the session's events) after catching up."""
    from uuid import UUID

    from projections import queries

    services.runner.catch_up()
    sid = queries.find_session_id(services.models, SESSION)
    assert sid is not None
    detail = queries.get_session(services.models, sid)
    assert detail is not None
    return detail, list(services.ledger.events.get(UUID(str(sid))))


def _ingest(services: Any, payloads: list[dict[str, Any]], prefix: str = "attio") -> int:
    from ledger.ingest import ingest_hook

    appended = 0
    for n, payload in enumerate(payloads):
        out = ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), f"{prefix}-{n}")
        assert out.error is None
        appended += out.result.appended
    return appended


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-then-transcript", "transcript-then-hooks"])
def test_2025_hooks_and_their_transcript_in_one_store_count_each_call_once(
    services: Any, tmp_path: Path, hooks_first: bool
) -> None:
    # The same session's hooks (no tool_use_id) and transcript (tool_use ids) in ONE
    # store. Before, their ids differed and nothing met them: 60 tool calls for 30.
    from ledger.importer import import_paths

    payloads, _ = _ordered_payloads()
    alone = Settings(tmp_path / "transcript-alone")
    cli(alone, "import", str(LOGS / "chat.json"))
    shown = json.loads(cli(alone, "show", SESSION, "--json").stdout)
    want = _shape(shown)
    want_batches = [(b["batch"], b["tool_call_count"], b["tool_error_count"]) for b in shown["batches"]]
    want_status = Counter(
        (c["tool_name"], json.dumps(c["tool_input"], sort_keys=True), c["status"])
        for c in json.loads(cli(alone, "show", SESSION, "--json").stdout)["tool_calls"]
    )

    if hooks_first:
        _ingest(services, payloads)
        import_paths(services.ledger, [LOGS / "chat.json"])
    else:
        import_paths(services.ledger, [LOGS / "chat.json"])
        _ingest(services, payloads)
    detail, events = _calls(services)

    assert detail["tool_call_count"] == 30 == len(detail["tool_calls"])
    assert _shape(detail)["tool_calls"] == want["tool_calls"]
    assert _shape(detail)["prompts"] == want["prompts"]
    # a completion from the other source is in its call's batch: hooks first, the 6
    # failed results of batch 1 were counted in batch 2, where the import arrived
    assert [(b["batch"], b["tool_call_count"], b["tool_error_count"]) for b in detail["batches"]] == want_batches
    # each call has its outcome from the transcript (the hooks logged no PostToolUse)
    assert Counter(
        (c["tool_name"], json.dumps(c["tool_input"], sort_keys=True), c["status"])
        for c in detail["tool_calls"]
    ) == want_status
    kinds = Counter(type(e).__name__ for e in events)
    assert kinds["ToolCallStarted"] == 30 and kinds["ToolCallCompleted"] == 30
    again = [e for e in events if getattr(e, "record_type", None) == "tool call captured again"]
    if hooks_first:
        # the hooks' calls were recorded; the transcript's copies append nothing, its
        # tool results complete the hooks' calls
        assert again == []
        assert {c["tool_use_id"][:5] for c in detail["tool_calls"]} == {"hook-"}
    else:
        # the transcript's calls were recorded; every hook PreToolUse is kept whole
        assert len(again) == 30
        assert all(json.loads(e.raw)["hook_event_name"] == "PreToolUse" for e in again)
        assert {c["tool_use_id"][:6] for c in detail["tool_calls"]} == {"toolu_"}
    # a redelivery of the hooks (same capture keys) and a re-import append nothing
    assert _ingest(services, payloads) == 0
    assert import_paths(services.ledger, [LOGS / "chat.json"]).result.appended == 0


def test_a_2025_hook_call_repeated_after_the_transcript_meets_the_next_copy(services: Any) -> None:
    # A call (tool and input) the transcript imported first holds once; the hooks then
    # deliver it twice (the same command run again after the transcript was copied).
    # The first is the transcript's call (kept as a record), the second a new call.
    # Before, each hook call was a new call (no id met them): 3 calls for 2.
    from ledger.importer import import_paths

    payloads, _ = _ordered_payloads()
    pres = [p for p in payloads if p["hook_event_name"] == "PreToolUse"]
    counts = Counter(json.dumps([p["tool_name"], p["tool_input"]], sort_keys=True) for p in pres)
    once = next(p for p in pres if counts[json.dumps([p["tool_name"], p["tool_input"]], sort_keys=True)] == 1)
    import_paths(services.ledger, [LOGS / "chat.json"])
    before, _ = _calls(services)
    assert _ingest(services, [once, once], prefix="again") == 2
    after, events = _calls(services)
    assert after["tool_call_count"] == before["tool_call_count"] + 1
    same = [c for c in after["tool_calls"] if (c["tool_name"], c["tool_input"]) == (once["tool_name"], once["tool_input"])]
    assert sorted(c["tool_use_id"][:5] for c in same) == ["hook-", "toolu"]
    (kept,) = [e for e in events if getattr(e, "record_type", None) == "tool call captured again"]
    assert kept.event_key == "hook:again-0"
