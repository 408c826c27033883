"""Claude stream-json and Codex (exec --json, rollouts) files in, correct sessions out.

Every file of the stream fixtures is imported into a fresh store. Per file, the prompts,
tool calls and token totals must equal an independent count written here with plain
``json`` over the fixture (not our parsers):

* stream-json: tool calls = ``tool_use`` ids; tokens = the sum of the ``result`` records'
  ``usage`` (the agent's own total); where a stream has no result usage, the last usage
  of each ``message.id``.
* Codex exec: tool calls = distinct tool item ids; tokens = the last ``turn.completed``
  usage (the thread's running total, so turns must not add up) with ``input - cached`` as
  input and ``cached`` as cache reads (Anthropic's convention).
* rollouts: prompts = ``event_msg/user_message`` texts; tool calls = distinct ``call_id``s
  of ``function_call``/``custom_tool_call``; tokens = the last cumulative
  ``total_token_usage`` (so repeated snapshots must not add up), input + output +
  cache_read = Codex's own ``total_tokens``.

Every record is kept: the number of stored events carrying a raw record plus rejected
lines equals the number of records in the file (unknown types are ``RecordObserved``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest

from api.bootstrap import Services
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.observation import Observation
from ledger.parsing import parse_one
from projections import queries

from conftest import FIXTURES, cli, resumed_exec_turn

TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
STREAM_JSON = [
    *sorted((FIXTURES / "claude_code-elixir-stream-json").glob("*.json*")),
    FIXTURES / "claude-code-action-stream-json" / "sample-turns.json",
]
CODEX_EXEC = sorted((FIXTURES / "agentcmd-codex-exec-json").glob("*.jsonl"))
ROLLOUTS = [
    *sorted((FIXTURES / "agentcmd-codex-rollouts").glob("rollout-*.jsonl")),
    FIXTURES / "agent-sessions-schema-drift" / "codex_053_rate_limit.jsonl",
]
TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}


def _records(path: Path) -> list[dict]:
    text = path.read_text()
    if path.suffix == ".json":
        doc = json.loads(text)
        return doc if isinstance(doc, list) else [doc]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _import_one(services: Services, path: Path) -> dict:
    summary = import_paths(services.ledger, [path])
    assert summary.files == 1 and not summary.skipped, summary.skipped
    services.runner.catch_up()
    (session,) = [s for s in queries.list_sessions(services.models) if s["parent_id"] is None]
    return session


def _tokens(session: dict) -> dict[str, int]:
    return {t: session[t] for t in TOKENS}


def _events(services: Services, session: dict) -> list:
    return list(services.ledger.events.get(UUID(session["id"])))


def _tool_ids(services: Services, session: dict) -> list[str]:
    detail = queries.get_session(services.models, session["id"])
    assert detail is not None
    return sorted(c["tool_use_id"] for c in detail["tool_calls"] if c["start_position"])


# -- Claude stream-json --------------------------------------------------------------------


def _stream_json_expected(records: list[dict]) -> dict:
    tool_ids = sorted(
        b["id"]
        for r in records
        if r.get("type") == "assistant"
        for b in r["message"]["content"]
        if b.get("type") == "tool_use"
    )
    errors = sum(
        1
        for r in records
        if r.get("type") == "user"
        for b in r["message"]["content"]
        if b.get("type") == "tool_result" and b.get("is_error") is True
    )
    results = [r for r in records if r.get("type") == "result" and "usage" in r]
    if results:
        tokens = {t: sum(r["usage"].get(t, 0) for r in results) for t in TOKENS}
    else:
        last: dict[str, dict] = {}
        for r in records:
            if r.get("type") == "assistant" and "usage" in r["message"]:
                last[r["message"]["id"]] = r["message"]["usage"]
        tokens = {t: sum(u.get(t, 0) for u in last.values()) for t in TOKENS}
    cost = sum(r.get("total_cost_usd", 0) for r in records if r.get("type") == "result")
    return {"tool_ids": tool_ids, "errors": errors, "tokens": tokens, "cost": cost}


@pytest.mark.parametrize("path", STREAM_JSON, ids=lambda p: p.name)
def test_stream_json_matches_independent_count(services: Services, path: Path) -> None:
    records = _records(path)
    want = _stream_json_expected(records)
    session = _import_one(services, path)
    assert session["agent"] == "claude-code"
    assert session["external_id"] == next(r["session_id"] for r in records if "session_id" in r)
    assert session["prompt_count"] == 0  # -p streams carry no prompt (the runner adds it)
    assert _tool_ids(services, session) == want["tool_ids"]
    assert session["tool_error_count"] == want["errors"]
    assert _tokens(session) == want["tokens"]
    events = _events(services, session)
    costs = [e.cost_usd for e in events if type(e).__name__ == "CostReported"]
    assert sum(costs) == pytest.approx(want["cost"])
    # every record kept: one event per record carries it raw
    assert sum(1 for e in events if e.raw is not None) == len(records)
    results = [r for r in records if r.get("type") == "result"]
    if results:
        assert session["status"] == ("FAILED" if results[-1].get("is_error") else "COMPLETED")


# -- Codex exec --json ---------------------------------------------------------------------


@pytest.mark.parametrize("path", CODEX_EXEC, ids=lambda p: p.name)
def test_codex_exec_matches_independent_count(services: Services, path: Path) -> None:
    records = _records(path)
    tool_items = {
        r["item"]["id"]
        for r in records
        if r["type"].startswith("item.") and r["item"]["type"] in TOOL_ITEMS
    }
    # turn.completed carries the thread's running total: the last one is the session's
    # (each fixture has one turn, so this equals the sum the test used to take)
    usage = [r["usage"] for r in records if r["type"] == "turn.completed"][-1:]
    want = _exec_tokens(usage[0] if usage else {})
    session = _import_one(services, path)
    assert session["agent"] == "codex"
    assert session["external_id"] == records[0]["thread_id"]
    assert session["prompt_count"] == 0
    assert session["tool_call_count"] == len(tool_items)
    assert _tokens(session) == want
    # Codex's own total (input incl. cached + output) is kept
    assert sum(want.values()) == sum(u["input_tokens"] + u["output_tokens"] for u in usage)
    events = _events(services, session)
    assert sum(1 for e in events if e.raw is not None) == len(records)
    assert session["status"] == ("COMPLETED" if usage else "ACTIVE")


def _exec_tokens(usage: dict) -> dict[str, int]:
    """A Codex usage object in the ledger's convention (input without cache reads)."""
    return {
        "input_tokens": usage.get("input_tokens", 0) - usage.get("cached_input_tokens", 0),
        "output_tokens": usage.get("output_tokens", 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.get("cached_input_tokens", 0),
    }


def test_codex_exec_resume_counts_the_thread_total_once(
    services: Services, tmp_path: Path
) -> None:
    # Review finding: each turn.completed was recorded whole, so the resumed process
    # counted turn 1's tokens again (input 1048 + 3,960 + 1048 instead of 5,008).
    first, second, total = resumed_exec_turn(tmp_path)
    import_paths(services.ledger, [first])
    import_paths(services.ledger, [second])
    services.runner.catch_up()
    (session,) = queries.list_sessions(services.models, agent="codex")
    assert _tokens(session) == _exec_tokens(total)
    # idempotent: importing either process again appends nothing
    assert import_paths(services.ledger, [first, second]).result.appended == 0


def test_codex_exec_turns_of_one_process_are_a_running_total(
    services: Services, tmp_path: Path
) -> None:
    # One process with two turns (the real stream-output-2, then stream-output-3's turn
    # appended with the running total, its item ids numbered on as one process does):
    # tokens = the last total; a repeated total adds nothing.
    first, second, total = resumed_exec_turn(tmp_path)
    turn2 = []
    for r in _records(second)[1:]:
        if "item" in r:
            r["item"]["id"] = f"item_{100 + int(r['item']['id'].removeprefix('item_'))}"
        turn2.append(json.dumps(r))
    repeat = json.dumps({"type": "turn.completed", "usage": total})
    both = tmp_path / "two-turns.jsonl"
    both.write_text("\n".join([*first.read_text().splitlines(), *turn2, repeat]) + "\n")
    session = _import_one(services, both)
    assert _tokens(session) == _exec_tokens(total)
    events = _events(services, session)
    assert [type(e).__name__ for e in events].count("UsageRecorded") == 2
    assert sum(1 for e in events if e.raw is not None) == len(_records(both))


def test_codex_exec_tool_calls_carry_exit_codes(services: Services) -> None:
    path = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    done = [r["item"] for r in _records(path) if r["type"] == "item.completed"]
    (cmd,) = [i for i in done if i["type"] == "command_execution"]
    session = _import_one(services, path)
    detail = queries.get_session(services.models, session["id"])
    (call,) = detail["tool_calls"]
    assert call["tool_name"] == "shell"
    assert call["output"]["exit_code"] == cmd["exit_code"]
    assert call["output"]["aggregated_output"] == cmd["aggregated_output"]
    assert bool(call["is_error"]) is (cmd["exit_code"] != 0)


# -- Codex rollouts ------------------------------------------------------------------------


def _rollout_expected(records: list[dict]) -> dict:
    prompts = [
        r["payload"]["message"]
        for r in records
        if r.get("type") == "event_msg" and r["payload"].get("type") == "user_message"
    ]
    calls = {
        r["payload"]["call_id"]
        for r in records
        if r.get("type") == "response_item"
        and r["payload"].get("type") in ("function_call", "custom_tool_call")
    }
    totals = [
        r["payload"]["info"]["total_token_usage"]
        for r in records
        if r.get("type") == "event_msg"
        and r["payload"].get("type") == "token_count"
        and isinstance(r["payload"].get("info"), dict)
    ]
    last = totals[-1]
    tokens = {
        "input_tokens": last["input_tokens"] - last["cached_input_tokens"],
        "output_tokens": last["output_tokens"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": last["cached_input_tokens"],
    }
    return {
        "prompts": prompts,
        "calls": sorted(calls),
        "tokens": tokens,
        "total": last["total_tokens"],
    }


@pytest.mark.parametrize("path", ROLLOUTS, ids=lambda p: p.name)
def test_rollout_matches_independent_count(services: Services, path: Path) -> None:
    records = _records(path)
    want = _rollout_expected(records)
    session = _import_one(services, path)
    assert session["agent"] == "codex"
    assert session["external_id"] == records[0]["payload"]["id"]
    detail = queries.get_session(services.models, session["id"])
    assert [b["prompt"] for b in detail["batches"]] == want["prompts"]
    assert session["prompt_count"] == len(want["prompts"])
    assert _tool_ids(services, session) == want["calls"]
    assert _tokens(session) == want["tokens"]
    assert sum(want["tokens"].values()) == want["total"]  # Codex's own total_tokens
    events = _events(services, session)
    assert sum(1 for e in events if e.raw is not None) == len(records)
    kept = {e.record_type for e in events if type(e).__name__ == "RecordObserved"}
    assert "turn_context" in kept or path.name.startswith("codex_053")


def test_repeated_token_count_snapshots_add_nothing(services: Services, tmp_path: Path) -> None:
    # ccusage#1288: Codex re-emits token_count with an unchanged total. Write every
    # token_count line of a real rollout twice (a second later) and import: same tokens.
    src = FIXTURES / "agentcmd-codex-rollouts" / ROLLOUTS[1].name
    lines = []
    for line in src.read_text().splitlines():
        lines.append(line)
        r = json.loads(line)
        if r["type"] == "event_msg" and r["payload"].get("type") == "token_count":
            r["timestamp"] = r["timestamp"].replace("Z", "1Z")
            lines.append(json.dumps(r))
    doubled = tmp_path / src.name
    doubled.write_text("\n".join(lines) + "\n")
    want = _rollout_expected(_records(src))
    session = _import_one(services, doubled)
    assert _tokens(session) == want["tokens"]
    # the repeated snapshots are kept as records, not dropped
    events = _events(services, session)
    assert sum(1 for e in events if e.raw is not None) == len(lines)


PARENT_ROLLOUT = (
    FIXTURES
    / "agentcmd-codex-rollouts"
    / "rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl"
)
FORK_ID = "019a0000-0000-7000-8000-00000000f0e1"


def _uuid7(at: datetime) -> str:
    """A UUIDv7 minted at ``at`` (what Codex's turn ids are)."""
    ms = int(at.timestamp() * 1000)
    return str(UUID(int=(ms << 80) | (0x7 << 76) | (0b10 << 62) | 1))


def _fork_of(parent: Path, folder: Path, *, restamp: bool = False) -> tuple[Path, dict]:
    """A fork of a real rollout, as Codex writes one (``InitialHistory::Forked``): the
    fork's ``session_meta`` naming the parent (``forked_from_id``), every line of the
    parent copied as it was (its ``session_meta`` first), then the fork's own turn: a
    ``turn_context``, a prompt and a ``token_count`` whose cumulative total continues the
    parent's last (+ 20,000 input of which 15,000 cached, + 300 output).

    ``restamp``: as current Codex writes it (0.146 fixture): the copied lines timestamped
    at the fork instant, and every turn opening with a ``turn_context`` that carries a
    ``turn_id`` (a UUIDv7 of when the turn ran: the parent's turns from their own time)
    before its ``user_message``. Returns the file and the parent's last total."""
    forked = datetime(2025, 9, 26, 10, 0, tzinfo=UTC)
    stamp = forked.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    meta = {"id": FORK_ID, "forked_from_id": _records(parent)[0]["payload"]["id"]}
    meta |= {"timestamp": stamp, "cwd": "/x", "originator": "codex_cli_rs"}
    lines = [{"timestamp": stamp, "type": "session_meta", "payload": meta}]
    last = None
    parent_records = _records(parent)
    if restamp:  # 0.40 writes a turn's user_message before its turn_context
        for i in range(len(parent_records) - 1):
            pair = parent_records[i : i + 2]
            if pair[0]["payload"].get("type") == "user_message" and pair[1]["type"] == "turn_context":
                parent_records[i : i + 2] = pair[::-1]
    for r in parent_records:
        if restamp:
            if r["type"] == "turn_context":
                ran = datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00"))
                r["payload"]["turn_id"] = _uuid7(ran)
            r["timestamp"] = stamp.replace("00.000Z", "00.004Z")
        if r["payload"].get("type") == "token_count" and r["payload"].get("info"):
            last = r["payload"]["info"]["total_token_usage"]
        lines.append(r)
    assert last is not None
    own_at = forked + timedelta(seconds=5)
    own_stamp = own_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    total = dict(last)
    total["input_tokens"] += 20_000
    total["cached_input_tokens"] += 15_000
    total["output_tokens"] += 300
    total["total_tokens"] += 20_300
    context: dict = {"cwd": "/x", "model": "gpt-5-codex"}
    if restamp:
        context["turn_id"] = _uuid7(own_at)
    own = [
        {"type": "turn_context", "payload": context},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "now differently"}},
        {"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": total}}},
    ]
    lines += [{"timestamp": own_stamp, **r} for r in own]
    path = folder / f"rollout-2025-09-26T10-00-00-{FORK_ID}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path, last


