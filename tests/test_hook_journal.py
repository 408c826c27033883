"""The hook hot path and the spool journal, with real processes.

Payloads are the real hook logs in ``tests/fixtures/*hook-logs`` (Claude Code 2025-08
and 2.1.170), written by the exact command ``install-hooks`` writes
(``python -S /abs/api/hot_path/run.py claude-code <data dir>``), while the server is down,
while it is SIGKILLed mid-ingest and while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from api.bootstrap import build
from api.hot_path.hook_fast import journal_append, record_bytes, uuid7
from ledger.config import Settings
from ledger.envelope import raw_record
from ledger.journal import JOURNAL, JournalIngester
from projections import queries

from conftest import FIXTURES, Server

HOOK_RUN = Path(__file__).resolve().parent.parent / "api" / "hot_path" / "run.py"
PYTHON = os.path.realpath(sys.executable)


def fixture_payloads() -> list[dict[str, Any]]:
    """Every hook payload in the hook-log fixtures (chat.json is a transcript)."""
    out: list[dict[str, Any]] = []
    for folder in sorted(FIXTURES.glob("*hook-logs")):
        for f in sorted(folder.rglob("*.json")):
            if f.name != "chat.json":
                out.extend(json.loads(f.read_text()))
    return out


def run_hook(
    data_dir: Path, body: bytes, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The command install-hooks writes, as Claude Code runs it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    return subprocess.run(
        [PYTHON, "-S", str(HOOK_RUN), "claude-code", str(data_dir)],
        input=body,
        capture_output=True,
        timeout=60,
        env={**base, **(env or {})},
    )


def write_all(data_dir: Path, bodies: list[bytes], workers: int = 4) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for out in pool.map(lambda b: run_hook(data_dir, b), bodies):
            assert out.returncode == 0 and out.stdout.strip() == b"{}", out


def journal_headers(path: Path) -> list[list[bytes]]:
    """Header fields of every record, read with plain byte splitting."""
    data = path.read_bytes()
    headers, pos = [], 0
    while pos < len(data):
        eol = data.index(b"\n", pos)
        fields = data[pos:eol].split(b" ")
        headers.append(fields)
        pos = eol + 1 + int(fields[4]) + 1
    return headers


def event_keys(settings: Settings) -> Counter[tuple[str, str, str]]:
    """(stream, kind, event key) of every stored event."""
    services = build(settings)
    try:
        out: Counter[tuple[str, str, str]] = Counter()
        recorder = services.ledger.recorder
        start = 0
        while True:
            section = recorder.select_notifications(start, 1000, inclusive_of_start=False)
            if not section:
                return out
            for n in section:
                event = services.ledger.mapper.to_domain_event(n)
                out[(str(n.originator_id), type(event).__name__, event.event_key)] += 1
            start = section[-1].id
    finally:
        services.close()


def test_hot_path_imports_no_json_re_socket_urllib(tmp_path: Path) -> None:
    body = json.dumps(fixture_payloads()[0] | {"hook_event_name": "PostToolUse"}).encode()
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    out = subprocess.run(
        [PYTHON, "-S", "-X", "importtime", str(HOOK_RUN), "claude-code", str(tmp_path)],
        input=body,
        capture_output=True,
        timeout=60,
        env=base,
        check=True,
    )
    imported = {
        line.split("|")[-1].strip() for line in out.stderr.decode().splitlines() if "|" in line
    }
    assert imported, out.stderr
    forbidden = {"json", "re", "socket", "urllib", "urllib.request", "http.client"}
    assert not imported & (forbidden | {"ahocorasick_rs"}), imported
    assert out.stdout.strip() == b"{}"
    assert [h[3] for h in journal_headers(tmp_path / "spool" / JOURNAL)] == [b"claude-code"]


def test_hook_never_fails_its_agent(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data dir should be")
    for body in (b"", b"\xff\xfe garbage", json.dumps(fixture_payloads()[0]).encode()):
        out = run_hook(blocked, body)
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
    start = {"session_id": "s", "hook_event_name": "SessionStart", "cwd": "/x", "source": "startup"}
    out = run_hook(
        blocked, json.dumps(start).encode(), env={"HOOKLEDGER_URL": "http://127.0.0.1:9"}
    )
    assert out.returncode == 0 and out.stdout.strip() == b"{}"


@pytest.fixture(scope="module")
def down_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The journal of every fixture payload, each written by its own hook process while
    no server runs (1252 processes: written once, for both backends; the journal does
    not depend on the backend the server will drain it into)."""
    data = tmp_path_factory.mktemp("down") / "data"
    write_all(data, [json.dumps(p).encode() for p in fixture_payloads()])
    return data / "spool" / JOURNAL


