"""Real Claude Code transcripts in, correct sessions out — file by file.

Every transcript fixture is imported into a fresh store; each session's human prompts,
distinct tool calls and token totals (deduplicated by ``message.id``, last record wins)
must equal the independent oracle in ``tests/oracle.py``, and the token totals must
equal ccusage's (recorded in ``tests/data/ccusage_expected.json``; re-run live when the
ccusage binary is installed) except where ccusage is known to skip usage (documented
in ``tests/data/CCUSAGE_NOTES.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from api.bootstrap import Services, build
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.parsing import HEAD_BYTES
from projections import queries

import ccusage_ref
import oracle
from conftest import FIXTURES, cli

TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
# ccusage reads usage only from lines containing exactly '"usage":{' — these synthetic
# files write '"usage": {' with a space (see tests/data/CCUSAGE_NOTES.md); ours counts them.
CCUSAGE_SKIPS_SPACED_USAGE = {
    "claude-code-log-fixtures/edge_cases.SYNTHETIC_malformed.jsonl",
    "claude-code-log-fixtures/representative_messages.jsonl",
}


def _import(services: Services, *paths: Path) -> dict[str, dict]:
    summary = import_paths(services.ledger, paths)
    assert summary.files == len(paths), summary.skipped
    services.runner.catch_up()
    return {r["external_id"]: r for r in queries.list_sessions(services.models)}


def _prompts(services: Services, session_id: str) -> list[str]:
    detail = queries.get_session(services.models, session_id)
    assert detail is not None
    return [b["prompt"] for b in detail["batches"]]


@pytest.mark.parametrize("relpath", oracle.TRANSCRIPT_FILES)
def test_transcript_matches_independent_count(services: Services, relpath: str) -> None:
    expected = oracle.count_transcript(FIXTURES / relpath)
    rejected = expected.pop("__rejected__")
    sessions = _import(services, FIXTURES / relpath)

    for key, want in expected.items():
        got = sessions[key]
        assert got["prompt_count"] == want["prompt_count"], key
        assert _prompts(services, got["id"]) == want["prompts"], key
        assert got["tool_call_count"] == want["tool_call_count"], key
        detail = queries.get_session(services.models, got["id"])
        assert sorted(c["tool_use_id"] for c in detail["tool_calls"] if c["start_position"]) == want["tool_call_ids"]
        for t in TOKENS:
            assert got[t] == want[t], (key, t)
    # Sessions the oracle does not know are children known only by their link
    # (a Task result names a subagent whose transcript is not in this file).
    for key, got in sessions.items():
        if key not in expected:
            assert got["parent_id"] is not None and got["prompt_count"] == 0, key
    assert queries.stats(services.models)["rejected"] == rejected


@pytest.mark.parametrize("relpath", sorted(k for k in ccusage_ref.load_recorded() if k != "_meta"))
def test_token_totals_match_ccusage(services: Services, relpath: str) -> None:
    recorded = ccusage_ref.load_recorded()[relpath]
    path = FIXTURES / relpath
    subagents = path.with_suffix("") / "subagents"
    paths = [path, subagents] if path.suffix == ".jsonl" and subagents.is_dir() else [path]
    summary = import_paths(services.ledger, paths)
    assert not summary.skipped
    services.runner.catch_up()
    ours = {t: sum(s[t] for s in queries.list_sessions(services.models)) for t in TOKENS}
    if relpath in CCUSAGE_SKIPS_SPACED_USAGE:
        # Documented difference: we count every usage record; ccusage counts fewer.
        assert all(ours[t] >= sum(v[t] for v in recorded.values()) for t in TOKENS)
        assert ours != {t: sum(v[t] for v in recorded.values()) for t in TOKENS}
        return
    # ccusage reports a session (file stem) including its subagents' files.
    assert ours == {t: sum(v[t] for v in recorded.values()) for t in TOKENS}


def test_ccusage_live_agrees_with_recorded(tmp_path: Path) -> None:
    live = ccusage_ref.run_ccusage(FIXTURES, tmp_path)
    if live is None:
        pytest.skip("ccusage binary not installed (bash tests/tools/install_ccusage.sh)")
    recorded = {k: v for k, v in ccusage_ref.load_recorded().items() if k != "_meta"}
    assert live == recorded


def test_second_import_appends_nothing(services: Services) -> None:
    first = import_paths(services.ledger, [FIXTURES / "spotter-claude-transcripts"])
    assert first.result.appended > 0
    second = import_paths(services.ledger, [FIXTURES / "spotter-claude-transcripts"])
    assert second.result.appended == 0
    assert second.result.duplicates > 0


def test_json_array_transcript_equals_its_jsonl_form(services: Services, tmp_path: Path) -> None:
    import orjson

    src = FIXTURES / "attio-mcp-server-hook-logs" / "chat.json"
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_bytes(b"\n".join(orjson.dumps(r) for r in orjson.loads(src.read_bytes())) + b"\n")
    a = _import(services, src)
    b = import_paths(services.ledger, [jsonl])
    assert b.result.appended == 0  # same records, same keys: nothing new
    assert len(a) >= 1


def test_session_times_come_from_the_source_clock(services: Services) -> None:
    # full-session-five opens with 16 `summary` records that carry no timestamp: the
    # session's times must still be the transcript's, not the moment of the import.
    path = FIXTURES / "agentcmd-claude-transcripts" / "full-session-five.jsonl"
    stamps = sorted(
        r["timestamp"] for r in map(json.loads, path.read_text().splitlines()) if r.get("timestamp")
    )
    (session,) = _import(services, path).values()
    assert session["started_at"][:19] == stamps[0][:19]
    assert session["last_activity_at"][:19] == stamps[-1][:19]


def test_subagent_type_is_read_from_its_meta_json(services: Services) -> None:
    folder = FIXTURES / "agent-sessions-schema-drift" / "claude_subagent"
    summary = import_paths(services.ledger, [folder])
    assert summary.metadata_files == 1 and not summary.skipped
    services.runner.catch_up()
    children = [s for s in queries.list_sessions(services.models) if s["parent_id"]]
    assert [c["agent_type"] for c in children] == ["general-purpose"]


def test_a_subagent_whose_records_name_only_their_run_is_a_child_of_its_folder(
    services: Services,
) -> None:
    # schema drift: the subagent's records give sessionId "agent-<agentId>", not the
    # parent's id; the parent is the session whose <id>/subagents/ folder holds the file
    folder = FIXTURES / "agent-sessions-schema-drift" / "claude_subagent"
    parent_sid = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"
    child_file = folder / parent_sid / "subagents" / "agent-a0ad4f44468bdf20d.jsonl"
    assert all(
        json.loads(line)["sessionId"] == "agent-a0ad4f44468bdf20d"
        for line in child_file.read_text().splitlines()
    )
    import_paths(services.ledger, [folder])
    services.runner.catch_up()
    sessions = {r["external_id"]: r for r in queries.list_sessions(services.models)}
    assert set(sessions) == {parent_sid, f"{parent_sid}/agent-a0ad4f44468bdf20d"}
    parent, child = sessions[parent_sid], sessions[f"{parent_sid}/agent-a0ad4f44468bdf20d"]
    assert child["parent_id"] == parent["id"]
    detail = queries.get_session(services.models, child["id"])
    assert detail is not None and detail["parent"] is not None
    assert detail["parent"]["external_id"] == parent_sid
    assert queries.get_session(services.models, parent["id"])["children"] == [child["id"]]


SPOTTER_PARENT = FIXTURES / "spotter-claude-transcripts" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
SPOTTER_CHILD = SPOTTER_PARENT.with_suffix("") / "subagents" / "agent-a881341.jsonl"
TASK_CALL = "toolu_01VmaERAwhb19LGUwu9GenaK"
"""The parent's Task call whose input names ``subagent_type: claude-code-guide``; the
subagent's own records (CC 2.1.39, no ``.meta.json``) name no type."""