@pytest.mark.parametrize("restamp", [False, True], ids=["original-times", "restamped-turn-ids"])
def test_forked_rollout_counts_only_its_own_turns(
    services: Services, tmp_path: Path, restamp: bool
) -> None:
    # Review finding: a fork's copy of its parent's history was taken as the fork's own:
    # 3 prompts, 16 tool calls and the parent's 149,449 input tokens again.
    fork, _ = _fork_of(PARENT_ROLLOUT, tmp_path, restamp=restamp)
    import_paths(services.ledger, [PARENT_ROLLOUT, fork])
    services.runner.catch_up()
    sessions = {s["external_id"]: s for s in queries.list_sessions(services.models, agent="codex")}
    parent = sessions[_records(PARENT_ROLLOUT)[0]["payload"]["id"]]
    child = sessions[FORK_ID]
    # the parent is what it was alone
    want = _rollout_expected(_records(PARENT_ROLLOUT))
    assert parent["prompt_count"] == len(want["prompts"])
    assert _tokens(parent) == want["tokens"]
    # the fork: its own prompt, no tool call, the tokens of its own turn only
    assert child["parent_id"] == parent["id"]
    assert child["prompt_count"] == 1 and child["tool_call_count"] == 0
    detail = queries.get_session(services.models, child["id"])
    assert [b["prompt"] for b in detail["batches"]] == ["now differently"]
    assert _tokens(child) == {
        "input_tokens": 5_000,
        "output_tokens": 300,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 15_000,
    }
    # nothing dropped: every copied line is kept, as a record of the copy
    events = _events(services, child)
    assert sum(1 for e in events if e.raw is not None) == len(_records(fork))
    copied = [e for e in events if getattr(e, "record_type", "").startswith("copied:")]
    assert len(copied) == len(_records(PARENT_ROLLOUT))
    assert import_paths(services.ledger, [fork]).result.appended == 0