def test_payloads_written_while_server_is_down_are_ingested_once_and_trimmed(
    settings: Settings, tmp_path: Path, down_journal: Path
) -> None:
    payloads = fixture_payloads()
    assert len(payloads) == 1252  # 9+600+11+7+3+221+1+10 attio, 9+177+6+6+146+41+1+4 coorp
    journal = settings.data_dir / "spool" / JOURNAL
    journal.parent.mkdir(parents=True)
    shutil.copy(down_journal, journal)  # as the hook processes left it in this data dir
    headers = journal_headers(journal)
    assert len(headers) == len(payloads)
    assert len({h[1] for h in headers}) == len(payloads), "one capture key per hook call"

    # Reference: the same records (same capture keys) recorded once, directly.
    reference = Settings(tmp_path / "reference")
    shutil.copy(journal, tmp_path / "journal.copy")
    ref = build(reference)
    try:
        copy_dir = tmp_path / "copy"
        copy_dir.mkdir()
        shutil.copy(journal, copy_dir / JOURNAL)
        JournalIngester(copy_dir, ref.ledger.record).drain()
    finally:
        ref.close()

    srv = Server(settings).start()
    srv.stop()
    assert not list((settings.data_dir / "spool").iterdir()), "the journal is trimmed"
    srv = Server(settings).start()  # a second start ingests nothing again
    srv.stop()

    got = event_keys(settings)
    assert got == event_keys(reference)
    assert max(got.values()) == 1
    services = build(settings)
    try:
        services.runner.catch_up()
        stats = queries.stats(services.models)
        sessions = {r["external_id"] for r in queries.list_sessions(services.models)}
    finally:
        services.close()
    assert stats["rejected"] == 0
    assert {p["session_id"] for p in payloads} <= sessions
    prompts = sum(1 for k in got if k[1] == "PromptSubmitted")
    assert prompts == sum(p["hook_event_name"] == "UserPromptSubmit" for p in payloads)


def _prompt(session: int, n: int) -> bytes:
    return json.dumps(
        {
            "session_id": f"00000000-0000-4000-8000-{session:012d}",
            "transcript_path": "/tmp/t.jsonl",
            "cwd": "/work/bulk",
            "hook_event_name": "UserPromptSubmit",
            "prompt": f"bulk prompt {n}",
        }
    ).encode()


@pytest.mark.slow
def test_sigkill_mid_ingest_loses_nothing_and_doubles_nothing(settings: Settings) -> None:
    payloads = fixture_payloads()[:200]
    write_all(settings.data_dir, [json.dumps(p).encode() for p in payloads])
    spool = settings.data_dir / "spool"
    bulk = 6000
    for n in range(bulk):  # the hot path's own framing and append, in-process for speed
        journal_append(
            str(spool),
            record_bytes("claude-code", _prompt(n % 40, n), uuid7(), "2026-06-20T00:00:00.000Z"),
        )

    srv = Server(settings)
    srv.spawn()
    services = build(settings)
    try:
        deadline = time.monotonic() + 120
        while services.ledger.max_position() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        before_kill = services.ledger.max_position()
        srv.stop(kill=True)
        assert before_kill > 0
        leftovers = list(spool.glob(f"{JOURNAL}.*.aside"))
        assert leftovers, (
            "the kill came after the whole journal was ingested; the test proves nothing"
        )
    finally:
        services.close()
        srv.stop(kill=True)

    srv = Server(settings).start()
    srv.stop()
    assert not list(spool.iterdir()), "the journal is trimmed"
    got = event_keys(settings)
    assert max(got.values()) == 1
    prompts = [k for k in got if k[1] == "PromptSubmitted"]
    expected = bulk + sum(p["hook_event_name"] == "UserPromptSubmit" for p in payloads)
    assert len(prompts) == expected


