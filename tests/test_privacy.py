"""``<private>…</private>`` content never reaches storage; the event records the redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from api.bootstrap import Services
from api.hook_client import run
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.privacy import strip_private_text

from conftest import free_port

SECRET = "SECRET-XYZ-123"
PRIVATE = f"<private>{SECRET}</private>"

PROMPT_HOOK = {
    "session_id": "privacy-hook-session",
    "cwd": "/tmp/project",
    "hook_event_name": "UserPromptSubmit",
    "prompt": f"deploy with {PRIVATE} please",
}
TOOL_HOOK = {
    "session_id": "privacy-hook-session",
    "cwd": "/tmp/project",
    "hook_event_name": "PostToolUse",
    "tool_name": "Bash",
    "tool_use_id": "toolu_privacy_1",
    "tool_input": {"command": "cat .env"},
    "tool_response": {"stdout": f"TOKEN={PRIVATE}", "stderr": "", "interrupted": False},
}
TRANSCRIPT_LINE = {
    "type": "user",
    "sessionId": "privacy-transcript-session",
    "uuid": "5d0b6a52-5f0e-4c1e-9a55-000000000001",
    "cwd": "/tmp/project",
    "timestamp": "2026-02-10T21:11:56.846Z",
    "message": {"role": "user", "content": f"my key is {PRIVATE}"},
}


def record_private_inputs(services: Services, tmp_path: Path) -> None:
    for i, payload in enumerate((PROMPT_HOOK, TOOL_HOOK)):
        outcome = ingest_hook(
            services.ledger, "claude-code", json.dumps(payload).encode(), f"cap-{i}", None
        )
        assert outcome.error is None and outcome.result.appended
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(json.dumps(TRANSCRIPT_LINE) + "\n")
    assert import_paths(services.ledger, [transcript]).result.appended
    services.runner.catch_up()


def stored_states(services: Services) -> list[dict]:
    """Stored event states as the store holds them: JSON, then (after a NUL byte) the
    raw record's text."""
    notifications = services.ledger.recorder.select_notifications(start=0, limit=10_000)
    states = []
    for n in notifications:
        head, _, raw = n.state.partition(b"\0")
        state = json.loads(head)
        state["raw"] = raw.decode() if raw else state.get("raw")
        states.append(state)
    return states


def read_model_text(services: Services) -> str:
    with services.models.engine.connect() as conn:
        return "".join(
            repr(conn.execute(select(table)).all())
            for table in services.models.metadata.sorted_tables
        )


def test_private_content_is_stored_nowhere_but_its_redaction_is(
    services: Services, tmp_path: Path
) -> None:
    record_private_inputs(services, tmp_path)

    states = stored_states(services)
    assert SECRET not in json.dumps(states)
    assert SECRET not in read_model_text(services)
    for path in services.settings.data_dir.rglob("*"):  # events.db, views.db and their -wal files
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    redacted = {r["path"]: json.dumps(s["raw"]) for s in states for r in s["redactions"]}
    assert set(redacted) == {"$.prompt", "$.tool_response.stdout", "$.message.content"}
    assert all("[private]" in raw for raw in redacted.values())
    assert all(
        r["kind"] == "private_tag" and r["count"] == 1 for s in states for r in s["redactions"]
    )


def test_unchanged_input_records_no_redaction(services: Services) -> None:
    payload = {**PROMPT_HOOK, "prompt": "nothing to hide </private> here"}
    ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), "cap-plain", None)
    states = stored_states(services)
    assert [s["redactions"] for s in states if s["raw"]] == [[]]
    assert "nothing to hide </private> here" in json.dumps(states)


def test_private_content_of_rejected_input_is_not_stored(services: Services) -> None:
    body = json.dumps(PROMPT_HOOK).encode()[:-1]  # truncated: not valid JSON
    assert ingest_hook(services.ledger, "claude-code", body, "cap-bad", None).error
    assert SECRET not in json.dumps(stored_states(services))


ESCAPED_PRIVATE = PRIVATE.replace("<", "\\u003c").replace(">", "\\u003E")
"""The span as Go's JSON encoder writes it inside a string (``<`` and ``>`` escaped)."""


