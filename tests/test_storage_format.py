"""The write and read fast paths agree with the reference ones, on every event of the
bundled real sessions: the hash input dumped by orjson from the validated fields equals
pydantic's own JSON dump, a stored event decodes to an equal event, and what projections
read (without the raw record) equals the full event but for ``raw``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from api.bootstrap import Services, build
from api.jobs import run_jobs
from api.summaries import run_summaries
from ledger.config import Settings
from ledger.envelope import RAW_SEPARATOR, canonical_bytes, chain_digest
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.session import Session
from projections.decode import LogReader
from projections.event_decoder import EventDecoder

from conftest import FIXTURES, cli


def test_fast_paths_agree_with_the_reference_on_every_fixture_event(services: Services) -> None:
    assert import_paths(services.ledger, [FIXTURES]).result.appended > 4000
    full = services.ledger.read_log(0, 100_000)
    light = dict(services.ledger.read_log(0, 100_000, raw=False))
    assert len(full) == len(light) == services.ledger.max_position()
    raws = 0
    previous: dict[str, str] = {}
    for position, event in full:
        reference = event.model_dump(mode="json", exclude={"digest"})
        reference["kind"] = type(event).__name__
        assert canonical_bytes(event) == orjson.dumps(reference, option=orjson.OPT_SORT_KEYS)
        stream = str(event.originator_id)
        assert chain_digest(previous.get(stream, ""), event) == event.digest
        previous[stream] = event.digest
        assert light[position] == event.model_copy(update={"raw": None})
        raws += isinstance(event.raw, str)
    assert raws > len(full) / 2  # most events carry their raw record as JSON text


def test_raw_record_is_stored_after_the_json_as_received(services: Services) -> None:
    line = (FIXTURES / "spotter-claude-transcripts" / "short.jsonl").read_bytes().split(b"\n")[0]
    path = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    import_paths(services.ledger, [path])
    stored = services.ledger.recorder.select_notifications(start=0, limit=10)
    with_raw = [n.state for n in stored if RAW_SEPARATOR in n.state]
    head, _, raw = with_raw[0].partition(RAW_SEPARATOR)
    assert raw == line.strip()  # the line exactly as read (nothing was redacted)
    assert b'"raw"' not in head


def test_projections_read_every_event_as_pydantic_validates_it(services: Services) -> None:
    """:class:`EventDecoder` builds events from their stored JSON without validating
    them again: every event of every bundled agent's sessions, liveness decisions and
    summaries, and a hook with redactions, decodes to the event pydantic validates
    from the same row, field by field with the same types, classes above version 1
    (Summarised, UsageRecorded) included; and a row of those stored at version 1 (as
    its writer left it: without the later fields and ``class_version``) decodes to the
    event the mapper's upcasters give."""
    import_paths(services.ledger, [FIXTURES])
    body = b'{"hook_event_name": "UserPromptSubmit", "session_id": "dec-1", "prompt": "a <private>x</private> b"}'
    assert ingest_hook(services.ledger, "claude-code", body, "decoder-key").result.appended
    later = datetime(2030, 1, 1, tzinfo=UTC)
    run_jobs(services, later)
    run_summaries(services, now=later)
    end = services.ledger.max_position()
    reference = dict(services.ledger.read_log(0, end, raw=False))
    rows = services.ledger.recorder.select_notifications(start=1, limit=end)
    decoder, built, kinds = EventDecoder(), 0, set()
    for row in rows:  # the decoder itself takes every row of the classes it plans
        cls = type(reference[row.id])
        if decoder.supports(cls):
            head = row.state.partition(RAW_SEPARATOR)[0]
            assert decoder.decode(cls, head, reference[row.id].originator_id, row.originator_version) is not None
            built += 1
            kinds.add(cls)
    assert built > len(reference) - 200
    assert {Session.ToolCallCompleted, Session.TimedOut, Session.CostReported, Session.RunEnded,
            Session.Summarised, Session.UsageRecorded} <= kinds
    later_fields = {Session.Summarised: "tokens_estimated",
                    Session.UsageRecorded: "cache_creation_1h_input_tokens"}
    for row in rows:  # the same rows as a version 1 writer stored them
        cls = type(reference[row.id])
        if cls not in later_fields:
            continue
        state = orjson.loads(row.state.partition(RAW_SEPARATOR)[0])
        assert state.pop("class_version") == cls.class_version
        del state[later_fields[cls]]
        head = orjson.dumps(state)
        upcast = services.ledger.mapper.decode(row.topic, head, row.originator_id,
                                               row.originator_version, raw=False)
        event = decoder.decode(cls, head, upcast.originator_id, row.originator_version)
        assert event is not None and event == upcast
        assert getattr(event, later_fields[cls]) in (False, 0)
    section = LogReader(services.ledger).read(0, end)
    assert [p for p, _ in section.events] == sorted(reference)
    redacted = 0
    for position, event in section.events:
        expected = reference[position]
        assert type(event) is type(expected) and event == expected
        for name in type(expected).model_fields:
            if name != "originator_id":  # a UUID subclass shared by the stream's events
                assert type(getattr(event, name)) is type(getattr(expected, name)), (position, name)
        redacted += bool(event.redactions)
    assert redacted