def test_many_concurrent_hook_processes_lose_nothing(settings: Settings, server: Server) -> None:
    bodies = [_prompt(n % 5, n) for n in range(160)]
    write_all(settings.data_dir, bodies, workers=8)
    deadline = time.monotonic() + 30
    count = 0
    while time.monotonic() < deadline:
        rows = httpx.get(server.url + "/v1/sessions", timeout=30).json()["sessions"]
        count = sum(r["prompt_count"] for r in rows if r["cwd"] == "/work/bulk")
        if count >= len(bodies):
            break
        time.sleep(0.1)
    assert count == len(bodies)
    prompts = set()
    for n in range(5):
        detail = httpx.get(
            f"{server.url}/v1/sessions/00000000-0000-4000-8000-{n:012d}", timeout=30
        ).json()
        prompts |= {b["prompt"] for b in detail["batches"]}
    assert prompts == {f"bulk prompt {n}" for n in range(160)}


def test_session_start_gets_context_from_the_server(settings: Settings, server: Server) -> None:
    payloads = [p for p in fixture_payloads() if p["session_id"].startswith("4f65f198")]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for p in payloads:
            assert client.post("/v1/hooks/claude-code", json=p).status_code == 202
    cwd = payloads[0]["cwd"]
    asked = next(  # typed by a person (slash commands and task notifications are not batches)
        p["prompt"]
        for p in payloads
        if p["hook_event_name"] == "UserPromptSubmit" and p["prompt"][0] not in "/<"
    )
    edited = next(
        p["tool_input"]["file_path"]
        for p in payloads
        if p["hook_event_name"] == "PostToolUse" and p["tool_name"] in ("Edit", "Write")
    )
    start = {
        "session_id": "11111111-2222-4333-8444-555555555555",
        "transcript_path": "/tmp/x.jsonl",
        "cwd": cwd,
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    out = run_hook(
        settings.data_dir, json.dumps(start).encode(), env={"HOOKLEDGER_URL": server.url}
    )
    assert out.returncode == 0
    answer = json.loads(out.stdout)
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert 0 < len(context) <= 10_000
    assert " ".join(asked.split())[:60] in context
    assert edited in context
    # The SessionStart payload itself is journalled and ingested too.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (
            httpx.get(f"{server.url}/v1/sessions/{start['session_id']}", timeout=30).status_code
            == 200
        ):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the SessionStart payload never reached the ledger")


