"""Liveness jobs: clock-controlled replays of a real recorded session produce the timeout
events with their evidence, a rebuild of the projections reproduces the same statuses
without rerunning the jobs, and the server runs the jobs itself."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from sqlalchemy import select

from api.bootstrap import Services, build
from api.jobs import run_jobs
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.jobs import JobConfig
from ledger.lifecycle import DECISION_KINDS
from ledger.observation import session_id
from projections import queries
from projections.runner import PROJECTION_CLASSES

from conftest import FIXTURES, Server, cli

FOUR = FIXTURES / "agentcmd-claude-transcripts" / "full-session-four.jsonl"


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _is_prompt(rec: dict[str, Any]) -> bool:
    """A typed human prompt, read with plain json (not the ledger's parser)."""
    content = (
        rec.get("message", {}).get("content") if isinstance(rec.get("message"), dict) else None
    )
    return (
        rec.get("type") == "user"
        and not rec.get("isMeta")
        and isinstance(content, str)
        and not content.startswith("<")
        and not content.startswith("Caveat:")
    )


def _snapshot(services: Services, sid: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with services.models.engine.connect() as conn:
        for table, cols in [
            ("sessions", ("status", "ended_at", "batch_count", "prompt_count", "tool_call_count")),
            ("prompt_batches", ("batch", "status", "ended_at", "end_reason", "tool_call_count")),
            ("status_history", ("version", "from_status", "to_status", "cause")),
            ("tool_calls", ("tool_use_id", "batch")),
        ]:
            t = services.models.table(table)
            key = t.c.id if table == "sessions" else t.c.session_id
            rows = conn.execute(select(*[t.c[c] for c in cols]).where(key == sid)).all()
            out[table] = sorted(tuple(r) for r in rows)
    return out


def _events(services: Services, sid: str) -> list[Any]:
    return list(services.ledger.events.get(UUID(sid)))


def test_replay_with_clock_controlled_gaps_times_out_and_a_rebuild_reproduces_it(
    services: Services, tmp_path: Path
) -> None:
    lines = FOUR.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    prompts = [i for i, r in enumerate(records) if _is_prompt(r)]
    assert len(prompts) == 3
    ends = [prompts[1], prompts[2], len(lines)]  # three segments, one prompt each
    sid = str(session_id("claude-code", records[prompts[0]]["sessionId"]))
    grown = tmp_path / "session.jsonl"
    expected: list[tuple[str, datetime, int]] = []  # (kind, measured_from, threshold)
    for k, end in enumerate(ends):
        grown.write_bytes(b"".join(lines[:end]))  # the transcript as it was at that point
        import_paths(services.ledger, [grown])
        last = max(_time(r["timestamp"]) for r in records[:end] if r.get("timestamp"))
        # five minutes and a bit of silence: the open batch is closed
        report = run_jobs(services, last + timedelta(minutes=5, seconds=1))
        assert report.decisions == {"idle_batch": 1}
        expected.append(("BatchClosed", last, 300))
        again = run_jobs(services, last + timedelta(minutes=5, seconds=1))
        assert again.positions == []  # same evidence: nothing appended twice
        if k != 1:  # an hour of silence after segments 1 and 3: the session is completed
            report = run_jobs(services, last + timedelta(hours=1))
            assert report.decisions == {"idle_session": 1}
            expected.append(("TimedOut", last, 3600))
        if k == 0:
            expected.append(("Reopened", last, 0))  # the next prompt arrives later

    events = _events(services, sid)
    decided = [e for e in events if e.kind in DECISION_KINDS or e.kind == "Reopened"]
    assert [e.kind for e in decided] == [kind for kind, _, _ in expected]
    positions = {v: p for v, p in _versions_positions(services, sid).items()}
    for event, (kind, measured, threshold) in zip(decided, expected, strict=True):
        if kind == "Reopened":
            assert event.from_status == "COMPLETED" and "idle_timeout" in event.reason
            continue
        assert event.measured_from == measured
        assert event.threshold_s == threshold
        assert event.rule == ("idle_batch" if kind == "BatchClosed" else "idle_session")
        # the last version it saw is the latest observed event before it, and the position
        # it read is where the read model stood: the head before the decision
        observed_before = [
            e for e in events[: event.originator_version - 1] if e.kind not in DECISION_KINDS
        ]
        assert event.last_version == observed_before[-1].originator_version
        assert event.last_position == positions[event.originator_version - 1]
        assert event.decided_at > measured and event.occurred_at is None

    before = _snapshot(services, sid)
    assert before["sessions"][0][0] == "COMPLETED"
    assert [(b, s, r) for b, s, _, r, _ in before["prompt_batches"]] == [
        (1, "completed", "idle_timeout"),
        (2, "completed", "idle_timeout"),
        (3, "completed", "idle_timeout"),
    ]
    causes = [(f, t, c) for _, f, t, c in before["status_history"]]
    assert sum(1 for _, to, cause in causes if (to, cause) == ("COMPLETED", "TimedOut")) == 2
    assert ("COMPLETED", "ACTIVE", "Reopened") in causes

    head = services.ledger.max_position()
    for name in PROJECTION_CLASSES:
        services.runner.rebuild(name)
    assert services.ledger.max_position() == head  # no job ran again
    assert _snapshot(services, sid) == before


def _versions_positions(services: Services, sid: str) -> dict[int, int]:
    from projections import queries

    services.runner.catch_up()
    return queries.session_event_positions(services.models, sid)


def test_an_imported_session_that_never_ended_is_completed_by_the_next_run(
    services: Services,
) -> None:
    short = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    records = [json.loads(line) for line in short.read_bytes().splitlines()]
    last = max(_time(r["timestamp"]) for r in records if r.get("timestamp"))
    import_paths(services.ledger, [short])
    report = run_jobs(services)  # the wall clock: months after the recording
    sid = str(
        session_id("claude-code", next(r["sessionId"] for r in records if r.get("sessionId")))
    )
    assert report.sessions[sid][:2] == ["idle_batch", "idle_session"]
    timed_out = next(e for e in _events(services, sid) if e.kind == "TimedOut")
    assert timed_out.measured_from == last and timed_out.reason == "idle_timeout"
    row = _snapshot(services, sid)["sessions"][0]
    assert row[0] in ("COMPLETED", "ARCHIVED")  # archived too when older than 30 days
    assert row[1] == last.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _hook(services: Services, at: datetime, key: str, event: str, **fields: Any) -> None:
    body = {"session_id": "jobs-hook-session", "cwd": "/tmp/p", "hook_event_name": event, **fields}
    outcome = ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), key, at)
    assert outcome.error is None