def test_a_turn_id_beyond_what_a_datetime_holds_does_not_stop_the_rollout(tmp_path: Path) -> None:
    # Review finding: a UUIDv7 turn id whose time is past year 9999 raised ValueError
    # from datetime.fromtimestamp, and the import skipped the rest of the file.
    fork, _ = _fork_of(PARENT_ROLLOUT, tmp_path, restamp=True)
    records = _records(fork)
    copied = next(r for r in records[1:] if r["type"] == "turn_context")
    copied["payload"]["turn_id"] = "ffffffff-ffff-7fff-bfff-ffffffffffff"
    fork.write_text("".join(json.dumps(r) + "\n" for r in records))
    parsed = parse_one(fork)
    assert parsed.skipped is None
    prompts = [f for f in parsed.facts if isinstance(f, Observation) and f.kind == "PromptSubmitted"]
    assert [p.data["text"] for p in prompts][-1:] == ["now differently"]


def test_fork_without_a_copied_history_counts_everything(
    services: Services, tmp_path: Path
) -> None:
    # A rollout naming a parent but holding no copy of it (no parent session_meta before
    # its first turn): every turn is its own.
    lines = PARENT_ROLLOUT.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["payload"]["forked_from_id"] = "019a0000-0000-7000-8000-0000000000aa"
    path = tmp_path / PARENT_ROLLOUT.name
    path.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    want = _rollout_expected(_records(PARENT_ROLLOUT))
    import_paths(services.ledger, [path])
    services.runner.catch_up()
    (session,) = [
        s for s in queries.list_sessions(services.models, agent="codex") if s["parent_id"]
    ]
    assert session["prompt_count"] == len(want["prompts"])
    assert _tokens(session) == want["tokens"]
    assert _tool_ids(services, session) == want["calls"]


