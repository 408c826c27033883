"""Write an export: the data file (JSONL or Parquet) and ``manifest.json``.

Layout of an export directory (see docs/exports.md)::

    <output>/events.jsonl | events.parquet   one record per stored event, in log order
    <output>/manifest.json                   counts, positions, chain heads, sha256s

JSONL: one JSON object per line with the keys of :class:`ExportRecord` (``canonical`` as
a string holding the exact canonical JSON). Parquet (pyarrow): the same columns
(``canonical`` as a UTF-8 string column), zstd, page CRC checksums on, written in row
groups of at most ``ROW_GROUP_ROWS`` rows or ``ROW_GROUP_BYTES`` of canonical state, so
memory stays bounded however large the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from uuid import UUID

import orjson
from eventsourcing.persistence import ApplicationRecorder, Mapper

from ledger.exports.records import ExportRecord, Filters, StreamHead, select

FORMAT = "hookledger-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATA_FILES = {"jsonl": "events.jsonl", "parquet": "events.parquet"}
ROW_GROUP_ROWS = 20_000
ROW_GROUP_BYTES = 64 * 1024 * 1024
COLUMNS = ("position", "stream_id", "version", "kind", "topic", "digest", "link", "canonical")
DIGEST_RULE = 'digest = sha256(prev_digest + "\\n" + canonical); first prev_digest of a stream = ""'
LINK_RULE = (
    'link = sha256(prev_link + "\\n" + f"{position} {topic} {digest}"); first prev_link = ""'
)


def export(
    recorder: ApplicationRecorder,
    mapper: Mapper[UUID],
    output: Path,
    fmt: str,
    filters: Filters | None = None,
) -> dict[str, Any]:
    """Export the events of the log up to its current head into ``output`` (a directory,
    created; it must not exist or be empty), selected by ``filters`` (None: all).
    Returns the manifest (also written).

    Raises ValueError for an unknown ``fmt`` or a non-empty ``output``;
    :class:`ledger.exports.records.ExportError` when a stored event does not decode.
    """
    if fmt not in DATA_FILES:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(DATA_FILES)}")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"{output} exists and is not an empty directory")
    output.mkdir(parents=True, exist_ok=True)
    filters = filters or Filters()
    created_at = datetime.now(UTC)
    head_position = recorder.max_notification_id() or 0
    heads: dict[str, StreamHead] = {}
    records = select(recorder, mapper, filters, heads, stop=head_position)
    path = output / DATA_FILES[fmt]
    if fmt == "jsonl":
        with path.open("wb") as f:
            stats = _write_jsonl(f, records)
    else:
        stats = _write_parquet(path, records)
    stats["sha256"] = _sha256_file(path)
    stats["bytes"] = path.stat().st_size
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "data_format": fmt,
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
        "store_head_position": head_position,
        "partial": filters.partial,
        "filters": filters.as_dict(),
        "total": stats["records"],
        "stream_count": len(heads),
        "first_position": stats["first_position"],
        "last_position": stats["last_position"],
        "link_head": stats["link_head"],
        "digest_rule": DIGEST_RULE,
        "link_rule": LINK_RULE,
        "files": [{"path": path.name, **{k: v for k, v in stats.items() if k != "link_head"}}],
        "streams": {s: h.as_dict() for s, h in heads.items()},
    }
    (output / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


class _Stats:
    def __init__(self) -> None:
        self.records = 0
        self.first: int | None = None
        self.last: int | None = None
        self.link = ""

    def add(self, r: ExportRecord) -> None:
        self.records += 1
        self.first = r.position if self.first is None else self.first
        self.last = r.position
        self.link = r.link

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "first_position": self.first,
            "last_position": self.last,
            "link_head": self.link,
        }


def _write_jsonl(f: BinaryIO, records: Iterable[ExportRecord]) -> dict[str, Any]:
    stats = _Stats()
    for r in records:
        f.write(orjson.dumps(as_row(r)))
        f.write(b"\n")
        stats.add(r)
    return stats.as_dict()


def as_row(r: ExportRecord) -> dict[str, Any]:
    """The record as a JSONL object / Parquet row (``canonical`` decoded to text)."""
    return {
        "position": r.position,
        "stream_id": r.stream_id,
        "version": r.version,
        "kind": r.kind,
        "topic": r.topic,
        "digest": r.digest,
        "link": r.link,
        "canonical": r.canonical.decode("utf-8"),
    }


def parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("position", pa.int64()),
            ("stream_id", pa.string()),
            ("version", pa.int64()),
            ("kind", pa.string()),
            ("topic", pa.string()),
            ("digest", pa.string()),
            ("link", pa.string()),
            ("canonical", pa.large_string()),
        ]
    )


def _write_parquet(path: Path, records: Iterable[ExportRecord]) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    stats = _Stats()
    columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    size = 0
    with pq.ParquetWriter(path, schema, compression="zstd", write_page_checksum=True) as writer:

        def flush() -> None:
            nonlocal size
            if columns["position"]:
                writer.write_table(pa.table(columns, schema=schema), row_group_size=ROW_GROUP_ROWS)
            for v in columns.values():
                v.clear()
            size = 0

        for r in records:
            for c, v in as_row(r).items():
                columns[c].append(v)
            size += len(r.canonical)
            stats.add(r)
            if len(columns["position"]) >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                flush()
        flush()
    return stats.as_dict()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