def test_activity_without_a_batch_is_attached_to_a_recovery_batch_or_the_latest(
    services: Services,
) -> None:
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    sid = str(session_id("claude-code", "jobs-hook-session"))
    _hook(services, t0, "k1", "SessionStart", source="startup")
    tool = {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    _hook(services, t0 + timedelta(seconds=1), "k2", "PreToolUse", tool_use_id="toolu_a", **tool)
    _hook(
        services,
        t0 + timedelta(seconds=2),
        "k3",
        "PostToolUse",
        tool_use_id="toolu_a",
        tool_response={"stdout": "x"},
        **tool,
    )
    assert run_jobs(services, t0 + timedelta(minutes=4)).positions == []  # not idle long enough
    report = run_jobs(services, t0 + timedelta(minutes=10))
    assert report.decisions == {"unbatched_activity": 1}
    snap = _snapshot(services, sid)
    assert snap["prompt_batches"] == [(1, "completed", "2026-03-01T12:00:02.000Z", "recovery", 1)]
    assert snap["tool_calls"] == [("toolu_a", 1)]
    # a prompt now opens batch 2; a tool call after the agent stopped is unattached
    _hook(services, t0 + timedelta(minutes=11), "k4", "UserPromptSubmit", prompt="list files")
    _hook(services, t0 + timedelta(minutes=12), "k5", "Stop")
    _hook(services, t0 + timedelta(minutes=13), "k6", "PreToolUse", tool_use_id="toolu_b", **tool)
    report = run_jobs(services, t0 + timedelta(minutes=20))
    assert report.decisions == {"unbatched_activity": 1}
    attached = [e for e in _events(services, sid) if e.kind == "ActivitiesAttached"]
    assert [(e.batch, e.recovery, e.tool_use_ids) for e in attached] == [
        (1, True, ("toolu_a",)),
        (2, False, ("toolu_b",)),
    ]
    assert _snapshot(services, sid)["tool_calls"] == [("toolu_a", 1), ("toolu_b", 2)]


@pytest.mark.parametrize("jobs_before_the_next_prompt", [True, False])
def test_activity_after_a_turn_ended_stays_in_its_batch_whenever_the_jobs_run(
    services: Services, jobs_before_the_next_prompt: bool
) -> None:
    # A tool call recorded after the agent's Stop, then the next prompt. Whether the
    # liveness job ran in between (it attaches the call to batch 1, the latest then) or
    # only after the next prompt, the call is in batch 1. Before, a job running after the
    # next prompt attached it to the latest batch (2): the batches depended on when the
    # jobs ran.
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    sid = str(session_id("claude-code", "jobs-hook-session"))
    tool = {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    _hook(services, t0, "k1", "SessionStart", source="startup")
    _hook(services, t0 + timedelta(seconds=1), "k2", "UserPromptSubmit", prompt="list files")
    _hook(services, t0 + timedelta(seconds=2), "k3", "Stop")
    _hook(services, t0 + timedelta(seconds=3), "k4", "PreToolUse", tool_use_id="toolu_a", **tool)
    if jobs_before_the_next_prompt:
        assert run_jobs(services, t0 + timedelta(minutes=9)).decisions == {"unbatched_activity": 1}
    _hook(services, t0 + timedelta(minutes=10), "k5", "UserPromptSubmit", prompt="and now?")
    _hook(services, t0 + timedelta(minutes=10, seconds=1), "k6", "Stop")
    run_jobs(services, t0 + timedelta(hours=2))
    snap = _snapshot(services, sid)
    assert snap["tool_calls"] == [("toolu_a", 1)]
    assert [(b, status, calls) for b, status, _, _, calls in snap["prompt_batches"]] == [
        (1, "completed", 1),
        (2, "completed", 0),
    ]


TWO_FILES = FIXTURES / "agentcmd-claude-transcripts"
"""One session in two files: ``user-image.jsonl`` holds its prompt, ``tool-result-image.jsonl``
the assistant's reply and tool call (before that file's first prompt: batch 0)."""


@pytest.mark.parametrize("order", ["calls_first", "prompt_first", "prompt_jobs_calls"])
def test_activity_before_the_first_prompt_stays_before_it_whatever_the_order(
    services: Services, order: str
) -> None:
    # DESIGN.md: a prompt batch is a prompt and what follows it, in log order; a file's
    # facts before its first prompt go to batch 0 (docs/lifecycle.md). Imported before the
    # prompt's file, the reply and call were 'unattached' and the next job moved them into
    # the latest batch (the call in batch 1, counted by no prompt_batches row); imported
    # after it, they stayed in batch 0. Now both orders give batch 0.
    calls, prompt = TWO_FILES / "tool-result-image.jsonl", TWO_FILES / "user-image.jsonl"
    records = [json.loads(line) for f in (calls, prompt) for line in f.read_bytes().splitlines()]
    (external,) = {r["sessionId"] for r in records}
    call_ids = [
        b["id"] for r in records if r["type"] == "assistant"
        for b in r["message"]["content"] if b.get("type") == "tool_use"
    ]
    last = max(_time(r["timestamp"]) for r in records)
    steps = {
        "calls_first": [calls, prompt],
        "prompt_first": [prompt, calls],
        "prompt_jobs_calls": [prompt, "jobs", calls],
    }[order]
    for step in steps:
        if step == "jobs":
            run_jobs(services, last + timedelta(minutes=10))
        else:
            import_paths(services.ledger, [step])
    run_jobs(services, last + timedelta(minutes=10))
    snap = _snapshot(services, str(session_id("claude-code", external)))
    assert snap["tool_calls"] == [(call_ids[0], 0)] and len(call_ids) == 1
    assert [(b, status, reason, n) for b, status, _, reason, n in snap["prompt_batches"]] == [
        (1, "completed", "idle_timeout", 0)
    ]


def _hooks_of_four(with_calls: bool) -> tuple[str, list[tuple[str, dict]], dict[int, int]]:
    """full-session-four's hooks as Claude Code sends them: SessionStart, each prompt
    (after the previous turn's Stop), its tool calls' PreToolUse when ``with_calls``, the
    last Stop, at the transcript's times. Returns (the ledger's session id, the hooks as
    (time, body), the transcript's tool calls per batch)."""
    records = [json.loads(line) for line in FOUR.read_bytes().splitlines()]
    external = next(r["sessionId"] for r in records if r.get("sessionId"))
    cwd = next(r["cwd"] for r in records if r.get("cwd"))
    timed = [r for r in records if r.get("timestamp") and not r.get("isSidechain")]
    common = {"session_id": external, "cwd": cwd, "transcript_path": str(FOUR)}
    hooks = [
        (timed[0]["timestamp"], {**common, "hook_event_name": "SessionStart", "source": "startup"})
    ]
    calls: dict[int, int] = {}
    batch = 0
    for i, r in enumerate(timed):
        if _is_prompt(r):
            if batch:
                hooks.append((timed[i - 1]["timestamp"], {**common, "hook_event_name": "Stop"}))
            batch += 1
            prompt = {**common, "hook_event_name": "UserPromptSubmit", "prompt": r["message"]["content"]}
            hooks.append((r["timestamp"], prompt))
        content = r["message"].get("content") if isinstance(r.get("message"), dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls[batch] = calls.get(batch, 0) + 1
                if with_calls:
                    call = {"tool_name": block["name"], "tool_input": block["input"],
                            "tool_use_id": block["id"]}
                    hooks.append((r["timestamp"], {**common, "hook_event_name": "PreToolUse", **call}))
    hooks.append((timed[-1]["timestamp"], {**common, "hook_event_name": "Stop"}))
    return str(session_id("claude-code", external)), hooks, calls


def _send(services: Services, hooks: list[tuple[str, dict]]) -> None:
    for n, (at, body) in enumerate(hooks):
        outcome = ingest_hook(
            services.ledger, "claude-code", json.dumps(body).encode(), f"h{n}", _time(at)
        )
        assert outcome.error is None


def test_tool_calls_a_transcript_adds_after_the_hooks_stay_in_their_prompts_batches(
    services: Services,
) -> None:
    # The hooks delivered the session's prompts and stops but not its tool calls (hooks
    # installed without the tool events, or failing); the transcript imported after the
    # last Stop brings the 27 calls, each in the batch of the prompt it follows. The
    # liveness job must not take them for activity recorded while no batch was open:
    # before, it attached all of them to the latest batch ({1: 11, 2: 1, 3: 15} became
    # {3: 27}).
    sid, hooks, expected = _hooks_of_four(with_calls=False)
    _send(services, hooks)
    import_paths(services.ledger, [FOUR])

    def per_batch() -> dict[int, int]:
        counts: dict[int, int] = {}
        for _, b in _snapshot(services, sid)["tool_calls"]:
            counts[b] = counts.get(b, 0) + 1
        return counts

    assert expected == {1: 11, 2: 1, 3: 15}
    services.runner.catch_up()
    assert per_batch() == expected
    run_jobs(services, _time(hooks[-1][0]) + timedelta(hours=2))
    assert per_batch() == expected


def test_a_transcripts_records_before_its_first_prompt_imported_after_the_hooks_stay_before_it(
    services: Services,
) -> None:
    # full-session-four opens with the `/clear` that started it, before its first prompt.
    # The hooks (prompts, calls, stops) were recorded first, the transcript after the
    # last Stop. The `/clear` belongs before the first prompt (batch 0), and it is
    # history: the session stays WAITING. Before, it landed in the latest batch and moved
    # the session to PROCESSING, a transition dated before every other.
    sid, hooks, _ = _hooks_of_four(with_calls=True)
    _send(services, hooks)
    import_paths(services.ledger, [FOUR])
    services.runner.catch_up()
    (row,) = queries.list_sessions(services.models)
    detail = queries.get_session(services.models, sid)
    assert row["status"] == "WAITING"
    assert [(i["batch"], i["text"]) for i in detail["inputs"]] == [(0, "/clear")]
    assert [h["to_status"] for h in detail["status_history"]][-1] == "WAITING"


def test_a_session_that_ended_with_activity_no_batch_holds_gets_it_at_the_next_run(
    services: Services,
) -> None:
    # `codex exec --json` output has no prompt: its command and reply are activity before
    # any prompt, and `turn.completed` ends the session. Before, the jobs nominated an
    # ended session only past the archive threshold, so its recovery batch came 30 days
    # later, with the Archived decision.
    stream = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    records = [json.loads(line) for line in stream.read_bytes().splitlines()]
    thread = next(r["thread_id"] for r in records if r["type"] == "thread.started")
    commands = [r["item"]["id"] for r in records
                if r["type"] == "item.started" and r["item"]["type"] == "command_execution"]
    import_paths(services.ledger, [stream])
    sid = str(session_id("codex", thread))
    services.runner.catch_up()
    assert _snapshot(services, sid)["sessions"][0][0] == "COMPLETED"  # the source ended it
    # no source clock: idle from the ledger time of the import
    report = run_jobs(services, datetime.now(UTC) + timedelta(minutes=10))
    assert report.sessions == {sid: ["unbatched_activity"]}
    snap = _snapshot(services, sid)
    assert [(b, s, r, n) for b, s, _, r, n in snap["prompt_batches"]] == [
        (1, "completed", "recovery", len(commands))
    ]
    assert [b for _, b in snap["tool_calls"]] == [1] * len(commands) and len(commands) == 1
    assert run_jobs(services, datetime.now(UTC) + timedelta(minutes=20)).examined == 0


def test_an_ended_session_with_a_call_after_its_last_stop_or_an_open_batch_is_settled_next(
    services: Services,
) -> None:
    # A tool call after the agent's Stop, then SessionEnd: the call is attached to batch 1
    # at the next run (before: at archive time). A session an operator terminated in the
    # middle of a turn: its open batch is closed at the next run (before: at archive time).
    from ledger.commands import run_command

    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    tool = {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    ended, killed = (str(session_id("claude-code", n)) for n in ("ended", "killed"))

    def hook(name: str, at: int, key: str, event: str, **fields: Any) -> None:
        body = {"session_id": name, "cwd": "/tmp/p", "hook_event_name": event, **fields}
        outcome = ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), key,
                              t0 + timedelta(seconds=at))
        assert outcome.error is None

    hook("ended", 0, "e1", "UserPromptSubmit", prompt="list files")
    hook("ended", 1, "e2", "Stop")
    hook("ended", 2, "e3", "PreToolUse", tool_use_id="toolu_late", **tool)
    hook("ended", 3, "e4", "SessionEnd", reason="exit")
    hook("killed", 0, "k1", "UserPromptSubmit", prompt="run the tests")
    hook("killed", 1, "k2", "PreToolUse", tool_use_id="toolu_k", **tool)
    run_command(services.ledger, UUID(killed), "terminate", "k-term", t0 + timedelta(seconds=2))
    assert run_jobs(services, t0 + timedelta(minutes=4)).examined == 0  # not idle yet
    report = run_jobs(services, t0 + timedelta(minutes=6))
    assert report.sessions == {ended: ["unbatched_activity"], killed: ["idle_batch"]}
    attached = next(e for e in _events(services, ended) if e.kind == "ActivitiesAttached")
    assert (attached.batch, attached.recovery, attached.tool_use_ids) == (1, False, ("toolu_late",))
    assert [(b, s) for b, s, *_ in _snapshot(services, killed)["prompt_batches"]] == [
        (1, "completed")
    ]
    assert run_jobs(services, t0 + timedelta(minutes=7)).examined == 0  # nothing left


def test_the_sessions_rows_nominate_as_the_aggregates_decide(services: Services) -> None:
    # api/jobs.candidates reads sessions.batch_open / unattached_count for ended sessions;
    # they must be what each aggregate's state is, on every fixture, before and after
    # the jobs.
    import_paths(services.ledger, [FIXTURES])

    def compare() -> None:
        services.runner.catch_up()
        t = services.models.table("sessions")
        with services.models.engine.connect() as conn:
            rows = conn.execute(select(t.c.id, t.c.batch_open, t.c.unattached_count)).all()
        assert len(rows) > 40
        for sid, batch_open, unattached in rows:
            agg = services.ledger.repository.get(UUID(sid))
            assert (sid, batch_open, unattached) == (
                sid, agg.batch_open, len(agg.liveness.unattached)
            )

    compare()
    run_jobs(services, datetime(2030, 1, 1, tzinfo=UTC))
    compare()


def test_sessions_ended_long_ago_are_archived(services: Services) -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    for name, days in (("old", 40), ("recent", 10)):
        body = {
            "session_id": name,
            "cwd": "/tmp",
            "hook_event_name": "SessionEnd",
            "reason": "exit",
        }
        ended = now - timedelta(days=days)
        ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), f"end-{name}", ended)
    report = run_jobs(services, now)
    old, recent = (str(session_id("claude-code", n)) for n in ("old", "recent"))
    assert report.sessions == {old: ["archive_after"]}
    archived = next(e for e in _events(services, old) if e.kind == "Archived")
    assert archived.measured_from == now - timedelta(days=40)
    assert archived.threshold_s == 30 * 86400 and archived.status == "ARCHIVED"
    assert run_jobs(services, now, JobConfig(archive_after_days=5)).sessions == {
        recent: ["archive_after"]
    }