def _subagent_rollout(folder: Path, parent_id: str) -> Path:
    """A subagent's rollout as Codex 0.9x-0.145 writes one (FORMATS.md A6, C8, C12): the
    parent named only in ``source.subagent.thread_spawn`` (no top-level
    ``parent_thread_id``/``forked_from_id``), no copy of the parent's history, and
    ``token_count`` re-emitted with an unchanged total, once with ``info: null``, with
    nested and with flat ``rate_limits``."""
    child = "019b0000-0000-7000-8000-00000000c0de"

    def count(inp: int, cached: int, out: int, *, flat: bool = False) -> dict:
        total = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
                 "reasoning_output_tokens": out // 5, "total_tokens": inp + out}
        limits = ({"primary_used_percent": 12.0, "primary_window_minutes": 300} if flat
                  else {"primary": {"used_percent": 12.0, "window_minutes": 300}})
        return {"type": "token_count", "rate_limits": limits,
                "info": {"total_token_usage": total, "last_token_usage": total}}

    def call(call_id: str, command: str, exit_code: int) -> list[tuple[str, dict]]:
        output = {"output": "", "metadata": {"exit_code": exit_code, "duration_seconds": 0.1}}
        return [
            ("response_item", {"type": "function_call", "name": "shell", "call_id": call_id,
                               "arguments": json.dumps({"command": [command]})}),
            ("response_item", {"type": "function_call_output", "call_id": call_id,
                               "output": json.dumps(output)}),
        ]

    spawn = {"thread_spawn": {"parent_thread_id": parent_id, "depth": 1, "agent_role": "explorer"}}
    records = [
        ("session_meta", {"id": child, "timestamp": "2026-03-01T10:00:00.000Z", "cwd": "/w",
                          "originator": "codex_cli_rs", "cli_version": "0.98.0",
                          "source": {"subagent": spawn}}),
        ("turn_context", {"cwd": "/w", "model": "gpt-5.2-codex"}),
        ("event_msg", {"type": "user_message", "message": "look at the tests", "kind": "plain"}),
        ("event_msg", {"type": "token_count", "info": None, "rate_limits": {}}),
        *call("call_a", "ls", 0),
        ("event_msg", count(1000, 200, 50)),
        ("event_msg", count(1000, 200, 50)),
        ("event_msg", count(1000, 200, 50, flat=True)),
        *call("call_b", "false", 1),
        ("event_msg", count(2500, 1200, 90)),
        ("event_msg", count(2500, 1200, 90, flat=True)),
        ("event_msg", {"type": "task_complete", "last_agent_message": "done"}),
    ]
    path = folder / f"rollout-2026-03-01T10-00-00-{child}.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": f"2026-03-01T10:00:{i:02d}.000Z", "type": t, "payload": p}) + "\n"
        for i, (t, p) in enumerate(records)
    ))
    return path