@pytest.mark.parametrize(
    "body",
    [
        # too deep for the store (over 200 levels), not a JSON object, no session id
        '{"session_id":"s","hook_event_name":"UserPromptSubmit","prompt":"'
        + ESCAPED_PRIVATE + '","x":' + "[" * 300 + "]" * 300 + "}",
        '["' + ESCAPED_PRIVATE + '"]',
        '{"hook_event_name":"UserPromptSubmit","prompt":"' + ESCAPED_PRIVATE + '"}',
    ],
    ids=["too-deep", "not-an-object", "no-session"],
)
def test_private_content_spelled_with_json_escapes_in_rejected_input_is_not_stored(
    services: Services, body: str
) -> None:
    # JSON text that is rejected is kept as text; a tag written with escapes was not
    # seen there, so the span was stored whole in the quarantine
    assert ingest_hook(services.ledger, "claude-code", body.encode(), "cap-esc", None).error
    states = stored_states(services)
    assert SECRET not in json.dumps(states)
    [rejected] = [s for s in states if "reason" in s and "text" in s]
    assert {"kind": "private_tag", "path": "$", "count": 1} in rejected["redactions"]


def test_the_hot_path_strips_escaped_tags_from_a_body_it_cannot_parse() -> None:
    from api.hot_path.hook_fast import strip_private_body

    deep = '{"prompt":"' + ESCAPED_PRIVATE + '","x":' + "[" * 5000 + "]" * 5000 + "}"
    body, found = strip_private_body(deep.encode())
    assert SECRET.encode() not in body and b"[private]" in body
    assert found == [{"kind": "private_tag", "path": "$", "count": 1}]
    plain = '{"x":' + "[" * 5000 + "]" * 5000 + ',"note":"\\u003cb>bold\\u003c/b>"}'
    assert strip_private_body(plain.encode()) == (plain.encode(), [])


@pytest.mark.parametrize(
    ("tag_end", "json_escaped"),
    [("\\u0070rivate>", True), ("PRIVATE>", False)],
    ids=["json-escaped", "upper-case"],
)
def test_disguised_private_tags_in_transcripts_are_stripped(
    services: Services, tmp_path: Path, tag_end: str, json_escaped: bool
) -> None:
    transcript = tmp_path / "disguised.jsonl"
    transcript.write_text(json.dumps(TRANSCRIPT_LINE).replace("private>", tag_end) + "\n")
    if json_escaped:
        assert json.loads(transcript.read_text())["message"]["content"] == f"my key is {PRIVATE}"
    import_paths(services.ledger, [transcript])
    assert SECRET not in json.dumps(stored_states(services))


def test_hook_spool_holds_no_private_content(tmp_path: Path) -> None:
    nobody_listening = f"http://127.0.0.1:{free_port()}"
    run("claude-code", str(tmp_path), url=nobody_listening, stdin=json.dumps(PROMPT_HOOK).encode())
    spooled = list((tmp_path / "spool").iterdir())
    assert spooled, "nothing was spooled"
    assert all(SECRET.encode() not in p.read_bytes() for p in spooled)


# -- strip_private_text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "count"),
    [
        ("a <private>s</private> b", "a [private] b", 1),
        ("a <private>s</private> b <private>t</private>", "a [private] b [private]", 2),
        ("a <private>x <private>y</private> z</private> b", "a [private] b", 1),
        ("a <private>everything after this", "a [private]", 1),
        ("a </private> b", "a </private> b", 0),
        ("a </private> <private>s</private>", "a </private> [private]", 1),
        ("a <PRIVATE>s</Private> b", "a [private] b", 1),
        ("a <private >s</private\t> b", "a [private] b", 1),
        ("no tags at all", "no tags at all", 0),
    ],
)
def test_strip_private_text(text: str, expected: str, count: int) -> None:
    assert strip_private_text(text) == (expected, count)


def test_strip_private_text_completes_on_hostile_input() -> None:
    assert strip_private_text("<private>" * 200_000) == ("[private]", 1)
    assert strip_private_text("x" + "</private>" * 200_000) == ("x" + "</private>" * 200_000, 0)
    many_unclosed = "<private" * 500_000
    assert strip_private_text(many_unclosed) == (many_unclosed, 0)
