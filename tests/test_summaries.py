"""Summaries and observations: the deterministic summariser on the real fixtures, checked
against an independent reading of the transcripts; the LLM summariser against a local
stand-in server speaking the OpenAI chat completions API (success, budget exhaustion, a
dead server, a nonsense answer); idempotency, rebuild, liveness, API and CLI."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import uvicorn
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.bootstrap import Services, build
from api.jobs import run_jobs
from api.summaries import run_summaries
from ledger.importer import import_paths
from ledger.llm_summary import LLMConfig, LLMSummariser
from ledger.summary import clip
from projections import pricing, queries

from conftest import FIXTURES, Server, cli, free_port

CLAUDE_TRANSCRIPTS = sorted(
    [
        *(FIXTURES / "spotter-claude-transcripts").glob("*.jsonl"),
        *(FIXTURES / "agentcmd-claude-transcripts").glob("*.jsonl"),
        *(FIXTURES / "agent-sessions-schema-drift").glob("claude_*.jsonl"),
        *(FIXTURES / "claude-code-log-fixtures").glob("*.jsonl"),
    ]
)
LATER = datetime(2030, 1, 1, tzinfo=UTC)  # every fixture session is idle by then
SPOTTER = FIXTURES / "spotter-claude-transcripts" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
FOUR = FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"


def _records(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def _content(rec: dict[str, Any]) -> Any:
    msg = rec.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


def _blocks(path: Path, skip: int = 0) -> Iterator[dict[str, Any]]:
    """Content blocks of every parseable record (after the first ``skip`` records), with
    plain json (not the ledger's parser)."""
    for n, rec in enumerate(_records(path)):
        content = _content(rec)
        if n >= skip and isinstance(content, list):
            yield from (b for b in content if isinstance(b, dict))


def _first_prompt(path: Path) -> int:
    """Index of the file's first typed prompt (a user record, not meta, whose text is not
    markup, nor an interruption notice; a prompt command the model answers, written
    ``<command-message>…``, is one, a local command, ``<command-name>…``, is not); 0 when
    it has none (its activity then makes a recovery batch)."""
    for n, rec in enumerate(_records(path)):
        content = _content(rec)
        texts = [content] if isinstance(content, str) else [
            b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
        ]
        if rec.get("type") == "user" and not rec.get("isMeta") and any(
            t.lstrip().startswith("<command-message>")
            or (t.strip() and not t.lstrip().startswith(("<", "[Request interrupted", "Caveat:")))
            for t in texts
        ):
            return n
    return 0


def independent_facts(path: Path, skip: int = 0) -> tuple[set[str], set[str]]:
    """(files edited by successful edit tool calls, Bash commands whose call failed), of
    the calls after the first ``skip`` records."""
    uses: dict[str, tuple[str, dict[str, Any]]] = {}
    failed: dict[str, bool] = {}
    for block in _blocks(path, skip):
        if block.get("type") == "tool_use":
            uses[block.get("id") or f"no-id-{len(uses)}"] = (block.get("name", ""), block.get("input") or {})
        elif block.get("type") == "tool_result":
            failed[block.get("tool_use_id", "")] = bool(block.get("is_error"))
    edited = {
        inp.get("file_path") or inp.get("notebook_path")
        for tid, (name, inp) in uses.items()
        if name in ("Edit", "MultiEdit", "Write", "NotebookEdit") and not failed.get(tid)
    }
    commands = {inp["command"].strip() for tid, (name, inp) in uses.items() if name == "Bash" and failed.get(tid)}
    return {e for e in edited if e}, commands


def _summaries(services: Services) -> list[dict[str, Any]]:
    t = services.models.table("summaries")
    with services.models.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(t).order_by(t.c.session_id, t.c.scope, t.c.batch)).mappings()]
    for r in rows:
        for name in ("files_edited", "commands_failed", "files_read"):
            r[name] = json.loads(r[name])
    return rows


def _close_everything(services: Services) -> None:
    run_jobs(services, LATER)


