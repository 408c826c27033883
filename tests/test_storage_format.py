"""The write and read fast paths agree with the reference ones, on every event of the
bundled real sessions: the hash input dumped by orjson from the validated fields equals
pydantic's own JSON dump, a stored event decodes to an equal event, and what projections
read (without the raw record) equals the full event but for ``raw``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from api.bootstrap import Services, build
from ledger.config import Settings
from ledger.envelope import RAW_SEPARATOR, canonical_bytes, chain_digest
from ledger.importer import import_paths

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
