"""``hookledger verify PATH``: check an export on its own, with no store.

Checks, in one pass over the data file (rows in file order, numbered from 1):

1. each row reads (JSON line / Parquet row group with page checksums) and has the
   columns of :data:`ledger.exports.writer.COLUMNS` with the right types;
2. ``canonical`` is JSON whose ``originator_id``/``originator_version``/``kind`` equal the
   row's ``stream_id``/``version``/``kind``, and ``topic`` names that kind;
3. positions strictly increase; each stream's versions run on by one from the manifest's
   ``first_version``;
4. every chain link: ``digest == sha256(prev_digest + "\\n" + canonical)``, starting from
   the manifest's ``prev_digest`` of the stream (``""`` for a whole stream);
5. the export's own link chain (``link``) over position, topic and digest;
6. the manifest: format, rules and created_at; every count (total, per file, per stream),
   first/last positions, the store head against the last row, every stream's head
   (version, digest, position) and start (``prev_digest`` empty exactly at v1), the link
   head, and each data file's size and sha256;
7. the filters: each stream is one the ``sessions`` name (each of them present, without
   ``since``), its first row recorded at or after ``since``.

Problems name the file, the row (line), and the record's position, stream and version.
:func:`compare_with_store` additionally checks the export record by record against a store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import ApplicationRecorder, Mapper

from ledger.exports.records import (
    Filters,
    StreamHead,
    chain,
    kind_of,
    link,
    parse_time,
    select,
)
from ledger.exports.writer import (
    COLUMNS,
    DATA_FILES,
    DIGEST_RULE,
    FORMAT,
    FORMAT_VERSION,
    LINK_RULE,
    MANIFEST,
    as_row,
)
from ledger.verify import LinkAnchor

INT_COLUMNS = ("position", "version")
BATCH_ROWS = 1000
"""Parquet rows turned into Python objects at a time."""


@dataclass
class Problem:
    file: str
    row: int | None
    message: str
    position: int | None = None
    stream_id: str | None = None
    version: int | None = None

    def __str__(self) -> str:
        where = self.file + (f" row {self.row}" if self.row is not None else "")
        record = []
        if self.position is not None:
            record.append(f"position {self.position}")
        if self.stream_id is not None:
            version = f" v{self.version}" if self.version else ""
            record.append(f"stream {self.stream_id}{version}")
        return f"{where}{': ' + ' '.join(record) if record else ''}: {self.message}"


@dataclass
class ExportReport:
    records: int = 0
    streams: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _Stream:
    __slots__ = ("count", "digest", "first_version", "position", "version")

    def __init__(self, first_version: int, prev_digest: str) -> None:
        self.first_version = first_version
        self.version = first_version - 1
        self.digest = prev_digest
        self.count = 0
        self.position = 0


def read_manifest(path: Path) -> dict[str, Any]:
    """The export's manifest. Raises ValueError naming what is wrong with it."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path / MANIFEST} cannot be read: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path / MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"unknown format_version {manifest.get('format_version')!r}")
    for key, kind in (("files", list), ("streams", dict), ("total", int), ("partial", bool)):
        if not isinstance(manifest.get(key), kind):
            raise ValueError(f"{path / MANIFEST}: {key!r} missing or not a {kind.__name__}")
    entries = [*manifest["files"], *manifest["streams"].values()]
    if not manifest["files"] or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{path / MANIFEST}: 'files' and 'streams' must hold objects")
    if manifest.get("data_format") not in DATA_FILES:
        raise ValueError(f"{path / MANIFEST}: 'data_format' is not one of {', '.join(DATA_FILES)}")
    if not _is_int(manifest.get("store_head_position")):
        raise ValueError(f"{path / MANIFEST}: 'store_head_position' missing or not an integer")
    if not all(isinstance(e.get("path"), str) for e in manifest["files"]):
        raise ValueError(f"{path / MANIFEST}: a file's 'path' is missing or not a string")
    for stream, head in manifest["streams"].items():
        if not all(
            (_is_int if kind is int else lambda v: isinstance(v, str))(head.get(key))
            for key, kind in STREAM_FIELDS
        ):
            raise ValueError(
                f"{path / MANIFEST}: stream {stream}: "
                f"{', '.join(key for key, _ in STREAM_FIELDS)} missing or mistyped"
            )
    try:
        filters = Filters.from_dict(manifest.get("filters") or {})
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path / MANIFEST}: 'filters' cannot be read: {e}") from e
    if filters.partial != manifest["partial"]:
        # a "whole" export whose filters leave streams out would be compared with the
        # store through those filters only, and a dropped session would go unseen
        raise ValueError(
            f"{path / MANIFEST}: 'partial' is {manifest['partial']} but its filters "
            f"{filters.as_dict()} say {filters.partial}"
        )
    return manifest


