"""``hookledger export --format jsonl|parquet`` and ``hookledger verify PATH``.

A real import of the Spotter Claude Code transcripts is exported through the real CLI;
the export must verify on its own and match the store exactly, and ``verify PATH`` must
fail, naming the record, for a changed byte, a dropped row, a swapped pair and a
truncated file. Counts to compare with come from the store (sqlite3 / psycopg) and the
``event_index`` read model, never from the exporter.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from api.bootstrap import Services
from ledger.config import Settings
from ledger.exports.writer import parquet_schema
from ledger.importer import discover, import_paths

from conftest import FIXTURES, PG_URL, cli

SPOTTER = FIXTURES / "spotter-claude-transcripts"
FORMATS = ["jsonl", "parquet"]


def import_fixtures(services: Services, *paths: Path) -> None:
    import_paths(services.ledger, discover(paths or (SPOTTER,)))
    services.runner.catch_up()


def store_rows(settings: Settings) -> list[tuple[int, str, int]]:
    """(position, stream id, version) of every stored event, read from the store itself."""
    if settings.database_url:
        table = f'"{settings.database_schema}".hookledger_events'
        with psycopg.connect(PG_URL) as conn:
            found = conn.execute(
                f"SELECT notification_id, originator_id, originator_version FROM {table} "
                "ORDER BY notification_id"
            ).fetchall()
        return [(int(p), str(s), int(v)) for p, s, v in found]
    import uuid

    with sqlite3.connect(settings.data_dir / "events.db") as db:
        found = db.execute(
            "SELECT rowid, originator_id, originator_version FROM stored_events ORDER BY rowid"
        ).fetchall()
    return [(p, str(uuid.UUID(s)), v) for p, s, v in found]


def index_heads(settings: Settings) -> dict[str, tuple[int, int, str]]:
    """stream -> (count, head version, head digest) from the event_index read model."""
    if settings.database_url:
        with psycopg.connect(PG_URL) as conn:
            rows = conn.execute(
                f'SELECT stream_id, version, digest FROM "{settings.database_schema}".event_index'
            ).fetchall()
    else:
        with sqlite3.connect(settings.data_dir / "views.db") as db:
            rows = db.execute("SELECT stream_id, version, digest FROM event_index").fetchall()
    heads: dict[str, tuple[int, int, str]] = {}
    for stream, version, digest in rows:
        count, head, _ = heads.get(stream, (0, 0, ""))
        heads[stream] = (count + 1, *((version, digest) if version > head else heads[stream][1:]))
    return heads


def export(settings: Settings, fmt: str, out: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    cli(settings, "export", "--format", fmt, "--output", str(out), *extra)
    return json.loads((out / "manifest.json").read_text())


def verify(settings: Settings, out: Path, *extra: str) -> tuple[int, str, str]:
    r = cli(settings, "verify", str(out), *extra, check=False)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


# -- whole exports, both backends -------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_whole_export_verifies_and_matches_the_store(
    settings: Settings, services: Services, tmp_path: Path, fmt: str
) -> None:
    import_fixtures(services)
    manifest = export(settings, fmt, tmp_path / "out")
    code, out, err = verify(settings, tmp_path / "out")
    assert code == 0, err
    assert out.startswith("ok: ")
    code, out, err = verify(settings, tmp_path / "out", "--against-store")
    assert code == 0, err
    assert "matches the store exactly" in out

    stored = store_rows(settings)
    assert manifest["partial"] is False
    assert manifest["total"] == len(stored)
    assert (manifest["first_position"], manifest["last_position"]) == (stored[0][0], stored[-1][0])
    assert manifest["store_head_position"] == stored[-1][0]
    heads = index_heads(settings)
    assert {s: (h["count"], h["head_version"], h["head_digest"])
            for s, h in manifest["streams"].items()} == heads
    assert all(h["prev_digest"] == "" and h["first_version"] == 1
               for h in manifest["streams"].values())
    rows = read_rows(tmp_path / "out", fmt)
    assert [(r["position"], r["stream_id"], r["version"]) for r in rows] == stored


def test_against_store_fails_when_the_store_differs(
    settings: Settings, services: Services, tmp_path: Path
) -> None:
    """Events appended after the export (above its head) do not matter; a store holding
    other events at the export's positions does, and the first differing row is named."""
    import_fixtures(services, SPOTTER / "short.jsonl")
    export(settings, "jsonl", tmp_path / "out")
    import_fixtures(services, SPOTTER / "tool_heavy.jsonl")  # above the head: still equal
    assert verify(settings, tmp_path / "out", "--against-store")[0] == 0
    other = Settings(tmp_path / "other")  # same export, a store with other events
    from api.bootstrap import build

    s2 = build(other)
    try:
        import_fixtures(s2, SPOTTER / "tool_heavy.jsonl")
    finally:
        s2.close()
    code, _, err = verify(other, tmp_path / "out", "--against-store")
    assert code == 1
    assert "row 1: position 1 stream " in err.splitlines()[0]