def test_subagent_rollout_names_its_parent_and_counts_once(
    services: Services, tmp_path: Path
) -> None:
    # Review finding: a subagent's rollout that names its parent only in
    # session_meta.source.subagent.thread_spawn (Codex before parent_thread_id) was
    # imported as a root session: `sessions --json` gave parent_id null.
    parent_id = _records(PARENT_ROLLOUT)[0]["payload"]["id"]
    path = _subagent_rollout(tmp_path, parent_id)
    records = _records(path)
    import_paths(services.ledger, [PARENT_ROLLOUT, path])
    services.runner.catch_up()
    sessions = {s["external_id"]: s for s in queries.list_sessions(services.models, agent="codex")}
    child = sessions[records[0]["payload"]["id"]]
    assert child["parent_id"] == sessions[parent_id]["id"]
    want = _rollout_expected(records)
    assert [b["prompt"] for b in queries.get_session(services.models, child["id"])["batches"]] == (
        want["prompts"]
    )
    assert _tool_ids(services, child) == want["calls"] == ["call_a", "call_b"]
    assert child["tool_error_count"] == 1  # call_b exited 1
    assert _tokens(child) == want["tokens"]  # the last total, not the sum of the repeats
    assert sum(want["tokens"].values()) == want["total"]
    assert sum(1 for e in _events(services, child) if e.raw is not None) == len(records)
    # the parent is what it was alone
    alone = _rollout_expected(_records(PARENT_ROLLOUT))
    assert _tokens(sessions[parent_id]) == alone["tokens"]