@pytest.mark.parametrize("path", CLAUDE_TRANSCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_deterministic_summaries_name_the_edited_files_and_failed_commands(services: Services, path: Path) -> None:
    import_paths(services.ledger, [path])
    _close_everything(services)
    report = run_summaries(services, now=LATER)
    rows = _summaries(services)
    edited, failed = independent_facts(path)
    sessions = [r for r in rows if r["scope"] == "session"]
    batches = [r for r in rows if r["scope"] == "batch"]
    assert sessions, "every ended session gets a session summary"
    assert report.written == {"deterministic": len(rows)}
    assert {f for r in sessions for f in r["files_edited"]} == edited
    assert {c for r in sessions for c in r["commands_failed"]} == failed
    # each batch summary holds its own batch's facts; together they cover the session's
    # from its first prompt on (a prompt command such as spotter subagent.jsonl's
    # /handgemacht:create-beads is one: its work is in its batch)
    edited, failed = independent_facts(path, _first_prompt(path))
    assert {f for r in batches for f in r["files_edited"]} == edited
    assert {c for r in batches for c in r["commands_failed"]} == failed
    assert all(r["summariser"] == "deterministic" and r["input_tokens"] == 0 for r in rows)


def test_observations_classify_a_fixed_test_and_a_persisting_failure(services: Services) -> None:
    """In the spotter session, `mix test …` failed, test files were edited, then it passed;
    `git push` failed and never passed."""
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    run_summaries(services, now=LATER)
    ob = services.models.table("observations")
    with services.models.engine.connect() as conn:
        found = [dict(r) for r in conn.execute(select(ob)).mappings()]
    bug_fixes = [o for o in found if o["kind"] == "bug_fix"]
    assert any("mix test" in o["title"] for o in bug_fixes)
    edited, _ = independent_facts(SPOTTER)
    for o in bug_fixes:
        assert set(json.loads(o["files"])) <= edited and json.loads(o["files"])
    assert any(o["kind"] == "gotcha" and "git push" in o["title"] for o in found)
    # session summaries do not repeat the observations of their batches
    titles = [(o["kind"], o["title"], o["session_id"]) for o in found]
    assert len(titles) == len(set(titles))


def test_second_run_appends_nothing_and_rebuild_reproduces_the_summaries(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    first = run_summaries(services, now=LATER)
    assert first.positions
    head = services.ledger.max_position()
    again = run_summaries(services, now=LATER + timedelta(hours=1))
    assert again.positions == [] and services.ledger.max_position() == head
    before = _summaries(services)
    services.runner.rebuild("summaries")
    assert _summaries(services) == before


def test_a_summary_is_not_activity(services: Services) -> None:
    """Summaries never reopen a session, change its status or its last activity, and a
    later jobs run decides nothing new because of them."""
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    before = queries.list_sessions(services.models, limit=100)
    run_summaries(services, now=LATER)
    after = queries.list_sessions(services.models, limit=100)
    keep = ("id", "status", "last_activity_at", "ended_at", "prompt_count", "batch_count")
    assert [{k: s[k] for k in keep} for s in after] == [{k: s[k] for k in keep} for s in before]
    assert run_jobs(services, LATER + timedelta(minutes=1)).positions == []


# -- the LLM summariser against a local stand-in server ------------------------------


class StandIn:
    """A local server speaking ``POST /v1/chat/completions`` (the OpenAI API shape that
    llama.cpp and Ollama also serve). ``mode``: ``ok``, ``nonsense`` or ``error``."""

    def __init__(self, usage: tuple[int, int] | None = (1000, 500)) -> None:
        self.mode = "ok"
        self.usage = usage
        self.obs_files: list[str] = []  # the files the model's observation names
        self.requests: list[dict[str, Any]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if self.mode == "error":
            return JSONResponse({"error": {"message": "overloaded"}}, 503)
        facts = body["messages"][-1]["content"]
        prompt = next((line[8:] for line in facts.splitlines() if line.startswith("Prompt: ")), "")
        reply = {
            "request": f"LLM: {prompt[:80]}",
            "investigated": ["looked around"],
            "learned": ["the stand-in answers"],
            "completed": ["summarised"],
            "next_steps": [],
            "observations": [{"kind": "decision", "title": "Use the stand-in", "detail": "", "files": self.obs_files}],
        }
        content = json.dumps(reply) if self.mode == "ok" else "I cannot do that."
        answer: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
        if self.usage is not None:  # None: a server that reports no usage (some local ones)
            answer["usage"] = {
                "prompt_tokens": self.usage[0],
                "completion_tokens": self.usage[1],
                "total_tokens": sum(self.usage),
            }
        return JSONResponse(answer)

    def __enter__(self) -> StandIn:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _llm(url: str, **budget: int) -> LLMSummariser:
    return LLMSummariser(LLMConfig(base_url=url, model="gpt-4o-mini", timeout_s=5, max_output_tokens=100, **budget))


def test_llm_summaries_record_the_model_usage_and_cost_and_keep_the_ledger_facts(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    with StandIn() as llm:
        report = run_summaries(services, _llm(llm.url), now=LATER)
    rows = _summaries(services)
    assert rows and report.written == {"llm": len(rows)} and len(llm.requests) == len(rows)
    assert all(r["request"].startswith("LLM:") for r in rows)
    for r in rows:
        assert (r["summariser"], r["model"], r["input_tokens"], r["output_tokens"]) == ("llm", "gpt-4o-mini", 1000, 500)
        assert r["cost_usd"] == pytest.approx(pricing.cost_usd("gpt-4o-mini", 1000, 500))
    edited, failed = independent_facts(SPOTTER)  # facts are the ledger's, never the model's
    assert {f for r in rows if r["scope"] == "session" for f in r["files_edited"]} == edited
    assert {c for r in rows if r["scope"] == "session" for c in r["commands_failed"]} == failed
    # what the model was told: the facts, with the failures
    assert any("FAILED" in req["messages"][-1]["content"] for req in llm.requests)


def test_day_budget_stops_llm_calls_and_the_deterministic_summary_stands(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    # one call costs 5,000 tokens, the whole day's budget: the first call fits (its
    # estimate is below 5,000), nothing after it does
    with StandIn(usage=(2500, 2500)) as llm:
        report = run_summaries(services, _llm(llm.url, day_tokens=5000), now=LATER)
        assert len(llm.requests) == 1
        rows = _summaries(services)
        # spent is counted from the ledger: a later run the same day calls nothing
        import_paths(services.ledger, [FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"])
        _close_everything(services)
        second = run_summaries(services, _llm(llm.url, day_tokens=5000), now=LATER + timedelta(hours=1))
        assert len(llm.requests) == 1
        # the next UTC day has a fresh budget
        import_paths(services.ledger, [FIXTURES / "agentcmd-claude-transcripts" / "full-session-five.jsonl"])
        _close_everything(services)
        third = run_summaries(services, _llm(llm.url, day_tokens=5000), now=LATER + timedelta(days=1))
        assert len(llm.requests) == 2
    assert [r["summariser"] for r in rows].count("llm") == 1
    refused = [r for r in rows if r["summariser"] == "deterministic"]
    assert refused and all(r["fallback_reason"] == "budget_exhausted:day" for r in refused)
    assert report.fallbacks == {"budget_exhausted": len(refused)}
    assert second.written.get("deterministic") and not second.written.get("llm")
    assert third.written.get("llm") == 1


def test_session_budget_is_per_session(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    with StandIn(usage=(1000, 500)) as llm:
        run_summaries(services, _llm(llm.url, session_tokens=0), now=LATER)
        assert llm.requests == []
    rows = _summaries(services)
    assert rows and {r["fallback_reason"] for r in rows} == {"budget_exhausted:session"}


def test_dead_server_keeps_the_deterministic_summary_with_the_reason(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    report = run_summaries(services, _llm(dead), now=LATER)
    rows = _summaries(services)
    assert rows and report.written == {"deterministic": len(rows)}
    assert {r["fallback_reason"] for r in rows} == {"unavailable: APIConnectionError"}
    assert all(r["input_tokens"] == 0 and r["model"] is None for r in rows)
    edited, _ = independent_facts(SPOTTER)
    assert {f for r in rows if r["scope"] == "session" for f in r["files_edited"]} == edited


@pytest.mark.parametrize(("mode", "reason"), [("error", "unavailable: HTTP 503"), ("nonsense", "invalid_response: ValueError")])
def test_failing_server_answers_fall_back_and_record_what_they_cost(services: Services, mode: str, reason: str) -> None:
    import_paths(services.ledger, [FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"])
    _close_everything(services)
    with StandIn(usage=(200, 10)) as llm:
        llm.mode = mode
        run_summaries(services, _llm(llm.url), now=LATER)
    rows = _summaries(services)
    assert rows and {r["fallback_reason"] for r in rows} == {reason}
    assert all(r["summariser"] == "deterministic" for r in rows)
    spent = (200, 10) if mode == "nonsense" else (0, 0)  # an answer that came still cost tokens
    assert {(r["input_tokens"], r["output_tokens"]) for r in rows} == {spent}


# -- API, CLI and the server's own worker ---------------------------------------------


def test_cli_runs_and_shows_summaries(settings: Any, services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    out = json.loads(cli(settings, "summaries", "run", "--once", "--json").stdout)
    assert out["written"]["deterministic"] == out["appended"] > 0
    sid = queries.list_sessions(services.models, limit=1)[0]["id"]
    shown = json.loads(cli(settings, "summaries", "show", sid, "--json").stdout)
    assert shown["session_id"] == sid and {s["scope"] for s in shown["summaries"]} == {"batch", "session"}
    text = cli(settings, "summaries", "show", sid).stdout.decode()
    assert "## session" in text and "mix test" in text
    again = json.loads(cli(settings, "summaries", "run", "--once", "--json").stdout)
    assert again["appended"] == 0


def test_server_summarises_a_batch_closed_by_a_stop_hook(settings: Any) -> None:
    srv = Server(settings, env={"HOOKLEDGER_SUMMARIES_INTERVAL_S": "0.2"}).start()
    try:
        base = {"session_id": "summ-live-1", "transcript_path": "/tmp/x.jsonl", "cwd": "/tmp/proj"}
        hooks = [
            {**base, "hook_event_name": "UserPromptSubmit", "prompt": "make the tests pass"},
            {**base, "hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_use_id": "t1",
             "tool_input": {"file_path": "/tmp/proj/app.py", "old_string": "a", "new_string": "b"}},
            {**base, "hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": "t1",
             "tool_input": {"file_path": "/tmp/proj/app.py", "old_string": "a", "new_string": "b"},
             "tool_response": {"filePath": "/tmp/proj/app.py"}},
            {**base, "hook_event_name": "Stop", "stop_hook_active": False},
        ]
        for h in hooks:
            assert httpx.post(srv.url + "/v1/hooks/claude-code", json=h, timeout=10).status_code == 202
        sid = httpx.get(srv.url + "/v1/sessions", timeout=10).json()["sessions"][0]["id"]
        deadline = time.monotonic() + 30
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not found:
            found = httpx.get(f"{srv.url}/v1/sessions/{sid}/summaries", timeout=10).json()["summaries"]
            time.sleep(0.1)
        assert [(s["scope"], s["batch"], s["request"], s["files_edited"]) for s in found] == [
            ("batch", 1, "make the tests pass", ["/tmp/proj/app.py"])
        ]
        detail = httpx.get(f"{srv.url}/v1/sessions/{sid}", timeout=10).json()
        assert detail["summaries"][0]["files_edited"] == ["/tmp/proj/app.py"]
    finally:
        srv.stop()



def test_the_prompt_names_every_observation_kind() -> None:
    from ledger.envelope import OBSERVATION_KINDS
    from ledger.llm_summary import SYSTEM_PROMPT

    assert all(kind in SYSTEM_PROMPT for kind in OBSERVATION_KINDS)


# -- a batch summary is redone when the batch's activity goes on after it -------------


def _observations(services: Services, **where: Any) -> list[dict[str, Any]]:
    ob = services.models.table("observations")
    query = select(ob).order_by(ob.c.position, ob.c.idx)
    for name, value in where.items():
        query = query.where(ob.c[name] == value)
    with services.models.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def test_a_batch_summary_written_mid_turn_is_redone_when_the_turn_goes_on(
    services: Services, other_settings: Any, tmp_path: Path
) -> None:
    """The spotter session as it was at 21:10:37, when `mix test …project_review_live_test…`
    had just failed: the idle job closes the batch, the worker summarises it (the test
    "fails"). The turn then goes on (the test passes at 21:11:37): once that activity is
    attached to the batch, the batch is summarised again — the same summary a straight
    import gives — and the first summary's observations are superseded (also in search)."""
    lines = SPOTTER.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    cut = next(i for i, r in enumerate(records) if r.get("timestamp") == "2026-02-11T21:10:37.131Z") + 1
    grown = tmp_path / SPOTTER.name
    grown.write_bytes(b"".join(lines[:cut]))
    import_paths(services.ledger, [grown])
    last = datetime.fromisoformat(records[cut - 1]["timestamp"].replace("Z", "+00:00"))
    assert run_jobs(services, last + timedelta(minutes=5, seconds=1)).decisions == {"idle_batch": 1}
    run_summaries(services, now=LATER)
    (mid,) = [r for r in _summaries(services) if r["scope"] == "batch"]
    failing = next(c for c in mid["commands_failed"] if "project_review_live_test" in c)
    assert any(o["kind"] == "gotcha" and failing in o["title"] for o in _observations(services))

    # the turn goes on until the next typed prompt ("did you push?"); the jobs attach
    # that activity to the batch, as a server running them every minute would
    follow = next(i for i, r in enumerate(records) if i > cut and r.get("type") == "user"
                  and r.get("message", {}).get("content") == "did you push?")
    grown.write_bytes(b"".join(lines[:follow]))
    import_paths(services.ledger, [grown])
    last = max(datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) for r in records[:follow] if r.get("timestamp"))
    assert "unbatched_activity" in run_jobs(services, last + timedelta(minutes=5, seconds=1)).decisions
    grown.write_bytes(b"".join(lines))  # and the rest of the session
    import_paths(services.ledger, [grown])
    _close_everything(services)
    run_summaries(services, now=LATER)
    redone = next(r for r in _summaries(services) if r["scope"] == "batch" and r["batch"] == mid["batch"])
    assert redone["position"] > mid["position"]
    assert not any(failing in s for s in redone["next_steps"])
    current = _observations(services, superseded_by=None)
    assert any(o["kind"] == "bug_fix" and failing in o["title"] and o["batch"] == mid["batch"] for o in current)
    assert not any(o["kind"] == "gotcha" and failing in o["title"] for o in current)
    old = _observations(services, position=mid["position"])
    assert old and {o["superseded_by"] for o in old} == {redone["position"]}
    docs = services.models.table("search_documents")
    with services.models.engine.connect() as conn:
        bodies = [r[0] for r in conn.execute(select(docs.c.body).where(docs.c.kind == "observation"))]
    assert not any(b.startswith(f"`{failing}` fails") for b in bodies)

    # the same batch summary as a straight import of the whole session
    straight = build(other_settings)
    try:
        import_paths(straight.ledger, [SPOTTER])
        _close_everything(straight)
        run_summaries(straight, now=LATER)
        same = next(r for r in _summaries(straight) if r["scope"] == "batch" and r["batch"] == mid["batch"])
    finally:
        straight.close()
    facts = ("request", "investigated", "learned", "completed", "next_steps", "files_read", "files_edited",
             "commands_failed", "observation_count")
    assert {k: redone[k] for k in facts} == {k: same[k] for k in facts}

    # nothing new: a second run appends nothing; a rebuild gives the same rows
    head = services.ledger.max_position()
    assert run_summaries(services, now=LATER).positions == [] and services.ledger.max_position() == head
    before = (_summaries(services), _observations(services))
    services.runner.rebuild("summaries")
    assert (_summaries(services), _observations(services)) == before


# -- failed and rejected edits are not edits ------------------------------------------

REJECTED = "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file)."


def test_a_rejected_edit_is_never_named_as_edited(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spotter session with one of the edits between the failing and the passing
    `mix test …project_review_live_test…` (of config/test.exs, its only edit) turned into
    a rejected one, as Claude Code records a user's "no": the summaries, the bug_fix
    observation and the context digest do not name that file."""
    rejected = "/home/USER/projects/spotter-worktrees/spotter-gqc/config/test.exs"
    out = []
    ids: set[str] = set()
    for line in SPOTTER.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for block in (rec.get("message") or {}).get("content") or ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and block.get("name") == "Edit" and block["input"].get("file_path") == rejected:
                ids.add(block["id"])
            if block.get("type") == "tool_result" and block.get("tool_use_id") in ids:
                block.update(is_error=True, content=REJECTED)
                rec["toolUseResult"] = "Error: " + REJECTED
        out.append(json.dumps(rec))
    assert len(ids) == 1
    path = tmp_path / SPOTTER.name
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    import_paths(services.ledger, [path])
    _close_everything(services)
    run_summaries(services, now=LATER)
    edited, _ = independent_facts(path)
    assert rejected not in edited
    rows = _summaries(services)
    assert {f for r in rows if r["scope"] == "session" for f in r["files_edited"]} == edited
    found = _observations(services)
    fix = next(o for o in found if o["kind"] == "bug_fix" and "project_review_live_test" in o["title"])
    assert rejected not in json.loads(fix["files"]) and rejected not in fix["detail"]
    assert set(json.loads(fix["files"])) <= edited
    assert not any(rejected in line for r in rows for line in json.loads(r["learned"]))
    from projections import context

    monkeypatch.setattr(context, "FILES_PER_SESSION", 100)  # every file it names
    cwd = queries.list_sessions(services.models, limit=1)[0]["cwd"]
    digest = context.project_digest(services.models, cwd, max_chars=100_000)
    assert "Files edited" in digest and "config/test.exs" not in digest


# -- Codex: apply_patch through the shell is an edit; a command that passed later is not failing


CODEX_ROLLOUT = FIXTURES / "agentcmd-codex-rollouts" / "rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl"
_PATCH_LINE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)


def codex_shell_runs(path: Path) -> list[tuple[str, bool]]:
    """(script, passed) of every ``shell`` call of a Codex rollout, in order, read with
    plain json: the script is ``argv[2]`` of ``["bash", "-lc", script]``; it passed when its
    output is a JSON object with ``metadata.exit_code`` 0."""
    calls: dict[str, str] = {}
    runs: list[tuple[str, bool]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        payload = json.loads(line).get("payload") or {}
        if payload.get("type") == "function_call" and payload.get("name") == "shell":
            argv = json.loads(payload["arguments"])["command"]
            calls[payload["call_id"]] = argv[2] if len(argv) >= 3 and argv[1] in ("-lc", "-c") else " ".join(argv)
        elif payload.get("type") == "function_call_output" and payload.get("call_id") in calls:
            try:
                passed = json.loads(payload["output"])["metadata"]["exit_code"] == 0
            except (ValueError, KeyError, TypeError):
                passed = False
            runs.append((calls[payload["call_id"]].strip(), passed))
    return runs


def test_codex_apply_patch_is_an_edit_and_a_command_that_passed_later_is_not_failing(services: Services) -> None:
    """The real Codex rollout edits only with ``apply_patch`` through ``shell``; in its
    batch 11 `pnpm … check-types` failed twice, files were patched, and it passed."""
    import_paths(services.ledger, [CODEX_ROLLOUT])
    _close_everything(services)
    run_summaries(services, now=LATER)
    runs = codex_shell_runs(CODEX_ROLLOUT)
    patches = [s for s, _ in runs if s.startswith("apply_patch")]
    edited = {p.strip() for s, ok in runs if ok and s.startswith("apply_patch") for p in _PATCH_LINE.findall(s)}
    assert patches and edited
    commands = [(s, ok) for s, ok in runs if not s.startswith("apply_patch")]
    latest = dict(commands)  # the outcome of each command's latest run
    rows = _summaries(services)
    (session,) = [r for r in rows if r["scope"] == "session"]
    assert set(session["files_edited"]) == edited
    assert {c for r in rows for c in r["commands_failed"]} == {s for s, ok in commands if not ok}
    assert not any(c.startswith("apply_patch") for r in rows for c in r["commands_failed"])
    current = _observations(services, superseded_by=None)
    for r in rows:
        steps = " ".join(json.loads(r["next_steps"]))
        for command, ok in latest.items():
            if ok:  # passed at its latest run: never a next step, never a gotcha
                assert f"`{clip(command, 120)}` pass" not in steps
                assert not any(o["kind"] == "gotcha" and o["title"] == f"`{clip(command, 120)}` fails" for o in current)
    check = "pnpm --filter @repo/spectora-labs check-types"
    batch = next(r for r in rows if r["scope"] == "batch" and check in r["commands_failed"])
    assert any(check in line for line in json.loads(batch["completed"]) if line.startswith("Now passing"))
    fix = next(o for o in current if o["kind"] == "bug_fix" and check in o["title"] and o["batch"] == batch["batch"])
    assert set(json.loads(fix["files"])) <= edited and json.loads(fix["files"])


# -- a server that reports no usage is charged the estimate ---------------------------


def _summarised(services: Services) -> list[Any]:
    """Every Summarised event in the log (the append-only record of what was spent)."""
    from ledger.session import Session

    found = []
    for sid in [s["id"] for s in queries.list_sessions(services.models, limit=1000)]:
        found += [e for e in services.ledger.events.get(UUID(sid)) if isinstance(e, Session.Summarised)]
    return found


def test_a_server_that_reports_no_usage_is_charged_the_estimate(services: Services) -> None:
    """Some servers (llama.cpp builds, proxies) answer without ``usage``: each call is then
    recorded and charged at its pre-call estimate, so the day budget still stops calls."""
    import_paths(services.ledger, [SPOTTER, FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"])
    _close_everything(services)
    day = 4000
    with StandIn(usage=None) as llm:
        run_summaries(services, _llm(llm.url, day_tokens=day, session_tokens=day), now=LATER)
    # what the calls made were budgeted at (system prompt + facts, 3 characters a token,
    # plus max_tokens), from the requests the server received
    asked = [len(r["messages"][0]["content"] + r["messages"][1]["content"]) // 3 + 1 + r["max_tokens"] for r in llm.requests]
    assert asked and sum(asked) <= day
    events = _summarised(services)
    called = [e for e in events if e.summariser == "llm"]
    assert len(called) == len(llm.requests) < len(events)
    assert sorted(e.input_tokens + e.output_tokens for e in called) == sorted(asked)
    for e in called:
        assert getattr(e, "tokens_estimated", False) and e.output_tokens == 100  # max_output_tokens
        assert e.input_tokens > 0 and e.cost_usd == pytest.approx(pricing.cost_usd("gpt-4o-mini", e.input_tokens, 100))
    assert sum(e.input_tokens + e.output_tokens for e in events) <= day
    assert {e.fallback_reason for e in events if e.summariser != "llm"} <= {"budget_exhausted:day", "budget_exhausted:session"}
    assert not any(e.tokens_estimated for e in events if e.summariser != "llm")


def test_a_version_1_summary_reads_as_not_estimated(services: Services) -> None:
    """Summarised events stored before class_version 2 have no ``tokens_estimated``: the
    upcast reads them as False (usage was the server's)."""
    import orjson

    from ledger.envelope import RAW_SEPARATOR, stored_bytes
    from ledger.session import Session

    import_paths(services.ledger, [FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"])
    _close_everything(services)
    run_summaries(services, now=LATER)
    event = _summarised(services)[0]
    head, sep, raw = stored_bytes(event).partition(RAW_SEPARATOR)
    state = orjson.loads(head)
    assert state.pop("class_version") == 2 and state.pop("tokens_estimated") is False
    topic = f"{Session.Summarised.__module__}:{Session.Summarised.__qualname__}"
    old = services.ledger.mapper.decode(topic, orjson.dumps(state) + sep + raw, event.originator_id, event.originator_version)
    assert old.tokens_estimated is False and old.input_tokens == event.input_tokens


# -- the per-session budget counts every summary ever paid for ------------------------


def test_session_budget_holds_across_reopen_cycles(services: Services, settings: Any, tmp_path: Path) -> None:
    """full-session-four.jsonl imported one prompt at a time, each part timed out by the
    jobs (reopened by the next): every cycle writes a batch and a session summary, and a
    new session summary replaces the last one in ``summaries``. What the model was paid
    for in the session never exceeds its budget."""
    lines = FOUR.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    prompts = [i for i, r in enumerate(records) if r.get("type") == "user" and isinstance(r.get("message", {}).get("content"), str)
               and not r.get("isMeta") and not r["message"]["content"].startswith(("<", "Caveat:"))]
    assert len(prompts) == 3
    grown = tmp_path / FOUR.name
    budget = 5000
    with StandIn(usage=(1000, 500)) as llm:
        for end in [prompts[1], prompts[2], len(lines)]:
            grown.write_bytes(b"".join(lines[:end]))
            import_paths(services.ledger, [grown])
            last = max(datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) for r in records[:end] if r.get("timestamp"))
            assert "idle_session" in run_jobs(services, last + timedelta(hours=1)).decisions
            run_summaries(services, _llm(llm.url, session_tokens=budget), now=last + timedelta(hours=1))
    events = _summarised(services)
    assert len([e for e in events if e.scope == "session"]) == 3
    assert sum(e.input_tokens + e.output_tokens for e in events) <= budget
    assert any(e.fallback_reason == "budget_exhausted:session" for e in events)

    # a read-model database from before summary_spend: the projection is rebuilt on start
    spend = services.models.table("summary_spend")
    with services.models.engine.begin() as conn:
        before = conn.execute(select(spend).order_by(spend.c.position)).all()
        spend.drop(conn)
    again = build(settings)
    try:
        again.runner.catch_up()
        with again.models.engine.connect() as conn:
            assert conn.execute(select(spend).order_by(spend.c.position)).all() == before
    finally:
        again.close()


def test_archiving_a_summarised_session_does_not_summarise_it_again(services: Services) -> None:
    """The spotter session times out, is summarised (by the model), and is archived 30
    days later: nothing new happened, so nothing is summarised or paid for again."""
    import_paths(services.ledger, [SPOTTER])
    timed_out = datetime(2026, 2, 12, tzinfo=UTC)
    assert "idle_session" in run_jobs(services, timed_out).decisions
    with StandIn() as llm:
        first = run_summaries(services, _llm(llm.url), now=timed_out)
        assert first.written.get("llm") and len(llm.requests) == len(first.positions)
        assert set(run_jobs(services, timed_out + timedelta(days=31)).decisions) == {"archive_after"}
        again = run_summaries(services, _llm(llm.url), now=timed_out + timedelta(days=31))
        assert again.positions == [] and len(llm.requests) == len(first.positions)
    assert {s["status"] for s in queries.list_sessions(services.models, limit=10)} == {"ARCHIVED"}


def test_llm_observations_name_only_files_the_ledger_saw(services: Services) -> None:
    """The model names a file the agent edited and one nobody touched: only the first is kept."""
    import_paths(services.ledger, [SPOTTER])
    _close_everything(services)
    edited, _ = independent_facts(SPOTTER)
    real = sorted(edited)[0]
    with StandIn() as llm:
        llm.obs_files = [real, "/etc/never_touched.py"]
        run_summaries(services, _llm(llm.url), now=LATER)
    found = [json.loads(o["files"]) for o in _observations(services) if o["title"] == "Use the stand-in"]
    assert found and all("/etc/never_touched.py" not in f for f in found)
    session = next(r for r in _summaries(services) if r["scope"] == "session")
    assert [real] in found and real in session["files_edited"]


def test_cli_reports_the_tokens_a_run_spent_and_says_when_there_are_no_summaries(settings: Any, services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    sid = queries.list_sessions(services.models, limit=1)[0]["id"]
    shown = cli(settings, "summaries", "show", sid).stdout.decode()
    assert shown.strip() == f"no summaries yet for session {sid}"
    _close_everything(services)
    with StandIn(usage=(1000, 500)) as llm:
        out = json.loads(cli(settings, "summaries", "run", "--once", "--json",
                             extra_env={"HOOKLEDGER_LLM_BASE_URL": llm.url}).stdout)
    rows = _summaries(services)
    assert out["written"] == {"llm": len(rows)} and len(llm.requests) == len(rows)
    assert out["tokens"] == sum(r["input_tokens"] + r["output_tokens"] for r in rows) == 1500 * len(rows)


def test_an_idle_close_after_the_turn_ended_is_not_unfinished(
    services: Services, other_settings: Any, tmp_path: Path
) -> None:
    """full-session-four's last reply records no stop_reason: the idle job closes a turn
    that may not be done ("Unfinished"). The same transcript whose last reply says
    ``end_turn`` (as newer Claude Code writes it) ended its turn: closing it is no news."""
    import_paths(services.ledger, [FOUR])
    _close_everything(services)
    run_summaries(services, now=LATER)
    unfinished = "Unfinished: the batch ended with idle_timeout"
    last = max((r for r in _summaries(services) if r["scope"] == "batch"), key=lambda r: r["batch"])
    assert unfinished in json.loads(last["next_steps"])

    lines = FOUR.read_text(encoding="utf-8").splitlines()
    i = max(n for n, line in enumerate(lines) if json.loads(line).get("type") == "assistant")
    rec = json.loads(lines[i])
    assert rec["message"]["stop_reason"] is None
    rec["message"]["stop_reason"] = "end_turn"
    lines[i] = json.dumps(rec)
    ended = tmp_path / "ended" / FOUR.name
    ended.parent.mkdir()
    ended.write_text("\n".join(lines) + "\n", encoding="utf-8")
    second = build(other_settings)
    try:
        import_paths(second.ledger, [ended])
        _close_everything(second)
        run_summaries(second, now=LATER)
        rows = _summaries(second)
        b = second.models.table("prompt_batches")
        with second.models.engine.connect() as conn:
            reasons = [r[0] for r in conn.execute(select(b.c.end_reason).order_by(b.c.batch))]
    finally:
        second.close()
    assert reasons[-1] == "idle_timeout"  # closed by the idle job all the same
    assert not any(unfinished in json.loads(r["next_steps"]) for r in rows)