def write_file(path: Path, rows: list[dict], fmt: str) -> None:  # type: ignore[type-arg]
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n"
                                for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), path)


def split_in_two(out: Path, at: int) -> None:
    """Rewrite the export's one data file as two, rows ``[:at]`` and ``[at:]``, listed in
    order in the manifest (``files[]`` may hold several), each with its own counts,
    positions, size and sha256."""
    fmt = fmt_of(out)
    rows = read_rows(out)
    manifest = json.loads((out / "manifest.json").read_text())
    data_file(out).unlink()
    entries = []
    for name, part in ((f"events-1.{fmt}", rows[:at]), (f"events-2.{fmt}", rows[at:])):
        path = out / name
        write_file(path, part, fmt)
        entries.append({
            "path": name, "records": len(part), "first_position": part[0]["position"],
            "last_position": part[-1]["position"], "bytes": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        })
    manifest["files"] = entries
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("fmt", FORMATS)
def test_against_store_reads_every_data_file(tmp_path: Path, fmt: str) -> None:
    """An export in two data files matches the store (it failed: only ``files[0]`` was
    compared, so the store seemed to hold events the export did not), and an event
    altered in the second file is named there."""
    settings = Settings(tmp_path / "data")
    cli(settings, "import", str(SPOTTER / "short.jsonl"), str(SPOTTER / "tool_heavy.jsonl"))
    out = tmp_path / "out"
    export(settings, fmt, out)
    rows = read_rows(out)
    at = len(rows) // 2
    split_in_two(out, at)
    assert verify(settings, out)[0] == 0
    code, stdout, err = verify(settings, out, "--against-store")
    assert code == 0, err
    assert "matches the store exactly" in stdout

    i = at + (len(rows) - at) // 2  # in the second file: row i - at + 1 there
    altered = tmp_path / "altered"
    shutil.copytree(out, altered)
    (altered / "manifest.json").write_text(json.dumps(rechained(
        json.loads((out / "manifest.json").read_text()), rows, i, altered, at)))
    assert verify(settings, altered)[0] == 0  # consistent forgery: only the store tells
    code, _, err = verify(settings, altered, "--against-store")
    assert code == 1
    assert err.startswith(
        f"FAIL events-2.{fmt} row {i - at + 1}: position {rows[i]['position']} "
        f"stream {rows[i]['stream_id']} v{rows[i]['version']}: row differs"
    ), err