def test_newer_rollout_calls_fail_as_their_end_events_say(services: Services, tmp_path: Path) -> None:
    # Review finding: Codex 0.146 gives the model a call's output as text / content
    # items with no exit code (codex_rollout_small_0.146.jsonl); whether the call failed
    # is in the event_msg that ends it: exec_command_end.exit_code,
    # patch_apply_end.success, mcp_tool_call_end.result {Err} / {Ok: {isError}}. A
    # rollout with a failed command, a failed patch and a failed MCP call showed
    # tool_error_count 0 in `sessions --json`. Shapes from that fixture's records.
    sid = "019fc8be-3658-7ca3-9e29-00000000e7d0"

    def text(t: str) -> dict:
        return {"type": "input_text", "text": t}

    def call(cid: str, ptype: str, name: str, args: str, end: dict, output: object) -> list[dict]:
        item = {"type": ptype, "call_id": cid, "name": name,
                ("input" if ptype == "custom_tool_call" else "arguments"): args}
        out = {"type": f"{ptype}_output", "call_id": cid, "output": output}
        return [{"type": "response_item", "payload": item},
                {"type": "event_msg", "payload": {"call_id": cid, **end}},
                {"type": "response_item", "payload": out}]

    records = [
        {"type": "session_meta", "payload": {"id": sid, "cwd": "/tmp/repo", "cli_version": "0.146.0"}},
        {"type": "turn_context", "payload": {"cwd": "/tmp/repo", "model": "gpt-5.6"}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "fix it"}},
        *call("call-1", "function_call", "exec_command", '{"cmd":"ls"}',
              {"type": "exec_command_end", "exit_code": 0}, text("a.txt\n")),
        *call("call-2", "function_call", "exec_command", '{"cmd":"pytest"}',
              {"type": "exec_command_end", "exit_code": 1}, text("1 failed\n")),
        *call("call-3", "custom_tool_call", "apply_patch", "*** Begin Patch",
              {"type": "patch_apply_end", "success": False, "status": "failed"}, [text("no match")]),
        *call("call-4", "function_call", "example__tool", "{}",
              {"type": "mcp_tool_call_end", "result": {"Err": "tool call failed: timeout"}},
              [text("tool call failed: timeout")]),
        *call("call-5", "function_call", "example__tool", "{}",
              {"type": "mcp_tool_call_end", "result": {"Ok": {"content": [], "isError": True}}}, []),
        *call("call-6", "function_call", "example__tool", "{}",
              {"type": "mcp_tool_call_end", "result": {"Ok": {"content": [], "isError": False}}}, []),
        {"type": "event_msg", "payload": {"type": "task_complete"}},
    ]
    path = tmp_path / f"rollout-2026-08-03T10-48-56-{sid}.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": f"2026-08-03T10:48:{i:02d}.000Z", **r}) + "\n"
        for i, r in enumerate(records)
    ))
    # independent count from the end events
    ends = [r["payload"] for r in records if r["payload"].get("type", "").endswith("_end")]
    failed = {
        e["call_id"] for e in ends
        if e.get("exit_code", 0) != 0 or e.get("success") is False
        or "Err" in e.get("result", {}) or e.get("result", {}).get("Ok", {}).get("isError")
    }
    assert failed == {"call-2", "call-3", "call-4", "call-5"}
    session = _import_one(services, path)
    assert session["tool_call_count"] == len(ends) == 6
    assert session["tool_error_count"] == len(failed)
    calls = queries.get_session(services.models, session["id"])["tool_calls"]
    assert {c["tool_use_id"] for c in calls if c["is_error"]} == failed
    assert sum(1 for e in _events(services, session) if e.raw is not None) == len(records)