def test_cli_import_settles_idle_history_unless_told_not_to(
    settings: Settings, other_settings: Settings
) -> None:
    # a transcript recorded months ago: the import's own job run times it out, as a
    # running server's would within a minute; --no-jobs leaves it as the file left it
    short = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    records = [json.loads(line) for line in short.read_bytes().splitlines()]
    external = next(r["sessionId"] for r in records if r.get("sessionId"))
    last = max(_time(r["timestamp"]) for r in records if r.get("timestamp"))
    out = json.loads(cli(settings, "import", "--json", str(short)).stdout)
    assert out["jobs"]["decisions"]["idle_session"] == 1 and out["jobs"]["appended"] >= 2
    (row,) = json.loads(cli(settings, "sessions", "--json").stdout)
    assert row["external_id"] == external and row["status"] in ("COMPLETED", "ARCHIVED")
    assert row["ended_at"] == last.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    again = json.loads(cli(settings, "import", "--json", "--reread", str(short)).stdout)
    assert again["events_appended"] == 0 and again["jobs"]["appended"] == 0
    text = cli(settings, "import", "--reread", str(short)).stdout.decode()
    assert "liveness jobs" not in text  # nothing left to settle: no line about it

    kept = json.loads(cli(other_settings, "import", "--json", "--no-jobs", str(short)).stdout)
    assert kept["jobs"] is None
    (row,) = json.loads(cli(other_settings, "sessions", "--json").stdout)
    assert row["status"] not in ("COMPLETED", "ARCHIVED") and row["ended_at"] is None