def rechained(manifest: dict, rows: list[dict], i: int, out: Path, at: int) -> dict:  # type: ignore[type-arg]
    """Alter row ``i``'s agent and redo every digest, link, head and file entry after it,
    as a forger would; write the two data files of ``out`` (split at ``at``); return the
    manifest to write."""
    from ledger.exports.records import chain, link

    rows = [dict(r) for r in rows]
    event = json.loads(rows[i]["canonical"])
    event["agent"] = "forged"
    rows[i]["canonical"] = json.dumps(event, sort_keys=True, separators=(",", ":"),
                                      ensure_ascii=False)
    digests: dict[str, str] = {}
    previous = ""
    for r in rows:
        r["digest"] = chain(digests.get(r["stream_id"], ""), r["canonical"].encode())
        digests[r["stream_id"]] = r["digest"]
        previous = r["link"] = link(previous, r["position"], r["topic"], r["digest"])
        manifest["streams"][r["stream_id"]]["head_digest"] = r["digest"]
    manifest["link_head"] = previous
    for entry, part in zip(manifest["files"], (rows[:at], rows[at:]), strict=True):
        path = out / entry["path"]
        write_file(path, part, fmt_of(out))
        entry.update(bytes=path.stat().st_size,
                     sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return manifest


# -- tampering with an export (standalone; made once from a SQLite store) ---------------


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    settings = Settings(tmp_path_factory.mktemp("exports") / "data")
    cli(settings, "import", str(SPOTTER))
    base = settings.data_dir.parent
    return {fmt: (export(settings, fmt, base / fmt), base / fmt)[1] for fmt in FORMATS}


@pytest.fixture(params=FORMATS)
def copy(request: pytest.FixtureRequest, exports: dict[str, Path], tmp_path: Path) -> Path:
    out = tmp_path / request.param
    shutil.copytree(exports[request.param], out)
    return out


def fmt_of(out: Path) -> str:
    return json.loads((out / "manifest.json").read_text())["data_format"]


def data_file(out: Path) -> Path:
    return out / ("events.jsonl" if fmt_of(out) == "jsonl" else "events.parquet")


def read_rows(out: Path, fmt: str | None = None) -> list[dict]:  # type: ignore[type-arg]
    fmt = fmt or fmt_of(out)
    if fmt == "jsonl":
        return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return pq.read_table(out / "events.parquet").to_pylist()


def write_rows(out: Path, rows: list[dict]) -> None:  # type: ignore[type-arg]
    """Rewrite the data file with ``rows`` (as a tamperer with the right tools would)."""
    if fmt_of(out) == "jsonl":
        dumps = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in rows]
        (out / "events.jsonl").write_text("".join(d + "\n" for d in dumps))
    else:
        schema = pq.read_schema(out / "events.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out / "events.parquet")


def first_failure(out: Path) -> str:
    code, stdout, err = verify(Settings(out.parent / "no-store"), out)
    assert code == 1, stdout + err
    fails = [line for line in err.splitlines() if line.startswith("FAIL ")]
    assert fails, err
    return fails[0]


def names(line: str, out: Path, row: int, rec: dict) -> bool:  # type: ignore[type-arg]
    return line.startswith(
        f"FAIL {data_file(out).name} row {row}: position {rec['position']} "
        f"stream {rec['stream_id']} v{rec['version']}: "
    )


def test_fresh_export_verifies(copy: Path) -> None:
    code, out, err = verify(Settings(copy.parent / "no-store"), copy)
    assert code == 0, err
    n = len(read_rows(copy))
    assert out.startswith(f"ok: {n} records in ")


def test_changed_value_names_the_record(copy: Path) -> None:
    rows = read_rows(copy)
    i = len(rows) // 2
    original = rows[i]["canonical"]
    at = original.index('"agent":"') + len('"agent":"')
    rows[i]["canonical"] = original[:at] + chr(ord(original[at]) ^ 0x20) + original[at + 1:]
    write_rows(copy, rows)
    line = first_failure(copy)
    assert names(line, copy, i + 1, rows[i]), line
    assert "digest mismatch" in line


def test_changed_position_names_the_record(copy: Path) -> None:
    """The position is outside the event's digest; the export's link chain covers it."""
    rows = read_rows(copy)
    i = len(rows) // 2
    rows[i]["position"] += 1
    write_rows(copy, rows)
    line = first_failure(copy)
    assert names(line, copy, i + 1, rows[i]), line
    assert "link mismatch" in line


def test_dropped_row_names_the_record_after_it(copy: Path) -> None:
    rows = read_rows(copy)
    i = len(rows) // 2
    del rows[i]
    write_rows(copy, rows)
    line = first_failure(copy)
    assert names(line, copy, i + 1, rows[i]), line


def test_swapped_pair_names_the_record(copy: Path) -> None:
    rows = read_rows(copy)
    i = len(rows) // 2
    rows[i], rows[i + 1] = rows[i + 1], rows[i]
    write_rows(copy, rows)
    line = first_failure(copy)
    assert names(line, copy, i + 1, rows[i]), line


def test_dropped_last_rows_are_detected(copy: Path) -> None:
    rows = read_rows(copy)
    last = rows[-1]
    write_rows(copy, rows[:-1])
    code, _, err = verify(Settings(copy.parent / "x"), copy)
    assert code == 1
    assert f"stream {last['stream_id']} v{last['version'] - 1}:" in err
    assert f"head is v{last['version']} at position {last['position']}" in err


def test_changed_prev_digest_in_the_manifest_is_detected(copy: Path) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    stream = next(iter(manifest["streams"]))
    manifest["streams"][stream]["prev_digest"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = verify(Settings(copy.parent / "x"), copy)
    assert code == 1
    assert f"stream {stream} v1: digest mismatch" in err


def test_a_manifest_whose_filters_contradict_partial_is_refused(copy: Path) -> None:
    # a "whole" export with a session filter would be checked against the store through
    # that filter only: a session dropped from it (with the chain and counts redone)
    # would go unseen by --against-store
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["partial"] is False
    manifest["filters"]["sessions"] = list(manifest["streams"])[:1]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = verify(Settings(copy.parent / "x"), copy)
    assert code == 1
    assert "'partial' is False but its filters" in err


def _drop(key: str) -> object:
    return lambda m: m.pop(key)


@pytest.mark.parametrize("edit", [
    pytest.param(_drop("store_head_position"), id="no-store-head"),
    pytest.param(_drop("data_format"), id="no-data-format"),
    pytest.param(lambda m: m.update(data_format="csv"), id="unknown-data-format"),
    pytest.param(lambda m: m["files"][0].update(path=5), id="file-path-not-a-string"),
    pytest.param(lambda m: next(iter(m["streams"].values())).update(count="x"), id="count-not-a-number"),
])
def test_a_garbled_manifest_is_a_failure_not_a_traceback(
    copy: Path, tmp_path: Path, edit: object
) -> None:
    """Also with --against-store, which read these fields without checking them."""
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)  # type: ignore[operator]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    settings = Settings(tmp_path / "store")
    for extra in ((), ("--against-store",)):
        code, _, err = verify(settings, copy, *extra)
        assert code == 1 and "Traceback" not in err, err
        assert err.startswith("FAIL manifest.json: "), err


@pytest.mark.parametrize("edit", [
    pytest.param(lambda m: m.update(first_position=m["first_position"] + 1), id="first-position"),
    pytest.param(lambda m: m.update(last_position=m["last_position"] - 1), id="last-position"),
    pytest.param(lambda m: m.update(store_head_position=m["last_position"] - 1),
                 id="store-head-before-the-last-row"),
    pytest.param(lambda m: m.update(store_head_position=m["last_position"] + 100),
                 id="store-head-past-a-whole-export"),
    pytest.param(lambda m: m.update(digest_rule="digest = sha256(canonical)"), id="digest-rule"),
    pytest.param(lambda m: m.update(link_rule="none"), id="link-rule"),
    pytest.param(lambda m: m.update(created_at="yesterday"), id="created-at"),
])
def test_manifest_fields_the_rows_determine_are_checked(copy: Path, edit: object) -> None:
    """Each of these top-level fields could be changed without ``verify PATH`` noticing."""
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)  # type: ignore[operator]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert first_failure(copy).startswith("FAIL manifest.json: ")