def test_rollout_schema_drift_files_import(services: Services) -> None:
    folder = FIXTURES / "agent-sessions-schema-drift"
    paths = sorted(folder.glob("codex_*.jsonl"))
    summary = import_paths(services.ledger, paths)
    assert summary.files == len(paths) and not summary.skipped
    services.runner.catch_up()
    sessions = {s["external_id"]: s for s in queries.list_sessions(services.models, agent="codex")}
    # 0.51: per-turn usage in legacy turn.completed records (no cumulative token_count)
    usage = [
        r["payload"]["usage"]
        for r in _records(folder / "codex_051_usage.jsonl")
        if "usage" in r["payload"]
    ]
    assert sessions["test-usage-session"]["cache_read_input_tokens"] == sum(
        u["cached_input_tokens"] for u in usage
    )
    assert sessions["test-usage-session"]["output_tokens"] == sum(u["output_tokens"] for u in usage)
    # 0.50: legacy {prompt, completion} info is not a usage we can trust: kept, not counted
    assert _tokens(sessions["test-legacy-session"]) == dict.fromkeys(TOKENS, 0)
    # the file with no session_meta keeps every line, as rejected input with the reason
    drift_lines = (folder / "codex_rollout_schema_drift.jsonl").read_text().splitlines()
    rejected_before = summary.result.rejected
    assert rejected_before == sum(1 for line in drift_lines if line.strip())


