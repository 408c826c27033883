"""``hookledger verify`` detects every kind of tampering with the stored log.

A real import is tampered with directly in the store (SQLite file or PostgreSQL
table); ``verify`` must then exit 1 and name the affected stream and log position.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import uuid
from pathlib import Path

import orjson
import psycopg
import pytest

from ledger.config import Settings

from conftest import FIXTURES, PG_URL, cli

TRANSCRIPTS = [
    FIXTURES / "spotter-claude-transcripts" / "short.jsonl",
    FIXTURES / "spotter-claude-transcripts" / "tool_heavy.jsonl",
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with both transcripts imported and the projections (anchors) current."""
    settings = Settings(tmp_path_factory.mktemp("template") / "data")
    cli(settings, "import", *map(str, TRANSCRIPTS))
    cli(settings, "sessions", "--json")
    return settings.data_dir


@pytest.fixture
def store(imported: Path, tmp_path: Path) -> Settings:
    """A private copy of the imported data dir, free to tamper with."""
    shutil.copytree(imported, tmp_path / "data")
    return Settings(tmp_path / "data")


def rows(settings: Settings) -> list[tuple[int, str, int]]:
    """(position, stream id, version) of every stored event, in log order."""
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        found = db.execute(
            "SELECT rowid, originator_id, originator_version FROM stored_events ORDER BY rowid"
        )
        return [(p, str(uuid.UUID(s)), v) for p, s, v in found]


def tamper(settings: Settings, sql: str, *params: object) -> None:
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        assert db.execute(sql, params).rowcount >= 1


def flip(settings: Settings, position: int, find: bytes, offset: int = 0, mask: int = 0x20) -> None:
    """Flip bits of one byte of the row's state: the byte ``offset`` after ``find``."""
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE rowid = ?", (position,)
        ).fetchone()
        i = bytes(state).index(find) + offset
        changed = bytearray(state)
        changed[i] ^= mask
        db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (bytes(changed), position))


def assert_fails_naming(settings: Settings, stream: str, position: int) -> None:
    result = cli(settings, "verify", check=False)
    err = result.stderr.decode()
    assert result.returncode == 1, err + result.stdout.decode()
    assert any(
        line.startswith(f"FAIL stream {stream} ") and f" at position {position}:" in line
        for line in err.splitlines()
    ), err


def middle(settings: Settings) -> tuple[int, str, int]:
    """A row in the middle of the second (longer) stream."""
    all_rows = rows(settings)
    second = [r for r in all_rows if r[1] == all_rows[-1][1]]
    return second[len(second) // 2]


def test_verify_passes_on_an_untouched_store(store: Settings) -> None:
    result = cli(store, "verify", check=False)
    assert result.returncode == 0, result.stderr.decode()
    n = len(rows(store))
    assert result.stdout.decode().startswith(f"ok: {n} events in 2 streams, {n} anchors checked")


def test_flipped_byte_inside_a_json_string_is_detected(store: Settings) -> None:
    position, stream, _ = middle(store)
    key = b'"event_key":"'
    flip(store, position, key, offset=len(key))  # "line:…" -> "Line:…", still valid JSON
    assert_fails_naming(store, stream, position)


def test_flipped_byte_that_breaks_the_json_is_detected(store: Settings) -> None:
    position, stream, _ = middle(store)
    flip(store, position, b"{", mask=0x01)  # '{' -> 'z'
    assert_fails_naming(store, stream, position)


def test_deleted_middle_event_is_detected(store: Settings) -> None:
    position, stream, _ = middle(store)
    tamper(store, "DELETE FROM stored_events WHERE rowid = ?", position)
    assert_fails_naming(store, stream, position)


def test_two_events_of_a_stream_swapped_are_detected(store: Settings) -> None:
    position, stream, _ = middle(store)
    tamper(
        store,
        "UPDATE stored_events SET (topic, state) = "
        "(SELECT o.topic, o.state FROM stored_events o WHERE o.rowid = "
        "CASE stored_events.rowid WHEN ?1 THEN ?2 ELSE ?1 END) WHERE rowid IN (?1, ?2)",
        position,
        position + 1,
    )
    assert rows(store)[position - 1][1] == rows(store)[position][1] == stream
    assert_fails_naming(store, stream, position)


def test_cut_tail_of_a_stream_is_detected(store: Settings) -> None:
    first_stream = rows(store)[0][1]
    position = max(p for p, s, _ in rows(store) if s == first_stream)
    assert position < len(rows(store)), "the first stream's last event is not the log's last"
    tamper(store, "DELETE FROM stored_events WHERE rowid = ?", position)
    assert_fails_naming(store, first_stream, position)


def test_cut_tail_of_the_whole_log_is_detected(store: Settings) -> None:
    position, stream, _ = rows(store)[-1]
    tamper(store, "DELETE FROM stored_events WHERE rowid = ?", position)
    assert_fails_naming(store, stream, position)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_flipped_byte_is_detected_on_postgres(settings: Settings) -> None:
    cli(settings, "import", str(TRANSCRIPTS[0]))
    cli(settings, "sessions", "--json")
    assert cli(settings, "verify", check=False).returncode == 0
    table = f'"{settings.database_schema}".hookledger_events'
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        position, stream, state = conn.execute(
            f"SELECT notification_id, originator_id, state FROM {table} "
            "ORDER BY notification_id OFFSET 5 LIMIT 1"
        ).fetchone()
        changed = bytearray(state)
        changed[changed.index(b'"event_key":"') + len(b'"event_key":"')] ^= 0x20
        conn.execute(
            f"UPDATE {table} SET state = %s WHERE notification_id = %s", (bytes(changed), position)
        )
    assert_fails_naming(settings, str(stream), position)


def _edit_state(settings: Settings, position: int, edit: object) -> str:
    """Apply ``edit(state) -> state`` to the row at ``position``; its stream id."""
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        stream, state = db.execute(
            "SELECT originator_id, state FROM stored_events WHERE rowid = ?", (position,)
        ).fetchone()
        db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (edit(bytes(state)), position))  # type: ignore[operator]
    return str(uuid.UUID(stream))