def _log_positions(services: Services, *event_keys: str) -> dict[str, int]:
    t = services.models.table("event_index")
    with services.models.engine.connect() as c:
        rows = c.execute(select(t.c.event_key, t.c.position).where(t.c.event_key.in_(event_keys)))
        return {key: position for key, position in rows}


@pytest.mark.parametrize("first", ["parent", "subagent"])
def test_a_subagent_with_no_type_of_its_own_takes_its_task_calls(
    services: Services, first: str
) -> None:
    files = [SPOTTER_PARENT, SPOTTER_CHILD]
    sessions = _import(services, *(files if first == "parent" else files[::-1]))
    # either may come first in the log: the Task call, or the subagent's link to it
    pos = _log_positions(services, f"tool:{TASK_CALL}:start", f"parent:{TASK_CALL}")
    call_first = pos[f"tool:{TASK_CALL}:start"] < pos[f"parent:{TASK_CALL}"]
    assert call_first == (first == "parent")
    child = sessions[f"{SPOTTER_PARENT.stem}/agent-a881341"]
    assert child["parent_tool_use_id"] == TASK_CALL
    assert child["agent_type"] == "claude-code-guide"
    assert sessions[SPOTTER_PARENT.stem]["agent_type"] is None
    # derived, so a rebuild of the read model gives it again
    services.runner.rebuild("sessions")
    again = queries.get_session(services.models, child["id"])
    assert again is not None and again["agent_type"] == "claude-code-guide"