def test_reimport_appends_nothing(services: Services) -> None:
    paths = [*STREAM_JSON, *CODEX_EXEC, *ROLLOUTS]
    first = import_paths(services.ledger, paths)
    assert first.result.appended > 0 and not first.skipped
    second = import_paths(services.ledger, paths)
    assert second.result.appended == 0
    assert second.result.duplicates > 0


def test_single_record_extracts_are_kept_as_rejected_with_a_reason(services: Services) -> None:
    # Upstream extracted single rollout lines (no session_meta, no thread id in the name).
    paths = [
        FIXTURES / "agentcmd-codex-rollouts" / n
        for n in ("event-turn-aborted.jsonl", "function-output-error.jsonl")
    ]
    summary = import_paths(services.ledger, paths)
    assert summary.files == 2 and summary.result.rejected == 2


def test_stream_json_keeps_unknown_records_and_files_subagent_records_under_a_child(
    services: Services, tmp_path: Path
) -> None:
    # The real create_file stream with two records added: a rate_limit_event (FORMATS.md A4)
    # and its tool_use echoed as a subagent record (parent_tool_use_id set).
    src = FIXTURES / "claude_code-elixir-stream-json" / "create_file.jsonl"
    records = _records(src)
    sid = records[0]["session_id"]
    parent_call = next(
        b["id"]
        for r in records
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "tool_use"
    )
    limit = {
        "type": "rate_limit_event",
        "rate_limit_info": {"status": "allowed"},
        "session_id": sid,
    }
    child = json.loads(json.dumps(records[1]))
    child["parent_tool_use_id"] = parent_call
    child["message"]["id"] = "msg_child"
    path = tmp_path / "with_extras.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in [*records[:-1], limit, child, records[-1]]) + "\n"
    )
    summary = import_paths(services.ledger, [path])
    assert not summary.skipped and summary.result.rejected == 0
    services.runner.catch_up()
    sessions = {s["external_id"]: s for s in queries.list_sessions(services.models)}
    kid = sessions[f"{sid}/task-{parent_call}"]
    assert kid["parent_id"] == sessions[sid]["id"] and kid["parent_tool_use_id"] == parent_call
    kinds = [
        (type(e).__name__, getattr(e, "record_type", None))
        for e in _events(services, sessions[sid])
    ]
    assert ("RecordObserved", "rate_limit_event") in kinds
    assert ("SubagentLinked", None) in kinds


def test_show_lists_tool_calls_made_outside_any_prompt_batch(settings: Settings) -> None:
    # a `claude -p` stream-json run records no prompt: its tool calls are in no batch,
    # and `show` must still list them
    stream = FIXTURES / "claude-code-action-stream-json" / "sample-turns.json"
    cli(settings, "import", str(stream))
    detail = json.loads(cli(settings, "show", "sample-session-id", "--json").stdout)
    assert detail["tool_calls"] and not detail["batches"]
    shown = cli(settings, "show", "sample-session-id").stdout.decode()
    assert "outside any prompt batch" in shown
    for call in detail["tool_calls"]:
        assert call["tool_name"] in shown