@pytest.mark.parametrize("edit", [
    # a duplicate key in front: JSON readers that take the first one (DuckDB's
    # json_extract) see 5,000,000 tokens, those that take the last one the real value
    pytest.param(lambda s: b'{"output_tokens":5000000,' + s[1:], id="duplicate-key"),
    # the same instant, parsed alike, written differently
    pytest.param(lambda s: s.replace(b'Z"', b'z"', 1), id="time-letter-case"),
    # an id in the JSON that the row's columns override when decoding
    pytest.param(
        lambda s: s.replace(b'"originator_version":', b'"originator_version":1', 1),
        id="version-in-json",
    ),
])
def test_an_edit_that_decodes_to_the_same_event_is_detected(store: Settings, edit: object) -> None:
    position = next(p for p, _, v in rows(store) if v == 3)
    stream = _edit_state(store, position, edit)
    assert_fails_naming(store, stream, position)


def test_a_row_inserted_outside_the_log_is_detected(store: Settings) -> None:
    _, stream, _ = rows(store)[-1]
    tamper(
        store,
        "INSERT INTO stored_events (rowid, originator_id, originator_version, topic, state) "
        "SELECT -5, originator_id, originator_version + 1, topic, state FROM stored_events "
        "WHERE rowid = ?",
        len(rows(store)),
    )
    assert_fails_naming(store, stream, -5)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_duplicate_key_and_a_row_outside_the_log_are_detected_on_postgres(
    settings: Settings,
) -> None:
    cli(settings, "import", str(TRANSCRIPTS[0]))
    cli(settings, "sessions", "--json")
    table = f'"{settings.database_schema}".hookledger_events'
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        position, stream = conn.execute(
            f"SELECT notification_id, originator_id FROM {table} ORDER BY notification_id OFFSET 5 LIMIT 1"
        ).fetchone()
        conn.execute(
            f"UPDATE {table} SET state = '{{\"output_tokens\":5000000,'::bytea || substr(state, 2) "
            "WHERE notification_id = %s", (position,),
        )
    assert_fails_naming(settings, str(stream), position)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        last_stream, _ = conn.execute(
            f"SELECT originator_id, originator_version FROM {table} ORDER BY notification_id DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            f"INSERT INTO {table} (notification_id, originator_id, originator_version, topic, state) "
            f"SELECT -5, originator_id, originator_version + 1, topic, state FROM {table} "
            "ORDER BY notification_id DESC LIMIT 1"
        )
    assert_fails_naming(settings, str(last_stream), -5)


def _summarised_position(settings: Settings) -> int:
    """Summarise the store's closed batches; the position of the first Summarised event
    (the one class above class_version 1)."""
    cli(settings, "summaries", "run", "--once")
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        (position,) = db.execute(
            "SELECT min(rowid) FROM stored_events WHERE topic LIKE '%:Session.Summarised'"
        ).fetchone()
    assert position is not None
    return int(position)


def test_an_edit_that_takes_class_version_out_is_still_checked(store: Settings) -> None:
    """Without "class_version":2 a Summarised row reads as stored at version 1 (upcast):
    that must not exempt it from the byte check, or a duplicate key in front passes."""
    position = _summarised_position(store)
    stream = _edit_state(store, position, lambda s: (
        b'{"input_tokens":5000000,' + s[1:].replace(b',"class_version":2}', b"}", 1)
    ))
    assert_fails_naming(store, stream, position)


def test_cut_tail_with_its_anchors_deleted_is_detected_by_the_read_models_positions(
    store: Settings,
) -> None:
    """The tail cut and the event_index rows above it deleted too: no anchor is left,
    but the projections' tracking still says they read up to the old head."""
    head = rows(store)[-1][0]
    tamper(store, "DELETE FROM stored_events WHERE rowid > ?", head - 3)
    with sqlite3.connect(store.data_dir / "views.db") as db:
        assert db.execute("DELETE FROM event_index WHERE position > ?", (head - 3,)).rowcount == 3
    result = cli(store, "verify", check=False)
    err = result.stderr.decode()
    assert result.returncode == 1, err + result.stdout.decode()
    assert f"have read the log up to position {head}, but the log ends at {head - 3}" in err, err