def test_every_spotter_subagent_has_its_type(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER_PARENT.parent])
    services.runner.catch_up()
    sessions = {r["external_id"]: r for r in queries.list_sessions(services.models)}
    types = {ref.split("/", 1)[1]: s["agent_type"] for ref, s in sessions.items() if "/" in ref}
    # two Task calls (subagent_type claude-code-guide, Plan); the compaction run is
    # typed by its agent id, and has no Task call
    assert types == {"agent-a881341": "claude-code-guide", "agent-afb92ff": "Plan",
                     "agent-acompact-fffbd0": "compact"}
    assert {s["agent_type"] for ref, s in sessions.items() if "/" not in ref} == {None}


def test_a_subagents_own_type_wins_over_its_task_calls(
    services: Services, tmp_path: Path
) -> None:
    parent = tmp_path / SPOTTER_PARENT.name
    parent.write_bytes(SPOTTER_PARENT.read_bytes())
    child = tmp_path / SPOTTER_CHILD.relative_to(SPOTTER_PARENT.parent)
    child.parent.mkdir(parents=True)
    child.write_bytes(SPOTTER_CHILD.read_bytes())
    child.with_name("agent-a881341.meta.json").write_text('{"agentType": "reviewer"}')
    for files in ([child], [parent]):  # the subagent first: its type is in its Opened
        sessions = _import(services, *files)
    assert sessions[f"{parent.stem}/agent-a881341"]["agent_type"] == "reviewer"


def test_non_transcript_json_arrays_are_skipped_with_a_reason_not_rejected(
    services: Services, tmp_path: Path
) -> None:
    # (stream-json arrays such as claude-code-action-stream-json are imported: test_agent_streams)
    (tmp_path / "records.json").write_text('[{"type": "note", "id": 1}, {"type": "note", "id": 2}]')
    summary = import_paths(services.ledger, [tmp_path / "records.json"])
    assert summary.files == 0 and summary.result.rejected == 0
    assert [reason for _, reason in summary.skipped] == ["a JSON array that is not a Claude Code transcript"]


def test_files_whose_first_records_are_over_a_mib_are_recognised(
    services: Services, tmp_path: Path
) -> None:
    # A first prompt with a pasted screenshot: one JSONL line larger than the part of a
    # file format detection used to read (1 MiB) hid the whole transcript ("not a
    # recognised agent transcript").
    original = FIXTURES / "agentcmd-claude-transcripts" / "user-image.jsonl"
    image = b"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    assert original.read_bytes().count(image) == 1
    big = tmp_path / "user-image.jsonl"
    big.write_bytes(original.read_bytes().replace(image, b"A" * (HEAD_BYTES + 4096)))
    # A stream-json array larger than that part was cut before parsing, then skipped.
    stream = FIXTURES / "claude-code-action-stream-json" / "sample-turns.json"
    records = json.loads(stream.read_text())
    records[0]["padding"] = "x" * (HEAD_BYTES + 4096)
    big_stream = tmp_path / "sample-turns.json"
    big_stream.write_text(json.dumps(records, indent=2))

    sessions = _import(services, big, big_stream)
    assert set(sessions) == {"bb32e6fc-9893-4839-b1de-646fdb1437d1", "sample-session-id"}
    assert sessions["bb32e6fc-9893-4839-b1de-646fdb1437d1"]["prompt_count"] == 1
    assert sessions["sample-session-id"]["tool_call_count"] >= 1