def test_session_start_without_server_prints_no_context_and_is_journalled(tmp_path: Path) -> None:
    start = {
        "session_id": "s1",
        "cwd": "/x",
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    t0 = time.monotonic()
    out = run_hook(
        tmp_path, json.dumps(start).encode(), env={"HOOKLEDGER_URL": "http://127.0.0.1:9"}
    )
    assert time.monotonic() - t0 < 10
    assert out.returncode == 0 and out.stdout.strip() == b"{}"
    assert len(journal_headers(tmp_path / "spool" / JOURNAL)) == 1


def test_malformed_journal_records_are_rejected_with_a_reason(settings: Settings) -> None:
    spool = settings.data_dir / "spool"
    good = _prompt(1, 1)
    journal_append(
        str(spool), record_bytes("claude-code", good, uuid7(), "2026-06-20T00:00:00.000Z")
    )
    with open(spool / JOURNAL, "ab") as f:
        f.write(b"this is not a record\n")
        f.write(b'HLJ1 k 2026 claude-code 999\n{"short": 1}\n')
    journal_append(
        str(spool), record_bytes("claude-code", _prompt(1, 2), uuid7(), "2026-06-20T00:00:00.000Z")
    )
    journal_append(
        str(spool), record_bytes("claude-code", b"{not json", uuid7(), "2026-06-20T00:00:00.000Z")
    )
    stats = _drained_stats(settings, spool)
    assert not list(spool.iterdir())
    assert stats["prompts"] == 2
    # "this is not a record" (no header), the record whose body is shorter than its
    # header says, and the body that is not JSON.
    assert stats["rejected"] == 3


def _drained_stats(settings: Settings, spool: Path) -> dict[str, int]:
    """``stats`` of the store after draining ``spool``'s journal into it."""
    services = build(settings)
    try:
        JournalIngester(spool, services.ledger.record).drain()
        services.runner.catch_up()
        return queries.stats(services.models)
    finally:
        services.close()


def test_a_torn_record_does_not_swallow_the_next_hooks_payload(settings: Settings) -> None:
    # A hook cut off mid-write (disk full: os.write wrote part of the record, then
    # raised; or killed mid-write) leaves a record without its final newline. The next
    # hook's record was appended right after it, so its header did not start a line:
    # the parser, which resynchronises at "\nHLJ1 ", took it for part of the torn
    # record, and that payload was kept only inside a rejected chunk.
    spool = settings.data_dir / "spool"
    torn = record_bytes("claude-code", _prompt(1, 1), uuid7(), "2026-06-20T00:00:00.000Z")
    spool.mkdir(parents=True)
    (spool / JOURNAL).write_bytes(torn[: len(torn) // 2])
    for n in (2, 3):
        out = run_hook(settings.data_dir, _prompt(1, n))
        assert out.returncode == 0, out
    stats = _drained_stats(settings, spool)
    assert stats["prompts"] == 2, "both payloads written after the torn record"
    assert stats["rejected"] == 1, "the torn record, kept as rejected input"


SECRET = "SECRET-XYZ-123"


@pytest.mark.parametrize(
    "spelled",
    [
        f"<private>{SECRET}</private>",
        f"<PRIVATE >{SECRET}</Private>",
        f"<private>{SECRET}",  # unclosed: everything after it goes
        f"<private><private>x</private>{SECRET}</private>",
        f"\\u003cprivate>{SECRET}\\u003c/private>",  # JSON escapes, decoded by the parser
        f"<\\u0070rivate>{SECRET}</private>",
    ],
)
def test_journal_never_holds_private_content(tmp_path: Path, spelled: str) -> None:
    prefix = '{"session_id":"s","hook_event_name":"UserPromptSubmit","prompt":"a '
    body = prefix + spelled + ' b"}'
    out = run_hook(tmp_path, body.encode())
    assert out.returncode == 0
    journal = (tmp_path / "spool" / JOURNAL).read_bytes()
    assert SECRET.encode() not in journal and b"[private]" in journal
    assert json.loads(journal.split(b"\n", 1)[1].rsplit(b"\n", 1)[0])["prompt"].startswith("a ")


def test_payload_without_a_tag_is_journalled_byte_for_byte(tmp_path: Path) -> None:
    # macOS paths contain "private" but no tag; ANSI colours come as \u001b escapes.
    body = json.dumps(
        {
            "session_id": "s",
            "hook_event_name": "PostToolUse",
            "tool_response": {"stdout": "\u001b[31m/private/var/folders/x\u001b[0m"},
        }
    )
    assert "\\u001b" in body
    out = run_hook(tmp_path, body.encode())
    assert out.returncode == 0
    journal = (tmp_path / "spool" / JOURNAL).read_bytes()
    assert journal.split(b"\n", 1)[1] == body.encode() + b"\n"


def test_hot_path_secret_literals_are_the_catalogues() -> None:
    # The hot path checks secret literals without importing the catalogue; a rule added
    # to ledger.secrets, or a literal changed, must not slip past it.
    from api.hot_path import hook_fast
    from ledger.secrets import catalogue

    def case(r, xs):  # type: ignore[no-untyped-def]
        return tuple(sorted({(x.lower() if r.ignore_case else x).encode() for x in xs}))

    expected = {(r.ignore_case, case(r, r.any_of), case(r, r.all_of)) for r in catalogue()}
    assert set(hook_fast.SECRET_RULES) == expected


def test_hot_path_secret_precheck_is_exact_on_the_fixtures() -> None:
    # Never skips a payload the catalogue would redact something in.
    from api.hot_path import hook_fast
    from ledger.privacy import redact_text

    payloads = [
        p
        for path in FIXTURES.rglob("*.json")
        for p in (json.loads(path.read_bytes()) if path.stat().st_size < 5_000_000 else [])
        if isinstance(p, dict) and "hook_event_name" in p
    ]
    assert len(payloads) > 1000
    for p in payloads:
        body = json.dumps(p).encode()
        if not hook_fast.may_hold_secret(body):
            assert redact_text(body.decode())[1] == [] or all(
                r["kind"] == "private_tag" for r in redact_text(body.decode())[1]
            )


# -- redactions made at the edge ----------------------------------------------------------


def test_edge_private_removals_have_the_servers_paths_and_counts() -> None:
    """What the hot path removes and reports is what ledger.privacy would have."""
    from api.hot_path.hook_fast import strip_private_body
    from ledger.privacy import strip_private

    payload = {
        "prompt": "a <private>x</private> b <PRIVATE >y</private>",
        "tool_input": {"command": "echo <private>z", "<private>k</private>": "v"},
        "items": ["plain", "<private>w</private>"],
        "n": 1,
    }
    body, found = strip_private_body(json.dumps(payload).encode())
    cleaned, expected = strip_private(payload)
    assert json.loads(body) == cleaned
    assert sorted(found, key=str) == sorted(expected, key=str)
    assert {r["path"] for r in found} == {
        "$.prompt", "$.tool_input.command", "$.tool_input.<key>", "$.items[1]"
    }
    assert strip_private_body(b'{"prompt": "nothing here"}') == (
        b'{"prompt": "nothing here"}', []
    )
    assert strip_private_body(b"not json <private>q</private>") == (
        b"not json [private]", [{"kind": "private_tag", "path": "$", "count": 1}]
    )


def test_a_long_redaction_list_collapses_to_totals_per_kind() -> None:
    from api.hot_path.hook_fast import MAX_REDACTIONS_BYTES, encode_redactions

    assert encode_redactions([]) == b""
    few = [{"kind": "private_tag", "path": "$.prompt", "count": 2}]
    assert json.loads(encode_redactions(few)) == few
    many = [{"kind": "private_tag", "path": f"$.items[{i}]", "count": 1} for i in range(500)]
    many += [{"kind": "jwt", "path": "$", "count": 3}]
    encoded = encode_redactions(many)
    assert len(encoded) <= MAX_REDACTIONS_BYTES and b" " not in encoded
    assert json.loads(encoded) == [
        {"kind": "private_tag", "path": "$", "count": 500},
        {"kind": "jwt", "path": "$", "count": 3},
    ]


def test_journalled_private_removals_are_recorded_and_bad_ones_never_block(
    settings: Settings,
) -> None:
    """The hot path (server down) journals the removal with the record; a record whose
    redactions are malformed is ingested without them instead of stalling the journal."""
    spool = settings.data_dir / "spool"
    body = json.loads(_prompt(7, 1))
    body["prompt"] = "keep <private>drop</private> keep"
    out = run_hook(settings.data_dir, json.dumps(body).encode())
    assert out.returncode == 0, out.stderr
    bad = b'[{"kind":"private_tag","count":1}]'  # no path
    at = "2026-06-20T00:00:00.000Z"
    journal_append(str(spool), record_bytes("claude-code", _prompt(7, 2), uuid7(), at, bad))
    services = build(settings)
    try:
        JournalIngester(spool, services.ledger.record).drain()
        services.runner.catch_up()
        sid = queries.find_session_id(services.models, "00000000-0000-4000-8000-000000000007")
        assert sid is not None
        prompts = {
            raw_record(e)["prompt"]: [r.model_dump() for r in e.redactions]
            for e in services.ledger.events.get(UUID(sid))
            if type(e).__name__ == "PromptSubmitted"
        }
    finally:
        services.close()
    assert prompts == {
        "keep [private] keep": [{"kind": "private_tag", "path": "$.prompt", "count": 1}],
        "bulk prompt 2": [],
    }
    assert not list(spool.iterdir())


def test_hot_path_agents_are_the_servers() -> None:
    from api.hot_path import hook_fast
    from ledger.ingest import HOOK_PARSERS

    assert tuple(sorted(HOOK_PARSERS)) == hook_fast.AGENTS


def test_an_unknown_agent_is_said_on_stderr_and_kept_as_rejected_input(
    settings: Settings,
) -> None:
    # `hookledger hook claud-code` (a typo in the agent's settings) and the fast hook
    # with that name said nothing: exit 0, `{}`, and the payload became rejected input
    # only the server's log showed, so every hook of that agent went on missing silently.
    from ledger.quarantine import quarantine_id

    from conftest import cli

    body = _prompt(1, 1)
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    fast = subprocess.run(
        [PYTHON, "-S", str(HOOK_RUN), "claud-code", str(settings.data_dir)],
        input=body, capture_output=True, timeout=60, env=base,
    )
    slow = cli(settings, "hook", "claud-code", stdin=body, check=False)
    for out in (fast, slow):
        assert out.returncode == 0 and out.stdout.strip() == b"{}", out
        assert out.stderr.decode().startswith(
            "hookledger hook: unknown agent 'claud-code' (known: claude-code, codex, cursor,"
        ), out.stderr
    good = run_hook(settings.data_dir, _prompt(1, 2))
    assert good.returncode == 0 and good.stderr == b"", good

    stats = _drained_stats(settings, settings.data_dir / "spool")
    assert stats["rejected"] == 2 and stats["prompts"] == 1
    services = build(settings)
    try:
        kept = list(services.ledger.events.get(quarantine_id("hook:claud-code")))[1:]
    finally:
        services.close()
    assert [e.reason.split(" (")[0] for e in kept] == ["unknown agent 'claud-code'"] * 2
    assert [e.text.encode() for e in kept] == [body, body]