def test_a_turns_rest_read_after_an_idle_timeout_reopens_the_session_and_moves_its_end(
    settings: Settings, other_settings: Settings, tmp_path: Path
) -> None:
    # The first half of a transcript is imported (its jobs time it out: idle for months);
    # the agent then wrote the rest of that turn (as after a long tool call or a pending
    # permission prompt). The rest happened after the timeout's end: it reopens the
    # session, and the next jobs end it at its real last activity, as a whole import does.
    # Before, the rest was filed as history of the closed turn: the session kept the
    # first half's end.
    short = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    lines = short.read_bytes().rstrip(b"\n").split(b"\n")
    half = lines[: len(lines) // 2]
    stamps = lambda rows: [_time(json.loads(x)["timestamp"]) for x in rows if json.loads(x).get("timestamp")]  # noqa: E731
    assert max(stamps(lines)) > max(stamps(half))
    path = tmp_path / "projects" / "p" / short.name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(half) + b"\n")
    cli(settings, "import", str(path))
    (row,) = json.loads(cli(settings, "sessions", "--json").stdout)
    z = lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: E731
    assert row["ended_at"] == z(max(stamps(half)))
    path.write_bytes(short.read_bytes())
    cli(settings, "import", str(path))
    (grown,) = json.loads(cli(settings, "sessions", "--json").stdout)
    assert grown["ended_at"] == z(max(stamps(lines)))
    cli(other_settings, "import", str(short))
    (whole,) = json.loads(cli(other_settings, "sessions", "--json").stdout)
    differ = {k for k in whole if whole[k] != grown[k]}
    assert differ <= {"event_count"}, {k: (grown[k], whole[k]) for k in differ}
    services = build(settings)
    try:
        kinds = [e.kind for e in _events(services, str(grown["id"]))]
    finally:
        services.close()
    assert kinds.count("Reopened") == 1 and kinds.count("TimedOut") == 2, kinds


