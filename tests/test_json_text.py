"""Unpaired UTF-16 surrogate escapes (``\\ud83d`` alone: what JavaScript writes when it
cuts a string inside an emoji) are valid JSON text. A record holding one is read, with
U+FFFD in the string, never rejected (:mod:`ledger.jsontext`)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services
from ledger import jsontext
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import parse_hook_body
from ledger.session import Session
from projections import queries

from conftest import FIXTURES, cli

CUT = rb"cut inside an emoji \ud83d"


def test_unpaired_surrogates_are_read_as_replacement_characters() -> None:
    assert jsontext.loads(rb'{"a":"cut \ud83d"}') == {"a": "cut \ufffd"}
    assert jsontext.loads(rb'["\ude00x", {"\ud800": [1, "\udfff"]}]') == ["\ufffdx", {"\ufffd": [1, "\ufffd"]}]
    assert jsontext.loads(r'"\ud83d\ude00 \ud83d"') == "\U0001f600 \ufffd"  # a pair stays one character
    assert jsontext.loads(rb'"\\ud83d"') == "\\ud83d"  # an escaped backslash: no escape at all


def test_every_other_error_is_orjsons() -> None:
    for bad in (rb'{"b": "\ud83d", "a": NaN}', rb'{"a": "\ud83d"', rb'{"a": "\ud83d" "b"}'):
        with pytest.raises(orjson.JSONDecodeError, match="surrogate"):
            jsontext.loads(bad)
    with pytest.raises(orjson.JSONDecodeError):
        jsontext.loads(b'{"a": "\\ud83d", "b": "\xff"}')
    with pytest.raises(orjson.JSONDecodeError, match="unexpected character"):
        jsontext.loads(b"{not json")


def test_a_transcript_line_with_an_unpaired_surrogate_is_imported(
    settings: Settings, other_settings: Settings, tmp_path: Path
) -> None:
    original = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    data = original.read_bytes()
    assert data.count(b'"input":{') >= 1
    cut = tmp_path / "short.jsonl"
    cut.write_bytes(data.replace(b'"input":{', b'"input":{"note":"' + CUT + b'",', 1))
    cli(settings, "import", str(original))
    cli(other_settings, "import", str(cut))
    before = json.loads(cli(settings, "stats", "--json").stdout)
    after = json.loads(cli(other_settings, "stats", "--json").stdout)
    assert after["rejected"] == 0
    assert after["events"] == before["events"]
    assert (after["prompts"], after["tool_calls"]) == (before["prompts"], before["tool_calls"])
    shown = cli(other_settings, "show", json.loads(cli(other_settings, "sessions", "--json").stdout)[0]["id"], "--json")
    assert "cut inside an emoji \ufffd" in shown.stdout.decode()


def test_a_hook_payload_with_an_unpaired_surrogate_is_recorded(services: Services) -> None:
    payload = json.loads((FIXTURES / "coorp-serverless-plugins-hook-logs" / "user_prompt_submit.json").read_text())[1]
    body = json.dumps(payload).replace('"prompt": "', '"prompt": "' + CUT.decode() + " ", 1).encode()
    assert CUT in body
    items, error = parse_hook_body("claude-code", body, "capture-1")
    assert error is None
    result = services.ledger.record(items)
    assert result.appended >= 1 and result.rejected == 0
    prompts = [
        e for _, e in services.ledger.read_log(0, 100) if isinstance(e, Session.PromptSubmitted)
    ]
    assert len(prompts) == 1
    assert prompts[0].text.startswith("cut inside an emoji \ufffd ")
    assert "cut inside an emoji \ufffd" in prompts[0].raw  # a hook's raw record is the decoded payload


def test_the_events_of_a_transcript_line_with_an_unpaired_surrogate_are_served(
    services: Services, tmp_path: Path
) -> None:
    # the line is kept as written, escape and all, as the event's raw record; reading it
    # back with orjson failed ("no low surrogate"), and GET /v1/sessions/{id}/events
    # answered 500 for the whole session
    data = (FIXTURES / "spotter-claude-transcripts" / "short.jsonl").read_bytes()
    cut = tmp_path / "short.jsonl"
    cut.write_bytes(data.replace(b'"input":{', b'"input":{"note":"' + CUT + b'",', 1))
    import_paths(services.ledger, [cut])
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    with TestClient(create_app(services)) as client:
        answer = client.get(f"/v1/sessions/{session['id']}/events")
    assert answer.status_code == 200
    assert "cut inside an emoji \ufffd" in answer.text


@pytest.mark.parametrize("limit", [0, 1, 10, 200, 253, 254, 300])
def test_too_deep_counts_every_level_of_arrays_and_objects(limit: int) -> None:
    def nested(depth: int, shape: str) -> object:
        value: object = "x"
        for i in range(depth):
            value = [value] if shape == "list" or (shape == "mixed" and i % 2) else {"k": value}
        return value

    for shape in ("list", "object", "mixed"):
        for depth in range(max(0, limit - 2), limit + 3):
            assert jsontext.too_deep(nested(depth, shape), limit) is (depth > limit), (shape, depth)
    # a value orjson cannot write for another reason is measured all the same
    assert jsontext.too_deep([{"big": 2**70}], 1) is True
    assert jsontext.too_deep([{"big": 2**70}], 2) is False
