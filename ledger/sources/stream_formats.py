"""Detection and parsing of the Claude stream-json and Codex files for ``hookledger import``.

Called first by :func:`ledger.parsing.detect` and :func:`ledger.parsing.parse_file`.
Detection looks at the first complete lines of a file:

* ``codex.rollout``: records ``{timestamp, type, payload{...}}`` (FORMATS.md A6);
* ``codex.exec-json``: records whose ``type`` is a ``codex exec --json`` event
  (``thread.started``, ``turn.*``, ``item.*``; FORMATS.md A5);
* ``claude-code.stream-json``: records with snake_case ``session_id`` and a stream-json
  ``type`` (``system``/``assistant``/``user``/``result``; FORMATS.md A4), never the
  camelCase ``sessionId`` of transcripts; ``claude-code.stream-json-array`` for a JSON
  array of such events (or a ``.json`` file holding one event).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ledger import jsontext
from ledger.observation import Observation, Rejected
from ledger.sources import claude_stream, codex_exec, codex_rollout

FORMATS = (
    "codex.rollout",
    "codex.exec-json",
    "claude-code.stream-json",
    "claude-code.stream-json-array",
)
_HEAD_LINES = 20


def detect(path: Path, head: bytes) -> str | None:
    """One of :data:`FORMATS` for a file, from its first bytes; None for anything else."""
    if path.suffix == ".jsonl":
        # the first _HEAD_LINES lines and the rest unsplit: the same first complete
        # lines as splitting the whole head (up to 1 MiB), without copying all of it
        lines = head.split(b"\n", _HEAD_LINES)
        complete = lines[:-1] or lines
        return detect_records(_objects(complete[:_HEAD_LINES]))
    if head.lstrip()[:1] in (b"[", b"{"):
        try:
            records = jsontext.loads(head, max_depth=None)  # detection records nothing
        except orjson.JSONDecodeError:
            return None
        records = [records] if isinstance(records, dict) else records
        if (
            isinstance(records, list)
            and detect_records(records[:_HEAD_LINES]) == "claude-code.stream-json"
        ):
            return "claude-code.stream-json-array"
    return None


def detect_records(records: list[Any]) -> str | None:
    """The stream format of a few decoded records (see the module docstring), or None."""
    dicts = [r for r in records if isinstance(r, dict)]
    if any("sessionId" in r for r in dicts):
        return None
    for r in dicts:
        rtype = r.get("type")
        if not isinstance(rtype, str):
            continue
        if isinstance(r.get("payload"), dict) and "timestamp" in r:
            return "codex.rollout"
        if rtype in codex_exec.EXEC_TYPES and "session_id" not in r:
            return "codex.exec-json"
        if rtype in claude_stream.STREAM_TYPES and isinstance(r.get("session_id"), str):
            return "claude-code.stream-json"
    return None


def parse(fmt: str, path: Path, data: bytes) -> Iterator[Observation | Rejected]:
    """Observations of a file already detected as ``fmt`` (one of :data:`FORMATS`)."""
    source = str(path)
    if fmt == "codex.rollout":
        yield from codex_rollout.parse_records(data.split(b"\n"), source)
    elif fmt == "codex.exec-json":
        yield from codex_exec.parse_records(data.split(b"\n"), source)
    elif fmt == "claude-code.stream-json":
        yield from claude_stream.parse_records(data.split(b"\n"), source)
    else:
        try:
            records = jsontext.loads(data)
        except orjson.JSONDecodeError as e:
            yield Rejected(
                source,
                "file",
                f"not valid JSON: {e}",
                data,
                claude_stream.AGENT,
                claude_stream.SOURCE_FORMAT,
            )
            return
        records = records if isinstance(records, list) else [records]
        yield from claude_stream.parse_array(records, source)


def _objects(lines: list[bytes]) -> list[Any]:
    out = []
    for line in lines:
        try:
            out.append(jsontext.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out