def test_cli_jobs_run_once_with_a_given_clock(settings: Settings) -> None:
    short = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    cli(settings, "import", "--no-jobs", str(short))
    last = max(
        _time(json.loads(x)["timestamp"])
        for x in short.read_bytes().splitlines()
        if json.loads(x).get("timestamp")
    )
    soon = (last + timedelta(minutes=1)).isoformat()
    out = json.loads(cli(settings, "jobs", "run", "--once", "--now", soon, "--json").stdout)
    assert out["decisions"] == {} and out["examined"] == 0
    later = (last + timedelta(hours=2)).isoformat()
    out = json.loads(cli(settings, "jobs", "run", "--once", "--now", later, "--json").stdout)
    assert out["decisions"] == {"idle_batch": 1, "idle_session": 1}
    bad = cli(settings, "jobs", "run", "--once", "--now", "yesterday", check=False)
    assert bad.returncode == 2 and b"ISO-8601" in bad.stderr


def test_the_server_runs_the_jobs_in_its_background(settings: Settings) -> None:
    server = Server(dataclasses.replace(settings, jobs_interval_s=0.5)).start()
    try:
        two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
        body = {"session_id": "served", "cwd": "/tmp", "hook_event_name": "SessionStart"}
        r = httpx.post(
            f"{server.url}/v1/hooks/claude-code",
            content=json.dumps(body),
            headers={"X-Hookledger-Captured-At": two_hours_ago},
            timeout=30,
        )
        assert r.status_code == 202
        sid = r.json()["sessions"][0]
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            status = httpx.get(f"{server.url}/v1/sessions/{sid}", timeout=30).json()["status"]
            if status == "COMPLETED":
                break
            time.sleep(0.2)
        assert status == "COMPLETED"
        events = httpx.get(f"{server.url}/v1/sessions/{sid}/events", timeout=30).json()["events"]
        timed_out = [e for e in events if e["kind"] == "TimedOut"]
        assert len(timed_out) == 1 and timed_out[0]["rule"] == "idle_session"
        assert timed_out[0]["measured_from"].startswith(two_hours_ago[:19])
    finally:
        server.stop()


