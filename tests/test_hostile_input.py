"""Hostile and malformed input at the edges is recorded, or rejected with its reason, and
stops nothing after it: not the writer, not the spool journal, not the projections."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from eventsourcing.persistence import OperationalError
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services
from api.hot_path.hook_fast import journal_append, record_bytes
from ledger.agent_runner import run_agent
from ledger.app import RecordResult
from ledger.importer import import_paths
from ledger.ingest import HOOK_PARSERS, ingest_hook
from ledger.journal import JOURNAL, JournalIngester
from ledger.jsontext import MAX_DEPTH
from ledger.session import Session
from ledger.sources.claude_common import parse_time
from projections import queries

from conftest import FIXTURES

HOOK_RUN = Path(__file__).resolve().parent.parent / "api" / "hot_path" / "run.py"
FAKE_AGENT = Path(__file__).parent / "tools" / "fake_agent.py"
PROMPT = b'{"session_id":"j","hook_event_name":"UserPromptSubmit","prompt":"hi"}'


def test_a_time_whose_utc_instant_no_datetime_holds_is_no_time(services: Services) -> None:
    # 9999-12-31T23:59:59-01:00 is a valid ISO-8601 time, but one hour past year 9999 in
    # UTC: a projection that converted it to UTC stopped there, and every read after it
    # answered 500
    body = {
        "session_id": "far",
        "hook_event_name": "BeforeAgent",
        "prompt": "hi",
        "timestamp": "9999-12-31T23:59:59-01:00",
    }
    outcome = ingest_hook(services.ledger, "gemini", json.dumps(body).encode(), "capture-1")
    assert outcome.error is None and outcome.result.appended == 2
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 1
    [prompt] = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert prompt.occurred_at is not None and prompt.occurred_at.year < 9999  # the capture time
    for text in ("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"):
        assert parse_time(text) is None
    assert parse_time("9999-12-31T23:59:59+01:00") is not None


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_a_hook_body_nested_deeper_than_the_store_takes_is_rejected_with_the_reason(
    services: Services,
) -> None:
    # orjson reads 1,024 levels but writes 254: such a body parsed, then failed to be
    # recorded (500, the body lost) and, spooled, failed its whole journal chunk at
    # every drain, so no hook after it was ever recorded
    for agent in HOOK_PARSERS:
        for depth in (MAX_DEPTH - 1, 300, 1000):  # the body is one level more
            body = b'{"session_id":"s","hook_event_name":"Stop","x":' + _nested(depth) + b"}"
            outcome = ingest_hook(services.ledger, agent, body, f"{agent}-{depth}")
            if depth < MAX_DEPTH and agent != "openclaw":  # openclaw: another shape
                assert outcome.error is None, (agent, outcome.error)
            elif depth >= MAX_DEPTH:
                assert outcome.error == f"nested deeper than {MAX_DEPTH} arrays and objects"
                assert outcome.result.rejected == 1


def test_a_journal_record_nested_too_deep_is_rejected_and_the_rest_recorded(
    services: Services, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    at = "2026-06-20T00:00:00.000Z"
    deep = b'{"session_id":"j","hook_event_name":"Stop","x":' + _nested(300) + b"}"
    for n, body in enumerate((PROMPT, deep, PROMPT.replace(b'"hi"', b'"again"'))):
        journal_append(str(spool), record_bytes("claude-code", body, f"capture-{n}", at))
    result = JournalIngester(spool, services.ledger.record).drain()
    assert result.rejected == 1
    assert not list(spool.glob("*.aside"))
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 2


def test_a_journal_record_no_recording_takes_is_rejected_and_the_rest_recorded(
    services: Services, tmp_path: Path
) -> None:
    # a record whose recording raised (a bug not met before: the ones found so far were
    # TypeError, OverflowError, ValueError) failed its journal chunk on every drain, so
    # no later hook was ever recorded. Stood for here by a recorder that fails on one
    # capture key, as the real Ledger.record did on those records
    spool = tmp_path / "spool"
    at = "2026-06-20T00:00:00.000Z"
    for n in range(3):
        body = PROMPT.replace(b'"hi"', f'"prompt {n}"'.encode())
        journal_append(str(spool), record_bytes("claude-code", body, f"capture-{n}", at))
    attempts = []

    def record(items: list) -> RecordResult:
        attempts.append(len(items))
        if any(getattr(i, "record_key", None) == "hook:capture-1" for i in items):
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return services.ledger.record(items)

    result = JournalIngester(spool, record).drain()
    # the chunk, then each record alone, then the rejected one
    assert attempts == [3, 1, 1, 1, 1]
    assert result.rejected == 1 and not list(spool.glob("*.aside"))
    [rejected] = [e for _, e in services.ledger.read_log(0, 100) if hasattr(e, "reason")]
    assert rejected.reason == (
        "could not be recorded: OverflowError: Python int too large to convert to SQLite INTEGER"
    )
    assert "capture-1" in rejected.location and '"prompt 1"' in rejected.text
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 2

    # a store's own failure is not the record's: the chunk stays for the next drain
    journal_append(str(spool), record_bytes("claude-code", PROMPT, "capture-9", at))

    def locked(items: list) -> RecordResult:
        raise OperationalError("database is locked")

    with pytest.raises(OperationalError):
        JournalIngester(spool, locked).drain()
    assert list(spool.glob("*.aside"))
    assert JournalIngester(spool, services.ledger.record).drain().appended == 1
    assert not list(spool.glob("*.aside"))


def test_the_hot_path_journals_a_private_body_it_cannot_rewrite_as_json(
    services: Services, tmp_path: Path
) -> None:
    # the hook dropped both (exit 0, "{}", the payload nowhere): json.dumps gave back the
    # unpaired surrogate of a string cut inside an emoji, which UTF-8 cannot encode, and
    # the walk of a body nested deeper than Python recurses raised RecursionError
    cut = b'{"session_id":"e","hook_event_name":"UserPromptSubmit","prompt":"<private>s3kr1t</private> cut \\ud83d"}'
    deep = b'{"session_id":"e","hook_event_name":"Stop","p":"<private>s3kr1t</private>","x":'
    deep += _nested(5000) + b"}"
    for body in (cut, deep):
        done = subprocess.run(
            [
                sys.executable,
                "-S",
                str(HOOK_RUN),
                "claude-code",
                str(tmp_path),
                "http://127.0.0.1:9",
            ],
            input=body,
            capture_output=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, b"{}\n", b"")
    spool = tmp_path / "spool"
    assert b"s3kr1t" not in (spool / JOURNAL).read_bytes()
    result = JournalIngester(spool, services.ledger.record).drain()
    assert result.rejected == 1  # the deep one, kept with its reason
    [prompt] = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert prompt.text == "[private] cut \ufffd"


def test_a_journal_header_with_a_length_of_5000_digits_is_broken_framing(
    services: Services, tmp_path: Path
) -> None:
    # int() refuses more than 4,300 digits: the ValueError failed POST /v1/journal (500,
    # the body lost) and, in the spool, every drain
    spool = tmp_path / "spool"
    spool.mkdir()
    bad = b"HLJ1 k1 2026-06-20T00:00:00.000Z claude-code " + b"9" * 5000 + b"\n{}\n"
    good = record_bytes("claude-code", PROMPT, "capture-2", "2026-06-20T00:00:00.000Z")
    (spool / JOURNAL).write_bytes(bad + good)
    result = JournalIngester(spool, services.ledger.record).drain()
    assert result.rejected == 1
    kinds = [type(e).__name__ for _, e in services.ledger.read_log(0, 10)]
    assert kinds.count("InputRejected") == kinds.count("PromptSubmitted") == 1


def test_nul_characters_reach_the_read_models_on_both_backends(services: Services) -> None:
    # PostgreSQL text cannot hold NUL: the first event with one in a string stopped every
    # projection there (DataError at each catch-up), and every read after it failed
    bodies = [
        {"session_id": "n\u0000l", "hook_event_name": "UserPromptSubmit", "prompt": "a\u0000b"},
        {
            "session_id": "n\u0000l",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash\u0000",
            "tool_input": {"command": "printf '\\0'", "k\u0000": "\u0000"},
            "tool_use_id": "t\u0000",
        },
    ]
    for n, body in enumerate(bodies):
        outcome = ingest_hook(services.ledger, "claude-code", json.dumps(body).encode(), f"k{n}")
        assert outcome.error is None
    services.runner.catch_up()
    nul = "\ufffd" if services.settings.is_postgres else "\u0000"
    [session] = queries.list_sessions(services.models)
    assert session["external_id"] == f"n{nul}l"
    assert (session["prompt_count"], session["tool_call_count"]) == (1, 1)
    [prompt] = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert prompt.text == "a\u0000b"  # the event keeps it


def test_a_count_beyond_what_a_64_bit_column_sums_is_no_count(services: Services) -> None:
    # a token count of 2**63 was recorded and stopped the projections at it (SQLite:
    # OverflowError, PostgreSQL: bigint out of range); 1e30 (orjson reads it as a
    # float, taken as an int) failed the recording itself: orjson writes no int > 2**64
    for n, count in enumerate(("9223372036854775808", "18446744073709551615", "1e30")):
        payload = {
            "session_id": "big",
            "hook_event_name": "AfterModel",
            "llm_request": {"n": n},
            "llm_response": {
                "candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": "COUNT", "candidatesTokenCount": 1},
            },
        }
        body = json.dumps(payload).replace('"COUNT"', count)
        outcome = ingest_hook(services.ledger, "gemini", body.encode(), f"usage-{n}")
        assert outcome.error is None
    post = {
        "session_id": "big",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_use_id": "t1",
        "tool_input": {},
        "tool_response": {},
        "duration_ms": 2**63,
    }
    assert ingest_hook(services.ledger, "claude-code", json.dumps(post).encode(), "k").error is None
    services.runner.catch_up()
    sessions = {s["agent"]: s for s in queries.list_sessions(services.models)}
    assert sessions["gemini"]["input_tokens"] == 0
    assert sessions["gemini"]["output_tokens"] == 3
    assert sessions["claude-code"]["tool_call_count"] == 1


def test_an_import_goes_on_past_a_record_its_parser_cannot_read(
    services: Services, tmp_path: Path
) -> None:
    # a transcript's "type" that is a list made format detection raise TypeError, and a
    # Gemini message whose toolCalls is true made its parser raise: the import stopped
    # with a traceback, recording nothing of the run
    drift = FIXTURES / "agent-sessions-schema-drift"
    claude = (drift / "claude_small.jsonl").read_bytes().split(b"\n")
    first = json.loads(claude[0])
    first["type"] = ["user"]
    (tmp_path / "a-claude.jsonl").write_bytes(b"\n".join([json.dumps(first).encode(), *claude[1:]]))
    gemini = (drift / "gemini_jsonl_v040.jsonl").read_bytes().split(b"\n")
    reply = json.loads(gemini[3])
    assert reply["type"] == "gemini"
    reply["toolCalls"] = True
    gemini[3] = json.dumps(reply).encode()
    (tmp_path / "b-gemini.jsonl").write_bytes(b"\n".join(gemini))
    summary = import_paths(services.ledger, [tmp_path], workers=0)
    assert summary.files == 2 and not summary.skipped
    assert summary.result.rejected == 1  # the Gemini reply; the records after it are read
    reasons = [getattr(e, "reason", "") for _, e in services.ledger.read_log(0, 10_000)]
    [reason] = [r for r in reasons if "cannot read" in r]
    assert reason.startswith("the gemini.chat-jsonl parser cannot read this record: TypeError")
    services.runner.catch_up()
    sessions = {s["agent"]: s for s in queries.list_sessions(services.models)}
    assert sessions["claude-code"]["prompt_count"] >= 1
    after = json.loads(gemini[4])  # the reply after the one it cannot read is read
    assert after["type"] == "gemini" and after["tokens"]["output"] > 0
    assert sessions["gemini"]["output_tokens"] == after["tokens"]["output"]


def _deep_copy_of(line: bytes, field: str, depth: int) -> bytes:
    """``line`` (a JSON object) with a new id and ``field`` nested ``depth`` levels."""
    rec = json.loads(line)
    text = json.dumps({**rec, "uuid": "deep-1", field: "@"}).encode()
    return text.replace(b'"@"', b"[" * depth + b'"x"' + b"]" * depth)


def test_a_file_line_nested_deeper_than_the_store_takes_is_rejected_and_the_rest_recorded(
    services: Services, tmp_path: Path
) -> None:
    # orjson reads 1,024 levels but writes 254: a transcript or rollout line nested
    # deeper parsed, then failed when recorded, and the import stopped with a traceback
    drift = FIXTURES / "agent-sessions-schema-drift"
    for name, field in (("claude_small.jsonl", "message"), ("codex_051_usage.jsonl", "payload")):
        lines = (drift / name).read_bytes().rstrip(b"\n").split(b"\n")
        deep = _deep_copy_of(lines[1], field, 300)
        (tmp_path / name).write_bytes(b"\n".join([*lines[:2], deep, *lines[2:]]) + b"\n")
        (tmp_path / f"whole-{name}").write_bytes((drift / name).read_bytes())
    summary = import_paths(services.ledger, [tmp_path], workers=0)
    assert summary.files == 4 and not summary.skipped
    assert summary.result.rejected == 2
    reasons = [getattr(e, "reason", "") for _, e in services.ledger.read_log(0, 100_000)]
    deep = [r for r in reasons if "deeper" in r]
    assert deep == [f"not valid JSON: nested deeper than {MAX_DEPTH} arrays and objects"] * 2


def test_a_run_goes_on_past_a_line_its_parser_cannot_read(
    services: Services, tmp_path: Path
) -> None:
    # an item whose "type" is a list made the exec parser raise TypeError: hookledger run
    # stopped with a traceback, passed no more of the agent's output on (closing the pipe
    # the agent writes to) and recorded neither the rest nor the run's end
    lines = (FIXTURES / "agentcmd-codex-exec-json" / "stream-output-1.jsonl").read_bytes()
    lines = lines.split(b"\n")
    assert lines[2].startswith(b'{"type":"item.completed","item":{"id":"item_0","type":"reasoning"')
    lines[2] = lines[2].replace(b'"type":"reasoning"', b'"type":["reasoning"]')
    recording = tmp_path / "stream.jsonl"
    recording.write_bytes(b"\n".join(lines))
    out = io.BytesIO()
    outcome = run_agent(services.ledger, [sys.executable, str(FAKE_AGENT), str(recording)], out=out)
    assert out.getvalue() == recording.read_bytes().rstrip(b"\n") + b"\n"
    assert outcome.outcome == "completed" and outcome.recorded.rejected == 1
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["status"] == "COMPLETED" and session["output_tokens"] > 0


def test_a_hook_body_its_parser_cannot_read_is_rejected_and_the_journal_goes_on(
    services: Services, tmp_path: Path
) -> None:
    # a Gemini AfterModel whose candidates is a number made the parser raise TypeError
    # out of parse_hook_body: POST /v1/hooks answered 500 with nothing recorded, and a
    # spooled one failed its journal chunk at every drain (no later hook recorded)
    after_model = {
        "session_id": "g",
        "hook_event_name": "AfterModel",
        "llm_request": {"model": "m"},
        "llm_response": {"candidates": 7},
    }
    body = json.dumps(after_model).encode()
    outcome = ingest_hook(services.ledger, "gemini", body, "k1")
    assert outcome.error == (
        "the gemini hook parser cannot read it: TypeError: 'int' object is not iterable"
    )
    assert outcome.result.rejected == 1
    spool = tmp_path / "spool"
    at = "2026-06-20T00:00:00.000Z"
    journal_append(str(spool), record_bytes("gemini", body, "k2", at))
    journal_append(str(spool), record_bytes("claude-code", PROMPT, "k3", at))
    result = JournalIngester(spool, services.ledger.record).drain()
    assert result.rejected == 1
    kinds = [type(e).__name__ for _, e in services.ledger.read_log(0, 20)]
    assert kinds.count("PromptSubmitted") == 1


def test_a_redaction_path_never_holds_what_a_key_had_removed(
    services: Services, tmp_path: Path
) -> None:
    # the path of a span removed under a key was built from the key as it came: a secret
    # or a private span in the key was stored in the event's redactions (and in the
    # journal header the hook wrote)
    token = "ghp_" + "a1B2" * 9
    payload = {
        "session_id": "p",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hi",
        token: "a <private>b</private>",
        "<private>topsecret</private>": {"q": "<private>z</private>"},
    }
    body = json.dumps(payload).encode()
    done = subprocess.run(
        [sys.executable, "-S", str(HOOK_RUN), "claude-code", str(tmp_path), "http://127.0.0.1:9"],
        input=body,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"{}\n", b"")
    journal = (tmp_path / "spool" / JOURNAL).read_bytes()
    assert token.encode() not in journal and b"topsecret" not in journal
    JournalIngester(tmp_path / "spool", services.ledger.record).drain()
    ingest_hook(services.ledger, "claude-code", body, "direct")  # the server's own walk
    prompts = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert len(prompts) == 2
    for prompt in prompts:
        paths = {r.path for r in prompt.redactions}
        assert "$.[redacted:github_pat]" in paths and "$.[private].q" in paths
        assert token not in str(prompt.redactions) and "topsecret" not in str(prompt.redactions)


def test_a_space_in_a_redaction_path_does_not_break_the_journal_record(
    services: Services, tmp_path: Path
) -> None:
    # the redactions go in the journal record's header, whose fields are split at
    # spaces: a <private> span under a key with a space ("my key") made the header
    # bad, and the whole hook was kept as a malformed journal record, not recorded
    payload = {
        "session_id": "sp",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hi",
        "tool_input": {"my key": "<private>x</private>"},
    }
    done = subprocess.run(
        [sys.executable, "-S", str(HOOK_RUN), "claude-code", str(tmp_path), "http://127.0.0.1:9"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    result = JournalIngester(tmp_path / "spool", services.ledger.record).drain()
    assert result.rejected == 0
    [prompt] = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert [r.path for r in prompt.redactions] == ["$.tool_input.my key"]


def test_costs_whose_sum_overflows_to_infinity_are_no_costs(
    services: Services, tmp_path: Path
) -> None:
    # two reported costs of 1.7e308 summed to inf in the read models, which JSON cannot
    # carry: GET /v1/sessions answered 500 for every client from then on
    lines = (FIXTURES / "claude_code-elixir-stream-json" / "create_file.jsonl").read_text()
    out = []
    for line in lines.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "result":
            rec["total_cost_usd"] = 1.7e308
            out += [json.dumps(rec), json.dumps({**rec, "result": "again"})]
        else:
            out.append(line)
    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(out) + "\n")
    assert import_paths(services.ledger, [stream]).result.appended > 0
    services.runner.catch_up()
    with TestClient(create_app(services)) as client:
        assert client.get("/v1/sessions?totals=1").status_code == 200
    [session] = queries.list_sessions(services.models)
    assert session["agent_cost_usd"] is None


def test_a_store_holding_a_source_time_past_year_9999_in_utc_is_projected(
    services: Services,
) -> None:
    # stores written before the edge fix may hold such a time; every projection stopped
    # at it (OverflowError converting it to UTC), for good
    from datetime import datetime, timedelta, timezone

    from ledger.observation import Observation, SessionRef

    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))
    ref = SessionRef("claude-code", "old-store", cwd="/x")
    prompt = {"text": "hi", "prompt_kind": "human"}
    services.ledger.record(
        [Observation(ref, "PromptSubmitted", "p1", prompt, "claude-code.hook", occurred_at=far)]
    )
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 1 and session["started_at"] is not None


@pytest.mark.parametrize(
    ("fixture", "module", "helper", "args"),
    [
        ("cursor_transcript_small.jsonl", "cursor_transcript", "_unwrap", ("conv",)),
        ("openclaw_session_small.jsonl", "openclaw_transcript", "_text", ("fallback",)),
    ],
)
def test_a_record_the_cursor_or_openclaw_parser_raises_on_ends_only_that_record(
    monkeypatch: pytest.MonkeyPatch, fixture: str, module: str, helper: str, args: tuple
) -> None:
    # no record shape found makes these two parsers raise (fuzzed); a bug that one day
    # does is stood for by a text helper of theirs that raises on the word "boom"
    import importlib

    parser = importlib.import_module(f"ledger.sources.{module}")
    real = getattr(parser, helper)

    def failing(value: object) -> str:
        if "boom" in json.dumps(value):
            raise TypeError("unexpected shape")
        return real(value)

    def kinds(lines: list[bytes]) -> list[str]:
        return [f.kind for f in parser.parse_records(lines, "src", *args) if hasattr(f, "kind")]

    lines = (FIXTURES / "agent-sessions-schema-drift" / fixture).read_bytes().splitlines()
    hit = 2  # a user message: both helpers read it
    assert b'"role":"user"' in lines[hit]
    whole = kinds(lines)
    of_hit = len(kinds(lines[: hit + 1])) - len(kinds(lines[:hit]))
    monkeypatch.setattr(parser, helper, failing)
    lines[hit] = lines[hit].replace(b'"text":"', b'"text":"boom ', 1)
    facts = list(parser.parse_records(lines, "src", *args))
    [rejected] = [f for f in facts if not hasattr(f, "kind")]
    assert rejected.reason.endswith("parser cannot read this record: TypeError: unexpected shape")
    assert rejected.location == f"line {hit + 1}" and b"boom" in rejected.data
    assert of_hit >= 1 and len([f for f in facts if hasattr(f, "kind")]) == len(whole) - of_hit


def test_a_gemini_chat_document_message_its_parser_cannot_read_is_rejected_alone(
    services: Services, tmp_path: Path
) -> None:
    doc = json.loads((FIXTURES / "agent-sessions-schema-drift" / "gemini_small.json").read_bytes())
    assert [m["type"] for m in doc["messages"]] == ["user", "gemini"]
    doc["messages"][1]["toolCalls"] = True  # its parser raised TypeError on this
    (tmp_path / "session-x.json").write_text(json.dumps(doc))
    summary = import_paths(services.ledger, [tmp_path], workers=0)
    assert summary.files == 1 and not summary.skipped and summary.result.rejected == 1
    reasons = [getattr(e, "reason", "") for _, e in services.ledger.read_log(0, 1000)]
    assert any(r.startswith("the gemini.chat parser cannot read this record: TypeError") for r in reasons)
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 1  # the message before it


@pytest.mark.parametrize(
    "url",
    [
        "/v1/sessions?agent=claude-code%00", "/v1/sessions?status=ACTIVE%00",
        "/v1/sessions/ab%00cd", "/v1/sessions/ab%00/events", "/v1/sessions/ab%00/summaries",
        "/v1/sessions/ab%00/plans", "/v1/search?q=tests&project=%2Frepo%00",
        "/v1/context?cwd=%2Frepo%00",
    ],
)
def test_a_nul_in_a_url_is_a_400_with_the_reason_on_both_backends(
    services: Services, url: str
) -> None:
    # PostgreSQL text cannot hold NUL: these answered 500 there (and an empty 200 on
    # SQLite) before the URL guard
    with TestClient(create_app(services), raise_server_exceptions=False) as client:
        r = client.get(url)
        assert r.status_code == 400, (url, r.status_code, r.text)
        assert "NUL" in r.json()["error"]
        r = client.post("/v1/sessions/ab%00/commands/pause")
        assert r.status_code == 400, r.text


def test_a_hook_posted_to_an_agent_name_holding_nul_is_still_recorded(
    services: Services,
) -> None:
    with TestClient(create_app(services)) as client:
        r = client.post("/v1/hooks/claude%00code", content=PROMPT)
    assert r.status_code == 404 and r.json()["rejected"] is True
    services.runner.catch_up()
    assert queries.stats(services.models)["rejected"] == 1