STREAM_FIELDS = (
    ("prev_digest", str), ("first_version", int), ("count", int), ("head_version", int),
    ("head_digest", str), ("head_position", int),
)
"""The fields of each manifest ``streams`` entry (:class:`StreamHead`) and their types."""


def _is_time(value: Any) -> bool:
    """Whether ``value`` is an ISO-8601 time in UTC as the writer spells it (``…Z``)."""
    if not isinstance(value, str) or not value.endswith("Z"):
        return False
    try:
        parse_time(value)
    except ValueError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def verify_export(path: Path) -> ExportReport:
    """Verify the export directory ``path``. Never raises for bad content: every problem
    is in the report (a missing or unreadable manifest is one problem)."""
    report = ExportReport()
    try:
        manifest = report.manifest = read_manifest(path)
    except ValueError as e:
        report.problems.append(Problem(MANIFEST, None, str(e)))
        return report
    problems = report.problems
    declared = manifest["streams"]
    streams: dict[str, _Stream] = {}
    broken: set[str] = set()
    last_position = 0
    first_position: int | None = None
    previous_link = ""
    filters = Filters.from_dict(manifest.get("filters") or {})
    link_broken = False

    def problem(row: int | None, msg: str, rec: dict[str, Any] | None = None, *, file: str) -> None:
        stream = rec.get("stream_id") if rec else None
        stream = stream if isinstance(stream, str) else None
        if stream is not None and stream in broken:
            return
        if stream is not None:
            broken.add(stream)
        problems.append(
            Problem(file, row, msg, rec.get("position") if rec else None, stream,
                    rec.get("version") if rec else None)
        )

    for entry in manifest["files"]:
        name = entry.get("path", "?")
        file_path = path / name
        if not file_path.is_file() or file_path.parent.resolve() != path.resolve():
            problem(None, "data file listed in the manifest is missing", file=name)
            continue
        count, first, last = 0, None, None
        for row, rec, error in _rows(file_path, manifest.get("data_format", "jsonl")):
            if error is not None:
                problem(row, error, rec, file=name)
                continue
            assert rec is not None
            count += 1
            report.records += 1
            first = rec["position"] if first is None else first
            first_position = rec["position"] if first_position is None else first_position
            last = rec["position"]
            stream_id = rec["stream_id"]
            if rec["position"] <= last_position:
                problem(row, f"position is not after the previous row's {last_position}: "
                             "rows reordered or duplicated", rec, file=name)
            last_position = max(last_position, rec["position"])
            expected_link = link(previous_link, rec["position"], rec["topic"], rec["digest"])
            if expected_link != rec["link"] and not link_broken:
                link_broken = True
                problem(row, "link mismatch: a row before it was dropped, added or reordered, "
                             "or its position/topic changed", rec, file=name)
            previous_link = rec["link"]
            s = streams.get(stream_id)
            if s is None:
                d = declared.get(stream_id)
                if d is None:
                    problem(row, "stream is not in the manifest", rec, file=name)
                    d = {"first_version": rec["version"], "prev_digest": ""}
                first_version, prev_digest = d.get("first_version"), d.get("prev_digest")
                if not isinstance(first_version, int) or not isinstance(prev_digest, str):
                    problem(row, "the manifest's first_version/prev_digest of this stream are "
                                 "missing or malformed", rec, file=name)
                    first_version, prev_digest = rec["version"], ""
                s = streams[stream_id] = _Stream(first_version, prev_digest)
                message = _check_selected(rec, filters)
                if message:
                    problem(row, message, rec, file=name)
            message = _check_record(rec, s)
            if message:
                problem(row, message, rec, file=name)
            s.count += 1
            s.version, s.digest, s.position = rec["version"], rec["digest"], rec["position"]
        if (count, first, last) != (entry.get("records"), entry.get("first_position"),
                                    entry.get("last_position")):
            problem(None, f"file holds {count} rows, positions {first}..{last}; the manifest "
                          f"says {entry.get('records')}, {entry.get('first_position')}.."
                          f"{entry.get('last_position')} (rows dropped, added or file truncated)",
                    file=name)
        size = file_path.stat().st_size
        digest = _sha256_file(file_path)
        if (size, digest) != (entry.get("bytes"), entry.get("sha256")):
            problem(None, f"file content differs from the manifest (bytes {size} vs "
                          f"{entry.get('bytes')}, sha256 {digest[:12]}… vs "
                          f"{str(entry.get('sha256'))[:12]}…)", file=name)
    report.streams = len(streams)
    _check_manifest(manifest, streams, report, previous_link,
                    (first_position, last_position if report.records else None))
    return report