def forge(out: Path, rows: list[dict], manifest: dict) -> None:  # type: ignore[type-arg]
    """Write ``rows`` as the export's data, with every digest chained from the manifest's
    ``prev_digest``, every link, head, count and file entry redone (a consistent forger)."""
    from ledger.exports.records import chain, link

    digests: dict[str, str] = {}
    previous = ""
    streams: dict[str, dict] = {}  # type: ignore[type-arg]
    for r in rows:
        d = manifest["streams"][r["stream_id"]]
        r["digest"] = chain(digests.get(r["stream_id"], d["prev_digest"]), r["canonical"].encode())
        digests[r["stream_id"]] = r["digest"]
        previous = r["link"] = link(previous, r["position"], r["topic"], r["digest"])
        h = streams.setdefault(r["stream_id"], {**d, "count": 0})
        h.update(count=h["count"] + 1, head_version=r["version"], head_digest=r["digest"],
                 head_position=r["position"])
    path = data_file(out)
    write_file(path, rows, fmt_of(out))
    manifest.update(streams=streams, stream_count=len(streams), total=len(rows),
                    link_head=previous, first_position=rows[0]["position"],
                    last_position=rows[-1]["position"])
    manifest["files"][0].update(
        records=len(rows), first_position=rows[0]["position"],
        last_position=rows[-1]["position"], bytes=path.stat().st_size,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_session_export_is_checked_against_its_filters(tmp_path: Path, fmt: str) -> None:
    """Without the store: a session the filters name cannot be dropped, nor a stream
    that they do not name added, nor a stream's v1 be chained from a made-up digest
    (each passed ``verify PATH`` when the rest was redone consistently)."""
    settings = Settings(tmp_path / "data")
    cli(settings, "import", str(SPOTTER / "short.jsonl"), str(SPOTTER / "tool_heavy.jsonl"))
    streams = sorted({s for _, s, _ in store_rows(settings)})
    assert len(streams) == 2
    out = tmp_path / "out"
    export(settings, fmt, out, "--session", streams[0], "--session", streams[1])
    assert verify(settings, out)[0] == 0
    rows = read_rows(out)

    dropped = tmp_path / "dropped"
    shutil.copytree(out, dropped)
    manifest = json.loads((out / "manifest.json").read_text())
    forge(dropped, [r for r in rows if r["stream_id"] != streams[1]], manifest)
    line = first_failure(dropped)
    assert line.startswith(f"FAIL manifest.json: stream {streams[1]}: a session the "), line

    added = tmp_path / "added"
    shutil.copytree(out, added)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["filters"]["sessions"] = [streams[0]]  # the other stream is now one too many
    forge(added, [dict(r) for r in rows], manifest)
    first = next(i for i, r in enumerate(rows) if r["stream_id"] == streams[1])
    line = first_failure(added)
    assert names(line, added, first + 1, rows[first]), line
    assert "not one of the sessions" in line

    made_up = tmp_path / "made-up"
    shutil.copytree(out, made_up)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["streams"][streams[0]]["prev_digest"] = "0" * 64
    forge(made_up, [dict(r) for r in rows], manifest)
    line = first_failure(made_up)
    assert line.startswith("FAIL manifest.json: ") and f"stream {streams[0]} v" in line, line
    assert "first_version 1 with prev_digest '000000000000'" in line, line


def test_jsonl_changed_byte_and_truncation(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "jsonl"
    shutil.copytree(exports["jsonl"], out)
    path = out / "events.jsonl"
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    i = len(lines) // 2
    rec = json.loads(lines[i])
    # a changed byte inside the canonical text (still valid JSON)
    key = b'\\"agent\\":\\"'
    at = sum(map(len, lines[:i])) + lines[i].index(key) + len(key)
    data = bytearray(original)
    data[at] ^= 0x20
    path.write_bytes(bytes(data))
    line = first_failure(out)
    assert names(line, out, i + 1, rec), line
    # a changed byte that breaks the JSON of the line
    data = bytearray(original)
    data[sum(map(len, lines[:i]))] ^= 0x01  # '{' -> 'z'
    path.write_bytes(bytes(data))
    assert first_failure(out).startswith(f"FAIL events.jsonl row {i + 1}: line is not valid JSON")
    # truncated in the middle of a line
    cut = sum(map(len, lines[:i])) + len(lines[i]) // 2
    path.write_bytes(original[:cut])
    assert first_failure(out).startswith(f"FAIL events.jsonl row {i + 1}: last line is cut short")
    # truncated at a line boundary: the heads and counts name what is missing
    path.write_bytes(b"".join(lines[:i]))
    code, _, err = verify(Settings(out.parent / "x"), out)
    assert code == 1
    assert f"{i} rows" in err and "file truncated" in err


def test_parquet_changed_byte_and_truncation(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "parquet"
    shutil.copytree(exports["parquet"], out)
    path = out / "events.parquet"
    original = path.read_bytes()
    meta = pq.ParquetFile(path).metadata
    column = meta.schema.names.index("canonical")
    chunk = meta.row_group(0).column(column)
    data = bytearray(original)
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0x20
    path.write_bytes(bytes(data))
    line = first_failure(out)
    # named: the first row of the batch whose page fails its checksum (rows before it verified)
    row = int(line.removeprefix("FAIL events.parquet row ").split(":")[0])
    rec = read_rows(exports["parquet"])[row - 1]
    assert line.startswith(f"FAIL events.parquet row {row}: position {rec['position']}: "), line
    assert "row group 0" in line and "cannot be read" in line and "CRC" in line
    path.write_bytes(original[: len(original) * 2 // 3])
    line = first_failure(out)
    assert line.startswith("FAIL events.parquet: file cannot be opened as Parquet"), line


# -- partial exports ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_session_export_verifies_on_its_own(
    settings: Settings, services: Services, tmp_path: Path, fmt: str
) -> None:
    import_fixtures(services)
    heads = index_heads(settings)
    stream = max(heads, key=lambda s: heads[s][0])  # the longest session
    manifest = export(settings, fmt, tmp_path / "out", "--session", stream)
    assert manifest["partial"] is True
    assert list(manifest["streams"]) == [stream]
    assert manifest["total"] == heads[stream][0]
    assert verify(settings, tmp_path / "out")[0] == 0
    assert verify(settings, tmp_path / "out", "--against-store")[0] == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_since_export_of_a_stream_cut_in_the_middle_verifies(
    settings: Settings, services: Services, tmp_path: Path, fmt: str
) -> None:
    """The first half of a transcript is imported, then (after ``since``) the rest: the
    export holds the stream from its middle and chains from the digest before it."""
    source = SPOTTER / "tool_heavy.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    half = tmp_path / "half" / source.name
    half.parent.mkdir()
    half.write_bytes(b"".join(lines[: len(lines) // 2]))
    import_fixtures(services, half)
    before = {p for p, _, _ in store_rows(settings)}
    time.sleep(0.05)
    since = datetime.now(UTC)
    time.sleep(0.05)
    import_fixtures(services, source)
    rows = store_rows(settings)
    new = [r for r in rows if r[0] not in before]
    assert new and len(new) < len(rows)
    manifest = export(settings, fmt, tmp_path / "out", "--since", since.isoformat())
    assert manifest["partial"] is True
    assert manifest["total"] == len(new)
    ((stream, h),) = manifest["streams"].items()
    assert {s for _, s, _ in new} == {stream}
    assert h["first_version"] == new[0][2] > 1
    assert h["prev_digest"] == event_digest(settings, stream, h["first_version"] - 1)
    assert verify(settings, tmp_path / "out")[0] == 0
    assert verify(settings, tmp_path / "out", "--against-store")[0] == 0
    # a manifest whose since is later than the first exported event's recorded time
    # contradicts its rows (it passed verify PATH)
    first = read_rows(tmp_path / "out")[0]
    recorded = datetime.fromisoformat(json.loads(first["canonical"])["timestamp"])
    manifest["filters"]["since"] = (recorded + timedelta(microseconds=1)).isoformat()
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    line = first_failure(tmp_path / "out")
    assert names(line, tmp_path / "out", 1, first) and "before the manifest's since" in line, line


def event_digest(settings: Settings, stream: str, version: int) -> str:
    q = "SELECT digest FROM {t} WHERE stream_id = {p} AND version = {p}"
    if settings.database_url:
        with psycopg.connect(PG_URL) as conn:
            t = f'"{settings.database_schema}".event_index'
            return conn.execute(q.format(t=t, p="%s"), (stream, version)).fetchone()[0]
    with sqlite3.connect(settings.data_dir / "views.db") as db:
        return db.execute(q.format(t="event_index", p="?"), (stream, version)).fetchone()[0]


def test_bad_since_is_a_clear_error(settings: Settings, tmp_path: Path) -> None:
    r = cli(settings, "export", "--format", "jsonl", "--output", str(tmp_path / "o"),
            "--since", "yesterday", check=False)
    assert r.returncode == 2
    assert "not an ISO-8601 time" in r.stderr.decode()


# -- export anchors protect the store -----------------------------------------------------


def test_export_anchors_reveal_a_cut_tail_after_the_event_index_is_rebuilt(
    tmp_path: Path,
) -> None:
    settings = Settings(tmp_path / "data")
    cli(settings, "import", str(SPOTTER))
    export(settings, "jsonl", tmp_path / "out")
    anchors = list((settings.data_dir / "anchors").glob("export-*.json"))
    assert len(anchors) == 1
    position, stream, version = store_rows(settings)[-1]
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        db.execute("DELETE FROM stored_events WHERE rowid = ?", (position,))
    # a rebuild from the cut log is refused: it would drop the lost event's anchor
    refused = cli(settings, "projections", "rebuild", "event_index", check=False)
    assert refused.returncode == 1
    assert f"stream {stream} v{version} at position {position}" in refused.stderr.decode()
    # the read models deleted instead (and rebuilt from the cut log on the next read):
    # the event_index no longer knows the lost event, the export's anchors still do
    (settings.data_dir / "views.db").unlink()
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1
    assert f"FAIL stream {stream} v{version} at position {position}:" in r.stderr.decode()
    # control: without the export's anchors the cut would go unnoticed
    shutil.rmtree(settings.data_dir / "anchors")
    assert cli(settings, "verify", check=False).returncode == 0
    # and with no anchors at all, verify says so
    (settings.data_dir / "views.db").unlink()
    unanchored = cli(settings, "verify", check=False)
    assert unanchored.returncode == 0
    assert b"0 anchors checked" in unanchored.stdout
    assert unanchored.stderr.startswith(b"warning: nothing anchors this log")
    # and an export of the cut store no longer matches the earlier export's heads
    assert verify(settings, tmp_path / "out", "--against-store")[0] == 1


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_export_anchors_apply_only_to_the_store_they_came_from(
    settings: Settings, tmp_path: Path
) -> None:
    # one data directory, two stores: its SQLite file and a PostgreSQL schema
    sqlite = Settings(settings.data_dir)
    spotter = FIXTURES / "spotter-claude-transcripts"
    cli(sqlite, "import", str(spotter / "short.jsonl"))
    cli(sqlite, "export", "--format", "jsonl", "--output", str(tmp_path / "out"))
    cli(settings, "import", str(spotter / "tool_heavy.jsonl"))
    cli(settings, "sessions", "--json")
    assert cli(settings, "verify", check=False).returncode == 0, "the other store's anchors"
    assert cli(sqlite, "verify", check=False).returncode == 0


def other_url(url: str) -> str:
    """The same PostgreSQL server under the loopback host's other name:
    ``127.0.0.1`` <-> ``localhost``."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    host = "localhost" if u.host in ("127.0.0.1", None) else "127.0.0.1" if u.host == "localhost" else u.host
    return u.set(host=host).render_as_string(hide_password=False)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_export_anchors_belong_to_the_store_not_to_the_url_it_was_reached_by(
    settings: Settings, tmp_path: Path
) -> None:
    """An export taken through ``localhost`` anchors a verify through ``127.0.0.1`` (it
    did not: the anchor file was matched by the URL's text and left out as another
    store's, so a tail cut after the export, with the read models rebuilt, passed)."""
    from dataclasses import replace

    via_other = replace(settings, database_url=other_url(settings.database_url or ""))
    cli(via_other, "import", str(SPOTTER / "short.jsonl"))
    export(via_other, "jsonl", tmp_path / "out")
    position, stream, version = store_rows(settings)[-1]
    schema = settings.database_schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{schema}".hookledger_events WHERE notification_id = %s',
                     (position,))
        # the read models rebuilt from the cut log: no event_index row, no tracking
        # position remembers the lost event; only the export's anchor does
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename NOT IN "
            "('hookledger_events', 'hookledger_store')", (schema,))]
        conn.execute(", ".join(f'"{schema}"."{t}"' for t in tables).join(
            ("DROP TABLE ", " CASCADE")))
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1, r.stdout
    assert f"FAIL stream {stream} v{version} at position {position}:" in r.stderr.decode()
    # a file written before anchors kept the store's id names it by URL only
    (anchor,) = (settings.data_dir / "anchors").glob("export-*.json")
    old = json.loads(anchor.read_text())
    del old["store_id"]
    assert "localhost" in old["store"] or "localhost" in settings.database_url  # type: ignore[operator]
    anchor.write_text(json.dumps(old))
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1, r.stdout
    assert f"FAIL stream {stream} v{version} at position {position}:" in r.stderr.decode()


def test_export_anchor_files_name_the_store_by_its_own_id(tmp_path: Path) -> None:
    """The id lives in the store; removing it does not free the store from the anchors
    recorded for its place (the URL form still names it), and a store elsewhere (another
    data directory's store, sharing this one's anchor files) is told they are not its."""
    settings = Settings(tmp_path / "data")
    cli(settings, "import", str(SPOTTER / "short.jsonl"))
    export(settings, "jsonl", tmp_path / "out")
    (anchor,) = (settings.data_dir / "anchors").glob("export-*.json")
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        (store_id,) = db.execute("SELECT id FROM hookledger_store").fetchone()
    assert json.loads(anchor.read_text())["store_id"] == store_id
    position, stream, version = store_rows(settings)[-1]
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        db.execute("DELETE FROM stored_events WHERE rowid = ?", (position,))
        db.execute("DROP TABLE hookledger_store")
    (settings.data_dir / "views.db").unlink()
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1
    assert f"FAIL stream {stream} v{version} at position {position}:" in r.stderr.decode()
    # the anchor file names a store that is not the one verified (another id, another URL)
    data = json.loads(anchor.read_text())
    data["store"] = "sqlite:/elsewhere/events.db"
    anchor.write_text(json.dumps(data))
    r = cli(settings, "verify", check=False)
    assert r.returncode == 0, r.stderr
    assert f"note: 1 export anchor file of other stores ({store_id}) not checked" in r.stderr.decode()


def interleaved_store(settings: Settings, tmp_path: Path) -> None:
    """Two sessions whose events interleave in the log (the first halves of two
    transcripts, then the rest of each), as concurrent sessions' hooks do."""
    sources = [SPOTTER / "short.jsonl", SPOTTER / "tool_heavy.jsonl"]
    for source in sources:
        lines = source.read_bytes().splitlines(keepends=True)
        half = tmp_path / "half" / source.name
        half.parent.mkdir(exist_ok=True)
        half.write_bytes(b"".join(lines[: len(lines) // 2]))
        cli(settings, "import", str(half))
    for source in sources:
        cli(settings, "import", str(source))


def swappable_pair(rows: list[tuple[int, str, int]]) -> tuple[int, int]:
    """Two neighbouring positions of different streams, neither a stream's last event:
    swapping them keeps every stream's versions in order, so no chain shows it."""
    heads = {stream: position for position, stream, _ in rows}
    for (p1, s1, _), (p2, s2, _) in itertools.pairwise(rows):
        if s1 != s2 and heads[s1] != p1 and heads[s2] != p2:
            return p1, p2
    raise AssertionError("no interleaved streams")


def swap_positions(settings: Settings, p1: int, p2: int) -> None:
    """Swap the log positions of two stored events, in the store itself."""
    spare = 10**9
    if settings.database_url:
        table = f'"{settings.database_schema}".hookledger_events'
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for old, new in ((p1, spare), (p2, p1), (spare, p2)):
                conn.execute(f"UPDATE {table} SET notification_id = %s WHERE notification_id = %s",
                             (new, old))
        return
    with sqlite3.connect(settings.data_dir / "events.db") as db:
        for old, new in ((p1, spare), (p2, p1), (spare, p2)):
            db.execute("UPDATE stored_events SET rowid = ? WHERE rowid = ?", (new, old))


def drop_read_models(settings: Settings) -> None:
    """The read models gone (views.db deleted / their tables dropped): only the store
    and the export anchors are left."""
    if not settings.database_url:
        (settings.data_dir / "views.db").unlink()
        return
    schema = settings.database_schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename NOT IN "
            "('hookledger_events', 'hookledger_store')", (schema,))]
        conn.execute(", ".join(f'"{schema}"."{t}"' for t in tables).join(
            ("DROP TABLE ", " CASCADE")))


def test_export_anchors_reveal_two_streams_events_swapped_in_the_log(
    settings: Settings, tmp_path: Path
) -> None:
    """Two events of different streams swapped in the store, neither a stream's head:
    every chain still holds, and the anchor files kept only stream heads, so with the
    read models gone the swap passed verify. The anchor file now keeps the export's link
    head, which verify recomputes over the store's rows."""
    interleaved_store(settings, tmp_path)
    rows = store_rows(settings)
    p1, p2 = swappable_pair(rows)
    # a partial export's link covers the rows its filters chose: recomputed as it chose
    # them, it holds on the honest store
    stream = next(s for p, s, _ in rows if p == p1)
    export(settings, "parquet", tmp_path / "one", "--session", stream)
    (partial,) = (settings.data_dir / "anchors").glob("export-*.json")
    since = json.loads(read_rows(tmp_path / "one")[1]["canonical"])["timestamp"]
    export(settings, "jsonl", tmp_path / "since", "--since", since)
    manifest = export(settings, "jsonl", tmp_path / "out")
    assert p2 <= manifest["last_position"]
    r = cli(settings, "verify", check=False)
    assert r.returncode == 0 and b"anchors checked" in r.stdout, r.stderr
    swap_positions(settings, p1, p2)
    drop_read_models(settings)
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1, r.stdout
    (anchor,) = (a for a in (settings.data_dir / "anchors").glob("export-*.json")
                 if json.loads(a.read_text())["export"] == str(tmp_path / "out"))
    err = r.stderr.decode()
    # named at the first position that differs, found against the export itself
    line = next(x for x in err.splitlines() if anchor.name in x)
    assert line.startswith(f"FAIL log at position {p1} (stream "), err
    assert f"row {p1}: row differs from the store's event" in line, err
    assert partial.name in err, err  # the session's export sees it too
    for a in (settings.data_dir / "anchors").glob("export-*.json"):
        if a != anchor:
            a.unlink()
    # with the export gone, the anchor file alone still shows it (up to its last position)
    shutil.rmtree(tmp_path / "out")
    r = cli(settings, "verify", check=False)
    assert r.returncode == 1, r.stdout
    err = r.stderr.decode()
    assert err.startswith(f"FAIL log up to position {manifest['last_position']}: "), err
    assert anchor.name in err, err
    # an anchor file written before it kept the link (heads only) is still read
    old = json.loads(anchor.read_text())
    del old["link"]
    anchor.write_text(json.dumps(old))
    r = cli(settings, "verify", check=False)
    assert r.returncode == 0, r.stderr
    assert b"anchors checked" in r.stdout


def test_verify_path_checks_the_manifest_against_a_data_directorys_anchors(
    copy: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    """``verify PATH --anchors DATA_DIR``: an export redone consistently by a forger
    (one event altered, every digest, link, head and sha256 redone) passes ``verify
    PATH``; the anchor file the store wrote when the export was taken (kept in its data
    directory) does not match its heads and link head."""
    data_dir = exports["jsonl"].parent / "data"
    no_store = Settings(tmp_path / "no-store")
    code, out, err = verify(no_store, copy, "--anchors", str(data_dir))
    assert code == 0, err
    assert "matches export anchor file export-" in out
    rows = read_rows(copy)
    i = len(rows) // 2
    event = json.loads(rows[i]["canonical"])
    event["agent"] = "forged"
    rows[i]["canonical"] = json.dumps(event, sort_keys=True, separators=(",", ":"),
                                      ensure_ascii=False)
    forge(copy, rows, json.loads((copy / "manifest.json").read_text()))
    assert verify(no_store, copy)[0] == 0, "a consistent forgery passes on its own"
    code, out, err = verify(no_store, copy, "--anchors", str(data_dir))
    assert code == 1, out
    assert "FAIL manifest.json: link_head " in err, err
    assert f"FAIL manifest.json: stream {rows[i]['stream_id']}: head v" in err, err
    # its created_at changed too: no anchor file records it
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["created_at"] = "2026-01-01T00:00:00Z"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = verify(no_store, copy, "--anchors", str(data_dir))
    assert code == 1 and "no export anchor file in " in err, err
    # a data directory without anchors, or --anchors with no export, is refused
    (tmp_path / "empty").mkdir()
    assert verify(no_store, exports["jsonl"], "--anchors", str(tmp_path / "empty"))[0] == 1
    r = cli(no_store, "verify", "--anchors", str(data_dir), check=False)
    assert r.returncode == 2 and b"give its directory as PATH" in r.stderr