def test_a_paused_session_is_not_timed_out_and_activity_reopens_a_timed_out_one(
    services: Services,
) -> None:
    from ledger.commands import run_command

    t0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)
    sid = str(session_id("claude-code", "jobs-hook-session"))
    _hook(services, t0, "p1", "SessionStart", source="startup")
    run_command(services.ledger, UUID(sid), "pause", "k-pause", t0)
    assert run_jobs(services, t0 + timedelta(hours=3)).positions == []
    run_command(services.ledger, UUID(sid), "resume", "k-resume", t0)
    assert run_jobs(services, t0 + timedelta(hours=3)).decisions == {"idle_session": 1}
    _hook(services, t0 + timedelta(hours=4), "p2", "UserPromptSubmit", prompt="still there?")
    reopened = [e for e in _events(services, sid) if e.kind == "Reopened"]
    assert len(reopened) == 1 and "idle_timeout" in reopened[0].reason
    services.runner.catch_up()
    assert _snapshot(services, sid)["sessions"][0][:2] == ("PROCESSING", None)


def test_a_resumed_session_restarts_the_idle_clock_and_is_not_archived_at_once(
    services: Services,
) -> None:
    from ledger.commands import fork_session, run_command

    # A session last active two months ago, paused, and resumed by an operator today.
    t0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    today = t0 + timedelta(days=60)
    sid = str(session_id("claude-code", "jobs-hook-session"))
    _hook(services, t0, "p1", "UserPromptSubmit", prompt="refactor the loader")
    run_command(services.ledger, UUID(sid), "pause", "k-pause", t0 + timedelta(minutes=1))
    assert run_jobs(services, today).sessions.get(sid, []) == ["idle_batch"]  # paused: no timeout
    resumed = run_command(services.ledger, UUID(sid), "resume", "k-resume", today)
    assert resumed.to_status == "ACTIVE"
    # The next tick: measured from the resume, not from the activity before the pause.
    assert run_jobs(services, today + timedelta(minutes=1)).positions == []
    services.runner.catch_up()
    assert _snapshot(services, sid)["sessions"][0][:2] == ("ACTIVE", None)
    # An hour after the resume it times out, ended at the resume; archive counts from there.
    later = today + timedelta(hours=1, minutes=1)
    assert run_jobs(services, later).sessions == {sid: ["idle_session"]}
    timed_out = next(e for e in _events(services, sid) if e.kind == "TimedOut")
    command = next(e for e in _events(services, sid) if e.kind == "CommandApplied"
                   and e.command == "resume")
    assert timed_out.measured_from == command.timestamp == today
    assert timed_out.decided_at - timed_out.measured_from >= timedelta(seconds=timed_out.threshold_s)
    assert timed_out.event_key == f"job:idle_session:{command.originator_version}"
    assert run_jobs(services, later + timedelta(days=29)).positions == []
    assert run_jobs(services, today + timedelta(days=30, hours=1)).sessions == {
        sid: ["archive_after"]
    }
    # A fork of the archived session, resumed: not completed or archived by the next tick.
    fork = fork_session(services.ledger, UUID(sid), "k1", today + timedelta(days=31))
    assert fork.fork_id is not None
    fid = str(fork.fork_id)
    run_command(services.ledger, fork.fork_id, "resume", "k-fork", today + timedelta(days=31))
    assert run_jobs(services, today + timedelta(days=31, minutes=1)).sessions.get(fid) is None
    services.runner.catch_up()
    assert _snapshot(services, fid)["sessions"][0][:2] == ("ACTIVE", None)
    # A rebuild reproduces every status from the log, without running a job again.
    before = {s: _snapshot(services, s) for s in (sid, fid)}
    head = services.ledger.max_position()
    for name in PROJECTION_CLASSES:
        services.runner.rebuild(name)
    assert services.ledger.max_position() == head
    assert {s: _snapshot(services, s) for s in (sid, fid)} == before