def _check_record(rec: dict[str, Any], s: _Stream) -> str | None:
    try:
        state = orjson.loads(rec["canonical"])
    except orjson.JSONDecodeError:
        return "canonical is not valid JSON (altered)"
    if not isinstance(state, dict):
        return "canonical is not a JSON object (altered)"
    if (state.get("originator_id"), state.get("originator_version"), state.get("kind")) != (
        rec["stream_id"], rec["version"], rec["kind"]
    ):
        return "stream_id/version/kind columns differ from the canonical state"
    if kind_of(rec["topic"]) != rec["kind"]:
        return f"topic {rec['topic']!r} does not name kind {rec['kind']!r}"
    if rec["version"] != s.version + 1:
        return (f"expected version {s.version + 1} of the stream: an event was dropped "
                "or reordered")
    if chain(s.digest, rec["canonical"].encode("utf-8")) != rec["digest"]:
        return "digest mismatch: the event was altered, or an earlier one of its stream"
    return None


def _check_selected(rec: dict[str, Any], filters: Filters) -> str | None:
    """Whether ``rec``, the first exported row of its stream, is one the manifest's
    filters select: a stream they name, starting at an event recorded at or after
    ``since``."""
    if filters.sessions and rec["stream_id"] not in filters.sessions:
        return "stream is not one of the sessions the manifest's filters name"
    if filters.since is not None:
        try:
            recorded = parse_time(orjson.loads(rec["canonical"])["timestamp"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return "the stream's first row has no readable recorded time (timestamp)"
        if recorded < filters.since:
            return (f"the stream's first row was recorded at {recorded.isoformat()}, before "
                    f"the manifest's since {filters.since.isoformat()}")
    return None


def _check_manifest(
    manifest: dict[str, Any], streams: dict[str, _Stream], report: ExportReport, link_head: str,
    positions: tuple[int | None, int | None],
) -> None:
    def fail(message: str, stream: str | None = None, s: _Stream | None = None) -> None:
        report.problems.append(
            Problem(MANIFEST, None, message, s.position if s else None, stream,
                    s.version if s else None)
        )

    declared: dict[str, Any] = manifest["streams"]
    if (manifest.get("first_position"), manifest.get("last_position")) != positions:
        fail(f"the rows' positions run {positions[0]}..{positions[1]}; the manifest says "
             f"{manifest.get('first_position')}..{manifest.get('last_position')}")
    last, head = positions[1] or 0, manifest["store_head_position"]
    if head < last or (not manifest["partial"] and head != last):
        fail(f"store_head_position {head} is not the last row's position {last}"
             if not manifest["partial"] else
             f"store_head_position {head} is before the last row's position {last}")
    if (manifest.get("digest_rule"), manifest.get("link_rule")) != (DIGEST_RULE, LINK_RULE):
        fail(f"digest_rule/link_rule differ from format version {FORMAT_VERSION}'s rules")
    if not _is_time(manifest.get("created_at")):
        fail(f"created_at {manifest.get('created_at')!r} is not an ISO-8601 UTC time")
    filters = Filters.from_dict(manifest.get("filters") or {})
    if filters.sessions and filters.since is None:
        for stream_id in sorted(set(filters.sessions) - set(streams)):
            fail("a session the manifest's filters name has no rows in the export (dropped)",
                 stream_id)
    if report.records != manifest["total"]:
        fail(f"the data holds {report.records} records; the manifest's total is "
             f"{manifest['total']}")
    counted = sum(int(d.get("count", 0)) for d in declared.values() if isinstance(d, dict))
    if counted != manifest["total"] or manifest.get("stream_count") != len(declared):
        fail("the manifest's per-stream counts do not add up to its totals")
    if link_head != manifest.get("link_head"):
        fail("the last row's link differs from the manifest's link_head (rows dropped at "
             "the end, or the file truncated)")
    for stream_id, d in declared.items():
        s = streams.get(stream_id)
        if s is None:
            fail("stream in the manifest has no rows in the export (dropped)", stream_id)
            continue
        want = StreamHead(**{k: d.get(k) for k in StreamHead.__dataclass_fields__})
        got = (s.count, s.version, s.digest, s.position)
        if got != (want.count, want.head_version, want.head_digest, want.head_position):
            fail(f"the export's last row of this stream is v{s.version} at position "
                 f"{s.position} ({s.count} rows); the manifest's head is v{want.head_version} "
                 f"at position {want.head_position} ({want.count} rows): rows missing or added",
                 stream_id, s)
        if not manifest["partial"] and (want.first_version != 1 or want.prev_digest != ""):
            fail("a whole (not partial) export must start every stream at v1 from \"\"",
                 stream_id, s)
        elif (want.first_version == 1) != (want.prev_digest == ""):
            fail(f"first_version {want.first_version} with prev_digest "
                 f"{want.prev_digest[:12]!r}: only v1 starts from \"\"", stream_id, s)


Row = tuple[int | None, dict[str, Any] | None, str | None]


def _rows(path: Path, fmt: str) -> Iterator[Row]:
    """(1-based row, record, error) of every row of one data file (row None: the whole
    file could not be read)."""
    if fmt == "parquet":
        yield from _parquet_rows(path)
        return
    with path.open("rb") as f:
        for row, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                yield row, None, "last line is cut short (no newline): file truncated"
                return
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                yield row, None, f"line is not valid JSON ({e})"
                continue
            yield row, rec, _shape_error(rec)


def _parquet_rows(path: Path) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as e:
        yield None, None, f"file cannot be opened as Parquet ({e}): truncated or altered"
        return
    row = 1
    for group in range(pf.num_row_groups):
        n = pf.metadata.row_group(group).num_rows
        group_start = row
        try:  # page checksums are verified as pages are read; rows decoded in small batches
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[group]):
                for rec in batch.to_pylist():
                    yield row, rec, _shape_error(rec)
                    row += 1
        except Exception as e:
            first: dict[str, Any] | None = None
            try:
                positions = pf.read_row_group(group, columns=["position"])
                first = positions.slice(row - group_start, 1).to_pylist()[0]
            except Exception:
                first = None
            yield row, first, (f"row group {group} (rows {row}–{group_start + n - 1}) cannot "
                               f"be read ({e}): altered bytes")
            row = group_start + n


def _shape_error(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "row is not an object"
    for c in COLUMNS:
        value = rec.get(c)
        if c in INT_COLUMNS:
            if not isinstance(value, int) or isinstance(value, bool):
                return f"column {c!r} missing or not an integer"
        elif not isinstance(value, str):
            return f"column {c!r} missing or not a string"
    return None


def compare_with_store(
    path: Path, recorder: ApplicationRecorder, mapper: Mapper[UUID]
) -> list[Problem]:
    """Problems where the export at ``path`` differs from what the store holds for the
    same filters up to the export's ``store_head_position`` (record by record over its
    data files in manifest order, then heads and counts). Empty when they match exactly.
    Raises ValueError for a bad manifest."""
    manifest = read_manifest(path)
    heads: dict[str, StreamHead] = {}
    stop = int(manifest["store_head_position"])
    store = select(recorder, mapper, Filters.from_dict(manifest["filters"]), heads, stop)
    problems: list[Problem] = []
    for entry in manifest["files"]:  # in order: together they hold the log's rows
        name = entry["path"]
        for row, rec, error in _rows(path / name, manifest["data_format"]):
            want = next(store, None)
            expected = as_row(want) if want else None
            if error is None and rec == expected:
                continue
            where = expected or rec or {}
            problems.append(Problem(
                name, row,
                "the store has no more events here" if expected is None
                else "row differs from the store's event at this place",
                where.get("position"), where.get("stream_id"), where.get("version"),
            ))
            return problems
    rest = next(store, None)
    if rest is not None:
        problems.append(Problem(name, None, "the store holds this event, the export does not",
                                rest.position, rest.stream_id, rest.version))
        return problems
    store_heads = {s: h.as_dict() for s, h in heads.items()}
    if store_heads != manifest["streams"]:
        problems.append(Problem(MANIFEST, None, "stream heads/counts differ from the store's"))
    return problems


def first_difference(
    anchor: LinkAnchor, recorder: ApplicationRecorder, mapper: Mapper[UUID]
) -> Problem | None:
    """Where the store first differs from the export whose link chain ``anchor`` keeps:
    the export's directory (``anchor.export``) compared with the store record by record,
    when it is still there, verifies on its own and ends in the anchor's link head.
    None when it cannot tell (the export moved, altered or another one)."""
    if anchor.export is None or not Path(anchor.export).is_dir():
        return None
    path = Path(anchor.export)
    report = verify_export(path)
    manifest = report.manifest
    if not report.ok or (manifest.get("link_head"), manifest.get("last_position")) != (
        anchor.head, anchor.position
    ):
        return None
    found = compare_with_store(path, recorder, mapper)
    return found[0] if found else None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