def test_reimport_under_another_spelling_of_the_path_appends_nothing(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a rejected line's quarantine stream is named by its file's path: a relative or
    # non-normalised spelling must name the same stream as the absolute one
    folder = FIXTURES / "claude-code-log-fixtures"
    first = import_paths(services.ledger, [folder])
    assert first.result.rejected > 0
    monkeypatch.chdir(folder.parent)
    again = import_paths(services.ledger, [folder.name, f"./{folder.name}/../{folder.name}"])
    assert again.files == first.files  # each file once
    assert again.result.appended == 0


def test_session_references_resolve_by_unique_prefix(services: Services) -> None:
    parent_ref = "258c7280-ae70-4798-800f-63464d01a85d"
    import_paths(services.ledger, [FIXTURES / "spotter-claude-transcripts"])
    services.runner.catch_up()
    sessions = {r["external_id"]: r for r in queries.list_sessions(services.models)}
    children = [s for ref, s in sessions.items() if ref.startswith(parent_ref + "/")]
    assert len(children) == 2
    models, parent = services.models, sessions[parent_ref]
    # the parent's id prefix also starts its subagents' external ids: the top-level one wins
    assert queries.find_session_id(models, "258c7280") == parent["id"]
    assert queries.find_session_id(models, parent["id"][:8]) == parent["id"]
    assert queries.find_session_id(models, children[0]["external_id"]) == children[0]["id"]
    # two subagents share this prefix, and neither is top-level: ambiguous, both listed
    assert queries.find_session_id(models, parent_ref + "/agent") is None
    listed = queries.sessions_matching(models, parent_ref + "/agent")
    assert sorted(m["id"] for m in listed) == sorted(c["id"] for c in children)
    # LIKE's wildcards are taken literally
    assert queries.find_session_id(models, "%") is None
    assert queries.find_session_id(models, "258c7280_ae70") is None


def test_every_command_taking_a_session_says_when_a_prefix_is_ambiguous(
    settings: Settings, tmp_path: Path
) -> None:
    # `show` listed the sessions an ambiguous prefix matches; `summaries show`,
    # `search --session`, `session <command>` and `export --session` said "no such
    # session" for a prefix that starts two sessions' ids.
    services = build(settings)
    try:
        import_paths(services.ledger, [FIXTURES / "spotter-claude-transcripts"])
        services.runner.catch_up()
        children = sorted(
            r["id"]
            for r in queries.list_sessions(services.models)
            if r["external_id"].startswith("258c7280-ae70-4798-800f-63464d01a85d/agent")
        )
    finally:
        services.close()
    ambiguous = "258c7280-ae70-4798-800f-63464d01a85d/agent"
    for args in (
        ("show", ambiguous),
        ("summaries", "show", ambiguous),
        ("search", "--session", ambiguous, "commit"),
        ("session", "pause", ambiguous),
        ("export", "--format", "jsonl", "--output", str(tmp_path / "out"), "--session", ambiguous),
    ):
        out = cli(settings, *args, check=False)
        assert out.returncode != 0, args
        assert b"no such session" not in out.stderr, (args, out.stderr)
        assert all(c.encode() in out.stderr for c in children), (args, out.stderr)
        unknown = cli(settings, *[a if a != ambiguous else "zzz" for a in args], check=False)
        assert b"no such session: zzz" in unknown.stderr, (args, unknown.stderr)


def test_a_byte_order_mark_before_the_first_line_is_ignored(
    services: Services, tmp_path: Path
) -> None:
    original = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    marked = tmp_path / "short.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + original.read_bytes())
    first = import_paths(services.ledger, [original])
    again = import_paths(services.ledger, [marked])
    assert again.files == 1 and again.result.rejected == 0
    assert again.result.appended == 0  # the same records: nothing new
    assert first.result.appended > 0


@pytest.mark.parametrize(
    "name",
    [
        "coorp-serverless-plugins-hook-logs/4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe/chat.json",
        "agent-sessions-schema-drift/claude_small.jsonl",
    ],
)
def test_a_session_whose_first_records_name_no_cwd_takes_its_first_named_one(
    services: Services, name: str
) -> None:
    # Claude Code 2.x opens a transcript with permission-mode / last-prompt / mode
    # records that carry no cwd: the session had none, and busiest-projects counted its
    # cost under "(unknown)"
    path = FIXTURES / name
    text = path.read_text()
    records = json.loads(text) if path.suffix == ".json" else [
        json.loads(line) for line in text.splitlines() if line.strip()
    ]
    main = [r for r in records if r.get("sessionId") and not r.get("isSidechain")]
    external_id = main[0]["sessionId"]
    assert "cwd" not in main[0]  # the case: the session's first record names none
    expected = next(r["cwd"] for r in main if r.get("cwd"))
    import_paths(services.ledger, [path])
    services.runner.catch_up()
    [session] = [s for s in queries.list_sessions(services.models) if s["external_id"] == external_id]
    assert session["cwd"] == expected


def _record(sid: str, n: int, parent: str | None, rtype: str, message: dict, sidechain: bool = False) -> dict:
    return {
        "parentUuid": parent, "isSidechain": sidechain, "userType": "external", "cwd": "/p",
        "sessionId": sid, "version": "1.0.98", "type": rtype, "message": message,
        "uuid": f"00000000-0000-4000-8000-{n:012d}", "timestamp": f"2025-08-01T10:00:{n:02d}.000Z",
    }


def test_inline_sidechains_with_the_same_task_prompt_link_to_their_own_task_calls(
    services: Services, tmp_path: Path
) -> None:
    # CC 1.0.x writes a Task's subagent inline (isSidechain, its root's parentUuid
    # null, its first prompt the Task's prompt). The same prompt given to two Task calls
    # (a retry) made both sidechains children of the first call.
    sid = "11111111-0000-4000-8000-000000000001"
    prompt = "Review the files in src/ and report"
    records: list[dict] = []

    def add(rtype: str, message: dict, sidechain: bool = False, root: bool = False) -> None:
        parent = None if root else next((r["uuid"] for r in reversed(records) if r["isSidechain"] == sidechain), None)
        records.append(_record(sid, len(records) + 1, parent, rtype, message, sidechain))

    for n, task_id in enumerate(("toolu_task_a", "toolu_task_b")):
        add("user", {"role": "user", "content": f"review the code, take {n}"})
        task = {"type": "tool_use", "id": task_id, "name": "Task", "input": {"description": "review", "prompt": prompt}}
        add("assistant", {"id": f"msg_task_{n}", "role": "assistant", "content": [task]})
        add("user", {"role": "user", "content": prompt}, sidechain=True, root=True)
        add("assistant", {"id": f"msg_side_{n}", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}, sidechain=True)
        result = {"type": "tool_result", "tool_use_id": task_id, "content": "ok"}
        add("user", {"role": "user", "content": [result]})
    path = tmp_path / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # expected from the file: each sidechain root follows the Task call it runs
    expected, last_task = {}, None
    for r in records:
        for b in r["message"]["content"] if isinstance(r["message"]["content"], list) else []:
            if b.get("type") == "tool_use" and b["name"] == "Task":
                last_task = b["id"]
        if r["isSidechain"] and r["parentUuid"] is None:
            expected[f"{sid}/sidechain-{r['uuid']}"] = last_task
    assert sorted(expected.values()) == ["toolu_task_a", "toolu_task_b"]

    sessions = _import(services, path)
    assert {k: s["parent_tool_use_id"] for k, s in sessions.items() if s["parent_id"]} == expected


def test_stats_json_names_each_rejected_line_with_its_reason(settings: Settings, tmp_path: Path) -> None:
    # `stats --json` gave only how many lines were rejected ("rejected": 3), not which
    # nor why: a real transcript with three bad lines put in
    lines = (FIXTURES / "spotter-claude-transcripts" / "short.jsonl").read_bytes().splitlines()
    bad = {2: b"\xff\xfe{not utf-8}", 5: b"[1, 2]", len(lines) + 3: b'"a string"'}
    for n in sorted(bad):
        lines.insert(n - 1, bad[n])
    path = tmp_path / "short.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert [i + 1 for i, line in enumerate(lines) if line in bad.values()] == sorted(bad)
    cli(settings, "import", str(path))
    stats = json.loads(cli(settings, "stats", "--json").stdout)
    assert stats["rejected"] == len(bad)
    rejected = stats["rejected_inputs"]
    assert [(r["source"], r["location"]) for r in rejected] == [(str(path), f"line {n}") for n in sorted(bad)]
    reasons = [r["reason"] for r in rejected]
    assert all(reasons) and len(set(reasons)) == len(bad)  # three different causes