@pytest.mark.parametrize(
    ("closers", "said"),
    [
        (["timeout"], "was completed by the idle timeout job (idle_timeout); activity resumed"),
        (
            ["timeout", "archive job"],
            "was archived by the archive job (archive_after), after the idle timeout job"
            " (idle_timeout) ended it; activity resumed",
        ),
        (
            ["timeout", "archive command"],
            "was archived by an operator (archive), after the idle timeout job (idle_timeout)"
            " ended it; activity resumed",
        ),
        (["agent end", "archive job"], "was archived by the archive job (archive_after)"),
        (
            ["terminate", "archive job"],
            "was archived by the archive job (archive_after), after an operator (terminate)"
            " ended it",
        ),
    ],
    ids=lambda v: "+".join(v) if isinstance(v, list) else "",
)
def test_a_reopened_sessions_reason_names_what_ended_and_what_archived_it(
    services: Services, closers: list[str], said: str
) -> None:
    # The real session full-session-four is imported; then jobs or an operator end and
    # archive it; then the user comes back. The Reopened says who did each. Before, an
    # archived session's reason named one of them as having archived it: the idle timeout
    # job (which only completed it), or "an operator" for the archive job.
    from ledger.commands import run_command

    import_paths(services.ledger, [FOUR])
    records = [json.loads(line) for line in FOUR.read_bytes().splitlines()]
    external = next(r["sessionId"] for r in records if r.get("sessionId"))
    sid = session_id("claude-code", external)
    last = max(_time(r["timestamp"]) for r in records if r.get("timestamp"))
    at = last + timedelta(hours=2)
    for closer in closers:
        services.runner.catch_up()
        if closer == "timeout":
            assert run_jobs(services, at).decisions.get("idle_session") == 1
        elif closer == "archive job":
            at += timedelta(days=31)
            assert run_jobs(services, at).decisions.get("archive_after") == 1
        elif closer == "agent end":
            body = {"session_id": external, "cwd": "/tmp", "hook_event_name": "SessionEnd"}
            assert ingest_hook(
                services.ledger, "claude-code", json.dumps(body).encode(), "end", at
            ).error is None
        else:
            command = closer.removesuffix(" command")
            run_command(services.ledger, sid, command, f"k-{command}", at)
    body = {"session_id": external, "cwd": "/tmp", "hook_event_name": "UserPromptSubmit",
            "prompt": "where were we?"}
    at += timedelta(days=1)
    assert ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), "back", at).error is None
    (reopened,) = [e for e in _events(services, str(sid)) if e.kind == "Reopened"]
    assert reopened.reason == f"PromptSubmitted after the session {said}"