@pytest.mark.parametrize(
    "change",
    [
        lambda state: {**state, "unknown_field": 1},  # a key the class lacks
        lambda state: {k: v for k, v in state.items() if k != "event_key"},  # required, absent
        lambda state: {**state, "status": "NOT_A_STATUS"},  # no such enum member
        lambda state: {**state, "timestamp": "yesterday"},  # no time
        lambda state: {**state, "timestamp": None},  # null, not optional
        lambda state: {**state, "status": None},
        lambda state: {**state, "alias_keys": "abc"},  # not an array
        lambda state: {**state, "redactions": {"kind": "x"}},
    ],
)
def test_a_row_the_decoder_does_not_fit_goes_to_pydantic(services: Services, change: Callable[[dict], dict]) -> None:
    body = b'{"hook_event_name": "UserPromptSubmit", "session_id": "dec-2", "prompt": "hi"}'
    ingest_hook(services.ledger, "claude-code", body, "decoder-key-2")
    row = services.ledger.recorder.select_notifications(start=1, limit=10)[-1]
    cls = type(services.ledger.read_log(row.id - 1, 1)[0][1])
    head = row.state.partition(RAW_SEPARATOR)[0]
    decoder = EventDecoder()
    assert decoder.supports(cls)
    assert decoder.decode(cls, head, row.originator_id, row.originator_version) is not None
    changed = orjson.dumps(change(orjson.loads(head)))
    assert decoder.decode(cls, changed, row.originator_id, row.originator_version) is None
    with pytest.raises(ValueError):  # pydantic refuses it as well
        cls.model_validate_json(changed)
    assert decoder.decode(cls, b"{not json", row.originator_id, row.originator_version) is None


@pytest.mark.parametrize("key", ["COMPRESSOR_TOPIC", "CIPHER_TOPIC"])
def test_a_store_asked_to_compress_or_encrypt_refuses_to_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """eventsourcing reads these from the environment; the ledger's own stored form is
    plain JSON, so it says so instead of writing events the setting does not cover."""
    monkeypatch.setenv(key, "eventsourcing.compressor:ZlibCompressor")
    with pytest.raises(ValueError, match=f"{key} is set"):
        build(Settings(tmp_path / "data"))
    assert not (tmp_path / "data" / "events.db").exists()


def test_the_cli_refuses_a_cipher_with_its_reason(tmp_path: Path) -> None:
    settings = Settings(tmp_path / "data")
    done = cli(settings, "stats", "--json", check=False,
               extra_env={"CIPHER_TOPIC": "eventsourcing.cipher:AESCipher"})
    assert done.returncode == 1
    assert b"CIPHER_TOPIC is set" in done.stderr and b"Traceback" not in done.stderr
