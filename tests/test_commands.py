"""Operator commands through the HTTP API (the real app on the real store) and the CLI:
every command's valid and invalid transitions; an invalid one is refused (409 / exit 1)
with the state and the allowed transitions named, and appends nothing. Fork copies the
parent's history up to a position."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.lifecycle import COMMAND_TRANSITIONS
from ledger.observation import session_id

from conftest import FIXTURES, cli


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services)) as c:
        yield c


def _start(services: Services, name: str) -> str:
    body = {
        "session_id": name,
        "cwd": "/tmp",
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    assert (
        ingest_hook(
            services.ledger, "claude-code", json.dumps(body).encode(), f"start-{name}"
        ).error
        is None
    )
    return str(session_id("claude-code", name))


# (command, state to put the session in first via other commands, expected new state)
VALID = [
    ("pause", [], "PAUSED"),
    ("resume", ["pause"], "ACTIVE"),
    ("terminate", [], "TERMINATED"),
    ("terminate", ["pause"], "TERMINATED"),
    ("archive", ["terminate"], "ARCHIVED"),
]
# (command, commands first, the state it is refused in)
INVALID = [
    ("pause", ["pause"], "PAUSED"),
    ("resume", [], "ACTIVE"),
    ("terminate", ["terminate"], "TERMINATED"),
    ("archive", [], "ACTIVE"),
    ("archive", ["pause"], "PAUSED"),
    ("resume", ["terminate", "archive"], "ARCHIVED"),
]


@pytest.mark.parametrize(("command", "before", "expected"), VALID, ids=lambda v: str(v))
def test_valid_transitions_through_the_api(
    services: Services, client: TestClient, command: str, before: list[str], expected: str
) -> None:
    sid = _start(services, "api-valid")
    for c in before:
        assert client.post(f"/v1/sessions/{sid}/commands/{c}").status_code == 200
    r = client.post(f"/v1/sessions/{sid}/commands/{command}", json={"by": "ops", "reason": "test"})
    assert r.status_code == 200, r.text
    assert r.json()["to_status"] == expected and len(r.json()["positions"]) == 1
    assert client.get(f"/v1/sessions/{sid}").json()["status"] == expected
    last = client.get(f"/v1/sessions/{sid}/events").json()["events"][-1]
    assert (last["kind"], last["command"], last["to_status"], last["by"], last["reason"]) == (
        "CommandApplied",
        command,
        expected,
        "ops",
        "test",
    )
    history = client.get(f"/v1/sessions/{sid}").json()["status_history"]
    assert history[-1]["to_status"] == expected and history[-1]["cause"] == "CommandApplied"


@pytest.mark.parametrize(("command", "before", "state"), INVALID, ids=lambda v: str(v))
def test_invalid_transitions_are_refused_with_409_and_append_nothing(
    services: Services, client: TestClient, command: str, before: list[str], state: str
) -> None:
    sid = _start(services, "api-invalid")
    for c in before:
        assert client.post(f"/v1/sessions/{sid}/commands/{c}").status_code == 200
    head = services.ledger.max_position()
    r = client.post(f"/v1/sessions/{sid}/commands/{command}")
    assert r.status_code == 409
    body = r.json()
    assert body["status"] == state and state in body["error"]
    allowed = sorted(s.value for s in COMMAND_TRANSITIONS[command])
    assert body["allowed_from"] == allowed and all(s in body["error"] for s in allowed)
    assert services.ledger.max_position() == head


def _hook(services: Services, name: str, key: str, event: str, **fields: object) -> None:
    body = {"session_id": name, "cwd": "/tmp", "hook_event_name": event, **fields}
    outcome = ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), key)
    assert outcome.error is None


def test_the_agents_end_after_terminate_or_archive_is_recorded_and_the_state_kept(
    services: Services, client: TestClient
) -> None:
    # An operator terminates a runaway session; the killed agent's SessionEnd comes after.
    sid = _start(services, "end-after-terminate")
    _hook(services, "end-after-terminate", "p1", "UserPromptSubmit", prompt="refactor the loader")
    assert client.post(f"/v1/sessions/{sid}/commands/terminate").status_code == 200
    _hook(services, "end-after-terminate", "end-1", "SessionEnd", reason="other")
    session = client.get(f"/v1/sessions/{sid}").json()
    assert session["status"] == "TERMINATED"
    last = client.get(f"/v1/sessions/{sid}/events").json()["events"][-1]
    assert (last["kind"], last["status"], last["reason"]) == ("Ended", "TERMINATED", "other")
    # Archived, then another SessionEnd (a logout): still ARCHIVED.
    assert client.post(f"/v1/sessions/{sid}/commands/archive").status_code == 200
    _hook(services, "end-after-terminate", "end-2", "SessionEnd", reason="logout")
    session = client.get(f"/v1/sessions/{sid}").json()
    assert session["status"] == "ARCHIVED"
    assert [(h["from_status"], h["to_status"], h["cause"]) for h in session["status_history"]][
        -3:
    ] == [
        ("ACTIVE", "PROCESSING", "PromptSubmitted"),
        ("PROCESSING", "TERMINATED", "CommandApplied"),
        ("TERMINATED", "ARCHIVED", "CommandApplied"),
    ]
    # New activity reopens it, and the reason still names the operator's terminate.
    _hook(services, "end-after-terminate", "p2", "UserPromptSubmit", prompt="are you there?")
    events = client.get(f"/v1/sessions/{sid}/events").json()["events"]
    reopened = next(e for e in events if e["kind"] == "Reopened")
    assert reopened["from_status"] == "ARCHIVED" and "operator (terminate)" in reopened["reason"]


def _coorp_start_and_end() -> tuple[dict[str, object], dict[str, object]]:
    """The real SessionStart and SessionEnd hook payloads of one coorp Claude Code session."""
    logs = FIXTURES / "coorp-serverless-plugins-hook-logs"
    end = json.loads((logs / "session_end.json").read_text())[0]
    start = next(
        p for p in json.loads((logs / "session_start.json").read_text())
        if p["session_id"] == end["session_id"]
    )
    return start, end


def test_a_start_in_the_same_millisecond_as_the_end_reopens_the_session(
    services: Services, client: TestClient
) -> None:
    # Real payloads of one Claude Code session (coorp): its SessionStart and SessionEnd,
    # then the session started again (``claude --resume``) in the very millisecond the
    # hooks captured the end. The log puts the start after the end: the session is live
    # again, with a Reopened, not a COMPLETED session whose agent is running.
    start, end = _coorp_start_and_end()
    name = end["session_id"]
    t0 = datetime(2026, 6, 20, 0, 30, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=30)
    for key, payload, at in (
        ("start", start, t0),
        ("end", end, t1),
        ("start-again", {**start, "source": "resume"}, t1),
    ):
        outcome = ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), key, at)
        assert outcome.error is None
    sid = str(session_id("claude-code", name))
    session = client.get(f"/v1/sessions/{sid}").json()
    assert session["status"] == "ACTIVE"
    assert [(h["from_status"], h["to_status"], h["cause"]) for h in session["status_history"]][-2:] == [
        ("ACTIVE", "COMPLETED", "Ended"),
        ("COMPLETED", "ACTIVE", "Reopened"),
    ]
    kinds = [e["kind"] for e in client.get(f"/v1/sessions/{sid}/events").json()["events"]]
    assert kinds[-3:] == ["Ended", "Reopened", "Started"]


def test_unknown_command_and_session(services: Services, client: TestClient) -> None:
    sid = _start(services, "api-unknown")
    assert client.post(f"/v1/sessions/{sid}/commands/explode").status_code == 400
    assert client.post("/v1/sessions/no-such-session/commands/pause").status_code == 404
    assert client.post(f"/v1/sessions/{sid}/commands/pause", content=b"[1]").status_code == 400


@pytest.mark.parametrize(
    "body",
    [{"at": True}, {"key": ["k"]}, {"by": {"name": "x"}}, {"reason": 7}, {"by": "x" * 201}],
    ids=["at-bool", "key-list", "by-object", "reason-number", "by-too-long"],
)
def test_a_command_body_field_of_the_wrong_type_is_a_400_and_appends_nothing(
    services: Services, client: TestClient, body: dict
) -> None:
    # {"at": true} forked at position 1; a list key or a 1 MB "by" were taken as given
    sid = _start(services, "api-body")
    before = client.get(f"/v1/sessions/{sid}/events").json()["events"]
    r = client.post(f"/v1/sessions/{sid}/commands/fork", json=body)
    assert r.status_code == 400, r.text
    assert client.get(f"/v1/sessions/{sid}/events").json()["events"] == before


def test_a_retried_command_with_the_same_key_appends_nothing(
    services: Services, client: TestClient
) -> None:
    sid = _start(services, "api-retry")
    first = client.post(f"/v1/sessions/{sid}/commands/pause", json={"key": "k-1"})
    again = client.post(f"/v1/sessions/{sid}/commands/pause", json={"key": "k-1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["appended"] is False and again.json()["positions"] == []


def test_fork_copies_the_parents_history_up_to_a_position(
    services: Services, client: TestClient
) -> None:
    transcript = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    import_paths(services.ledger, [transcript])
    external = next(
        json.loads(x)["sessionId"]
        for x in transcript.read_bytes().splitlines()
        if json.loads(x).get("sessionId")
    )
    parent = str(session_id("claude-code", external))
    events = client.get(f"/v1/sessions/{parent}/events").json()["events"]
    at = events[5]["position"]  # fork after the parent's sixth event
    r = client.post(f"/v1/sessions/{parent}/commands/fork", json={"at": at, "by": "ops"})
    assert r.status_code == 200, r.text
    fork = r.json()["fork_id"]
    assert (
        r.json()["from_status"] == r.json()["to_status"] == events[-1]["status"]
    )  # parent unchanged
    child = client.get(f"/v1/sessions/{fork}/events").json()["events"]
    assert child[0]["kind"] == "Opened" and child[0]["parent_id"] == parent
    assert (
        child[1]["kind"],
        child[1]["parent_id"],
        child[1]["parent_version"],
        child[1]["parent_position"],
    ) == ("ForkedFrom", parent, 6, at)
    copies = child[2:-1]
    assert [(e["kind"], e["event_key"], e["raw"]) for e in copies] == [
        (e["kind"], e["event_key"], e["raw"]) for e in events[1:6]
    ]
    assert child[-1]["kind"] == "CommandApplied" and child[-1]["to_status"] == "PAUSED"
    row = client.get(f"/v1/sessions/{fork}").json()
    assert row["parent_id"] == parent and row["status"] == "PAUSED"
    parent_last = client.get(f"/v1/sessions/{parent}/events").json()["events"][-1]
    assert parent_last["command"] == "fork" and parent_last["fork_id"] == fork
    # the fork is a session of its own: it can be resumed, and its chain verifies
    assert client.post(f"/v1/sessions/{fork}/commands/resume").json()["to_status"] == "ACTIVE"
    from ledger.verify import verify_store

    assert verify_store(services.ledger.recorder, services.ledger.mapper, services.anchors()).ok
    assert UUID(fork) != UUID(parent)


def test_a_fork_of_an_ended_session_is_paused_not_ended(
    services: Services, client: TestClient
) -> None:
    # A real Claude Code session (coorp hook payloads) started and ended; an operator
    # forks it. The fork is PAUSED, waiting to be resumed: it has no end of its own.
    # Before, it showed the parent's ended_at (its copy of the parent's SessionEnd).
    start, end = _coorp_start_and_end()
    name = end["session_id"]
    t0 = datetime(2026, 6, 20, 0, 30, tzinfo=UTC)
    for key, payload, at in (("start", start, t0), ("end", end, t0 + timedelta(minutes=30))):
        outcome = ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), key, at)
        assert outcome.error is None
    parent = str(session_id("claude-code", name))
    assert client.get(f"/v1/sessions/{parent}").json()["ended_at"] == "2026-06-20T01:00:00.000Z"
    r = client.post(f"/v1/sessions/{parent}/commands/fork", json={"by": "ops"})
    assert r.status_code == 200, r.text
    fork = r.json()["fork_id"]
    row = client.get(f"/v1/sessions/{fork}").json()
    assert (row["status"], row["ended_at"]) == ("PAUSED", None)
    listed = {s["id"]: s for s in client.get("/v1/sessions").json()["sessions"]}
    assert listed[fork]["ended_at"] is None
    assert listed[parent]["ended_at"] == "2026-06-20T01:00:00.000Z"  # the parent keeps its end
    aggregate = services.ledger.session(UUID(fork))
    assert aggregate is not None and aggregate.ended_at is None
    # Terminated, the fork ends when the operator ended it, not when its parent did.
    terminated = client.post(f"/v1/sessions/{fork}/commands/terminate").json()
    assert terminated["to_status"] == "TERMINATED"
    row = client.get(f"/v1/sessions/{fork}").json()
    assert row["ended_at"] is not None and row["ended_at"] != listed[parent]["ended_at"]


def test_cli_session_commands(settings: Settings) -> None:
    body = {"session_id": "cli-session", "cwd": "/tmp", "hook_event_name": "SessionStart"}
    cli(
        settings,
        "hook",
        "claude-code",
        stdin=json.dumps(body).encode(),
        extra_env={"HOOKLEDGER_URL": "http://127.0.0.1:9"},
    )  # journalled (no server runs), then ingested below
    from api.bootstrap import build
    from ledger.journal import JournalIngester

    services = build(settings)
    try:
        JournalIngester(settings.data_dir / "spool", services.ledger.record).drain()
    finally:
        services.close()
    sid = str(session_id("claude-code", "cli-session"))

    def head() -> int:
        return json.loads(cli(settings, "stats", "--json").stdout)["events"]

    ok = cli(settings, "session", "pause", sid, "--reason", "lunch", "--json")
    assert json.loads(ok.stdout)["to_status"] == "PAUSED"
    before = head()
    bad = cli(settings, "session", "pause", sid, check=False)
    assert bad.returncode == 1
    assert b"PAUSED" in bad.stderr and b"ACTIVE" in bad.stderr  # the state and the allowed ones
    assert head() == before
    assert cli(settings, "session", "resume", sid).returncode == 0
    assert cli(settings, "session", "archive", sid, check=False).returncode == 1
    assert cli(settings, "session", "terminate", sid).returncode == 0
    assert cli(settings, "session", "archive", sid).returncode == 0
    fork = json.loads(cli(settings, "session", "fork", sid, "--json").stdout)
    assert fork["to_status"] == "ARCHIVED" and fork["fork_id"] != sid
    assert cli(settings, "session", "pause", sid, "--at", "3", check=False).returncode == 2
    shown = json.loads(cli(settings, "show", fork["fork_id"], "--json").stdout)
    assert shown["status"] == "PAUSED" and shown["parent_id"] == sid


def test_a_negative_limit_or_offset_of_the_session_list_is_refused(
    services: Services, client: TestClient
) -> None:
    # PostgreSQL refuses OFFSET -1 (the list answered 500); SQLite ignored it, and a
    # negative limit gave an empty page. Both are now a 400 with the reason.
    _start(services, "listed")
    for query in ("offset=-1", "limit=-1", "limit=abc"):
        r = client.get(f"/v1/sessions?{query}")
        assert r.status_code == 400, (query, r.text)
        assert "limit" in r.json()["error"]
    # an offset past a 64-bit integer made the driver raise: a 500 (SQLite OverflowError)
    r = client.get(f"/v1/sessions?offset={2**63}")
    assert r.status_code == 400 and "offset must be at most" in r.json()["error"]
    assert client.get(f"/v1/sessions?offset={2**63 - 1}").json()["sessions"] == []
    # a limit past 1000 is 1000, huge or not (as documented)
    assert client.get(f"/v1/sessions?limit={10**30}").json()["limit"] == 1000
    assert [s["external_id"] for s in client.get("/v1/sessions?offset=0").json()["sessions"]] == [
        "listed"
    ]


def test_a_negative_sessions_limit_is_a_usage_error(settings: Settings) -> None:
    # on PostgreSQL `LIMIT -1` is an error (a traceback); on SQLite it listed everything
    out = cli(settings, "sessions", "--limit", "-1", check=False)
    assert out.returncode == 2 and b"--limit" in out.stderr


def test_an_unknown_agent_filter_is_a_usage_error_naming_the_agents(settings: Settings) -> None:
    # `sessions --agent claude` (for claude-code) listed nothing and said nothing
    out = cli(settings, "sessions", "--agent", "claude", check=False)
    assert out.returncode == 2
    assert b"unknown agent 'claude'" in out.stderr and b"claude-code" in out.stderr
    assert cli(settings, "sessions", "--agent", "claude-code", "--json").returncode == 0


def test_an_unknown_status_filter_is_a_usage_error_naming_the_states(settings: Settings) -> None:
    # `sessions --status COMPLETE` (for COMPLETED) listed nothing and said nothing, as if
    # no session had completed
    out = cli(settings, "sessions", "--status", "COMPLETE", check=False)
    assert out.returncode == 2
    assert b"unknown status 'COMPLETE'" in out.stderr and b"COMPLETED" in out.stderr
    assert b"ARCHIVED" in out.stderr
    assert cli(settings, "sessions", "--status", "completed", "--json").returncode == 0


def test_an_unknown_status_or_agent_of_the_session_list_is_a_400_naming_the_known_ones(
    services: Services, client: TestClient
) -> None:
    # GET /v1/sessions?status=COMPLETE (for COMPLETED) or ?agent=claude answered an
    # empty 200, as if no session matched; the CLI refused both already
    _start(services, "listed")
    for query, named in (("status=COMPLETE", "'COMPLETE'"), ("status=bogus&totals=1", "'bogus'")):
        r = client.get(f"/v1/sessions?{query}")
        assert r.status_code == 400, (query, r.text)
        error = r.json()["error"]
        assert f"unknown status {named}" in error
        assert all(s in error for s in ("CREATED", "PROCESSING", "COMPLETED", "ARCHIVED"))
    r = client.get("/v1/sessions?agent=claude")
    assert r.status_code == 400 and "unknown agent 'claude'" in r.json()["error"]
    assert "claude-code" in r.json()["error"] and "codex" in r.json()["error"]
    listed = lambda q: [s["external_id"] for s in client.get(f"/v1/sessions?{q}").json()["sessions"]]  # noqa: E731
    # any case, as before; a known agent without sessions lists none (documented)
    (status,) = {s["status"] for s in client.get("/v1/sessions").json()["sessions"]}
    assert listed(f"status={status.lower()}") == listed(f"status={status}") == ["listed"]
    assert listed("agent=claude-code") == ["listed"]
    r = client.get("/v1/sessions?agent=codex")
    assert r.status_code == 200 and r.json()["sessions"] == []


def test_an_ambiguous_session_prefix_is_a_404_listing_the_sessions_it_matches(
    services: Services, client: TestClient
) -> None:
    # GET /v1/sessions/<prefix of two sessions' ids> answered "no such session", as if
    # none matched; `hookledger show` lists them
    ids = [_start(services, name) for name in ("amb-one", "amb-two")]
    for path in ("", "/events", "/summaries", "/plans"):
        r = client.get(f"/v1/sessions/amb-{path}")
        assert r.status_code == 404, (path, r.text)
        error = r.json()["error"]
        assert "more than one session matches 'amb-'" in error and all(i in error for i in ids), error
        r = client.get(f"/v1/sessions/nothing-like-it{path}")
        assert r.status_code == 404 and r.json()["error"] == "no such session: nothing-like-it"
    assert client.get("/v1/sessions/amb-one").json()["id"] == ids[0]