def test_a_server_shutting_down_mid_run_stops_after_the_session_at_hand(settings: Settings) -> None:
    """A first run over a large imported store decides for every session (15,222 sessions:
    a minute and more); the server's shutdown waited for all of it. The background
    thread's ``stop`` now ends the run after the session it is deciding."""
    from api.app import Background
    from api.bootstrap import build

    files = sorted((FIXTURES / "agentcmd-claude-transcripts").glob("*.jsonl"))
    external = {
        json.loads(line)["sessionId"]
        for f in files
        for line in f.read_bytes().splitlines()
        if line.strip() and "sessionId" in json.loads(line)
    }
    assert len(external) >= 5  # recorded months ago: every one is idle, or ended long ago
    services = build(dataclasses.replace(settings, jobs_interval_s=0.01))
    try:
        import_paths(services.ledger, files)
        background = Background(services)
        background.services.ledger.add_listener(lambda _pos: background.stop.set())  # first save
        background.thread.start()
        background.thread.join(60)
        assert not background.thread.is_alive()

        def decided() -> int:
            return sum(
                any(type(e).__name__ in DECISION_KINDS for e in _events(services, str(sid)))
                for sid in (session_id("claude-code", x) for x in external)
            )

        assert decided() == 1
        run_jobs(services)  # the next run decides for the others
        assert decided() == len(external)
    finally:
        services.close()