def test_verify_of_a_data_dir_with_no_store_fails_and_creates_nothing(tmp_path: Path) -> None:
    # a mistyped --data-dir created an empty store there and passed: "ok: 0 events"
    missing = Settings(tmp_path / "typo")
    result = cli(missing, "verify", check=False)
    assert result.returncode == 1, result.stdout.decode()
    assert "no event store at" in result.stderr.decode()
    assert not (tmp_path / "typo" / "events.db").exists()


def test_verify_of_a_file_says_what_path_it_takes(store: Settings, tmp_path: Path) -> None:
    # an OTLP export is one file: click said only "Directory ... is a file"
    out = tmp_path / "traces.json"
    cli(store, "export", "--format", "otlp", "--output", str(out))
    result = cli(store, "verify", str(out), check=False)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "export directory" in err and "OTLP" in err, err


def store_as_written_before(settings: Settings, kind: str, fields: tuple[str, ...]) -> int:
    """Make the store what a writer from before ``kind`` gained ``fields`` (its class
    version 1) left: each ``kind`` row without those fields and ``class_version``, its
    digest over what is left (as that writer hashed it: the stored fields without
    ``digest``, with the row's ids and ``kind``, sorted), and the chain of its stream
    re-linked from there on, with the projections' anchors (``event_index``) and
    sessions' head digests as that writer's catch-up recorded them. Returns the rows
    rewritten as version 1."""
    changed = 0
    digests: dict[int, str] = {}
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        found = db.execute(
            "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY originator_id, originator_version"
        ).fetchall()
        previous, stream, relink = "", None, False
        for position, originator, version, topic, state in found:
            if originator != stream:
                previous, stream, relink = "", originator, False
            head, separator, tail = bytes(state).partition(b"\x00")
            stored = orjson.loads(head)
            if topic.endswith(f".{kind}"):
                for name in (*fields, "class_version"):
                    stored.pop(name, None)
                changed += 1
                relink = True
            if relink:
                canonical = {k: v for k, v in stored.items() if k != "digest"}
                if separator:
                    canonical["raw"] = tail.decode("utf-8")
                canonical.update(originator_id=str(uuid.UUID(originator)),
                                 originator_version=version, kind=topic.rsplit(".", 1)[1])
                link = hashlib.sha256(
                    previous.encode() + b"\n" + orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
                ).hexdigest()
                stored["digest"] = digests[position] = link
                new = orjson.dumps(stored) + (separator + tail if separator else b"")
                db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (new, position))
            previous = stored["digest"]
    with sqlite3.connect(settings.data_dir / "views.db") as db:
        for position, link in digests.items():
            db.execute("UPDATE event_index SET digest = ? WHERE position = ?", (link, position))
            db.execute("UPDATE sessions SET head_digest = ? WHERE head_position = ?", (link, position))
    return changed


def test_a_summary_written_by_a_version_1_writer_verifies(store: Settings) -> None:
    """A Summarised event written before ``tokens_estimated`` (class_version 1): its
    digest covers the fields it was written with; verify must not hash the upcast event
    (which has ``tokens_estimated``), or every store from before a class_version bump
    fails verify."""
    _summarised_position(store)
    assert store_as_written_before(store, "Summarised", ("tokens_estimated",)) > 0
    result = cli(store, "verify", check=False)
    assert result.returncode == 0, result.stderr.decode()
    with sqlite3.connect(store.data_dir / "events.db") as db:  # still checked: an edit is found
        (position,) = db.execute(
            "SELECT min(rowid) FROM stored_events WHERE topic LIKE '%:Session.Summarised'"
        ).fetchone()
    stream = _edit_state(store, position, lambda s: s.replace(b'"summariser":"', b'"summariser":"x', 1))
    assert_fails_naming(store, stream, position)


def test_usage_written_before_the_one_hour_split_verifies_and_reads_as_zero(store: Settings) -> None:
    """UsageRecorded rows as a writer before ``cache_creation_1h_input_tokens`` (class
    version 1) left them: verify passes, and a rebuild reads them with no 1-hour writes
    (every cache write priced at the 5-minute rate, as that version did)."""
    assert store_as_written_before(store, "UsageRecorded", ("cache_creation_1h_input_tokens",)) > 0
    result = cli(store, "verify", check=False)
    assert result.returncode == 0, result.stderr.decode()
    cli(store, "projections", "rebuild")
    with sqlite3.connect(store.data_dir / "views.db") as db:
        (count, hour) = db.execute(
            "SELECT count(*), sum(cache_creation_1h_input_tokens) FROM session_usage"
        ).fetchone()
    assert count > 0 and hour == 0
    days = orjson.loads(cli(store, "analytics", "cost-per-day", "--json").stdout)
    assert days and all(r["cache_creation_1h_input_tokens"] == 0 for r in days)
