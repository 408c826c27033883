"""Reading a growing transcript (Claude Code, Codex rollout, Gemini CLI JSONL) from where
the last read ended (``ledger.transcript_tail``), and ``serve``'s follower doing so: the
facts are those a whole read gives, the lines read before are not read again, and a file
that changed other than by growing is read whole."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from api import transcript_follower
from api.bootstrap import build
from api.transcript_follower import TranscriptFollower
from ledger.config import Settings
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths
from ledger.observation import Observation, Rejected
from ledger.parsing import detect, detection_head, parse_one, read_file
from ledger.transcript_tail import GUARD_BYTES, TAILED_FORMATS, TranscriptTail

from conftest import FIXTURES

TRANSCRIPTS = sorted(
    p for p in FIXTURES.rglob("*.jsonl")
    if detect(p, detection_head(p, read_file(p))) in TAILED_FORMATS
)
SPOTTER = FIXTURES / "spotter-claude-transcripts"
SUBAGENT = (
    FIXTURES / "agent-sessions-schema-drift" / "claude_subagent"
    / "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f" / "subagents" / "agent-a0ad4f44468bdf20d.jsonl"
)


def _fact(f: Observation | Rejected) -> tuple[object, ...]:
    """Every field of a fact (the parsers' state shows in keys, aliases, ``extra``…)."""
    return (type(f).__name__, f.key, *(repr(getattr(f, x.name)) for x in dataclasses.fields(f)))


def _copy(src: Path, tmp: Path) -> Path:
    """``src`` (and a subagent's ``.meta.json``) under ``tmp``, keeping the folders an
    import reads meaning from (``<session>/subagents/agent-<id>.jsonl``)."""
    dst = tmp / src.relative_to(FIXTURES)
    dst.parent.mkdir(parents=True, exist_ok=True)
    meta = src.with_name(src.name.removesuffix(".jsonl") + ".meta.json")
    if meta.exists():
        shutil.copy(meta, dst.with_name(meta.name))
    dst.write_bytes(b"")
    return dst


def _grow(path: Path, data: bytes, end: int) -> None:
    with open(path, "r+b") as f:
        f.seek(0, 2)
        f.write(data[f.tell() : end])


def test_there_are_transcripts_to_read() -> None:
    assert len(TRANSCRIPTS) >= 15
    assert SUBAGENT in TRANSCRIPTS
    assert any(p.name.startswith("rollout-") for p in TRANSCRIPTS)
    assert any(p.name == "gemini_jsonl_v040.jsonl" for p in TRANSCRIPTS)


@pytest.mark.parametrize("src", TRANSCRIPTS, ids=lambda p: p.name)
def test_read_in_pieces_gives_the_facts_of_a_whole_read(src: Path, tmp_path: Path) -> None:
    data = src.read_bytes()
    path = _copy(src, tmp_path)
    path.write_bytes(data)
    whole = [_fact(f) for f in parse_one(path).facts]
    rnd = random.Random(src.name)
    # from the first line that names a session: before it, a file is not yet known
    # for a transcript, or its records wait for a session (either way read whole)
    named = [i for i in (data.find(b'"sessionId"'), data.find(b'"session_meta"')) if i >= 0]
    if not named:  # a rollout fragment: its records wait for a session to the end
        assert TranscriptTail(path).read() is None
        return
    first_line = data.find(b"\n", min(named)) + 1 or len(data)
    cuts = sorted({first_line, max(first_line, len(data) // 2),
                   *(rnd.randrange(first_line, len(data) + 1) for _ in range(5))})
    for cut in cuts:
        for pieces in ([cut, len(data)], [cut, (cut + len(data)) // 2, len(data)]):
            path.write_bytes(b"")
            tail = TranscriptTail(path)
            got: list[tuple[object, ...]] = []
            for end in pieces:
                _grow(path, data, end)
                read_before, offset_before = tail.bytes_read, tail.offset
                parsed = tail.read()
                assert parsed is not None, (cut, end)
                got += [_fact(f) for f in parsed.facts]
                if offset_before:  # only the guard and what was added are read
                    assert tail.bytes_read - read_before <= GUARD_BYTES + end - offset_before
            # the last line may still be "being written" (recent, not valid JSON)
            assert tail.offset == len(data) - parsed.unfinished
            assert got == whole, (cut, pieces)


def test_a_subagents_meta_redactions_are_noted_once_across_reads(tmp_path: Path) -> None:
    data = SUBAGENT.read_bytes()
    path = _copy(SUBAGENT, tmp_path)
    meta = path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")
    meta.write_text('{"agentType": "Explore <private>codename</private>"}')
    path.write_bytes(data)
    whole = parse_one(path).facts
    assert sum(1 for f in whole if isinstance(f, Observation) and f.redactions) == 1
    path.write_bytes(b"")
    tail = TranscriptTail(path)
    got = []
    for end in (data.find(b"\n") + 1, len(data) // 2, len(data)):
        _grow(path, data, end)
        parsed = tail.read()
        assert parsed is not None
        got += parsed.facts
    assert [_fact(f) for f in got] == [_fact(f) for f in whole]


def test_a_file_changed_other_than_by_growing_is_not_continued(tmp_path: Path) -> None:
    src = SPOTTER / "tool_heavy.jsonl"
    data = src.read_bytes()
    half = data.rfind(b"\n", 0, len(data) // 2) + 1

    def started() -> tuple[Path, TranscriptTail]:
        path = tmp_path / "p" / src.name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data[:half])
        tail = TranscriptTail(path)
        assert tail.read() is not None
        return path, tail

    path, tail = started()  # replaced by another file (a new inode)
    (tmp_path / "new").write_bytes(data)
    os.replace(tmp_path / "new", path)
    assert tail.read() is None

    path, tail = started()  # cut shorter
    path.write_bytes(data[: half - 10])
    assert tail.read() is None

    path, tail = started()  # rewritten in place before the offset, then grown
    with open(path, "r+b") as f:
        f.seek(half - 50)
        f.write(b"x")
        f.seek(0, 2)
        f.write(data[half:])
    assert tail.read() is None

    path, tail = started()  # grown: goes on
    _grow(path, data, len(data))
    assert tail.read() is not None

    path, tail = started()  # a last line read without its newline, then continued
    path.write_bytes(data[: half - 1])  # same inode: truncate and rewrite
    tail = TranscriptTail(path)
    assert tail.read() is not None
    with open(path, "ab") as f:
        f.write(b' ')
    assert tail.read() is None


def test_a_subagent_whose_meta_file_changed_is_not_continued(tmp_path: Path) -> None:
    data = SUBAGENT.read_bytes()
    path = _copy(SUBAGENT, tmp_path)
    path.write_bytes(data[: data.find(b"\n") + 1])
    tail = TranscriptTail(path)
    assert tail.read() is not None
    path.with_name(path.name.removesuffix(".jsonl") + ".meta.json").write_text('{"agentType": "Plan"}')
    _grow(path, data, len(data))
    assert tail.read() is None


def test_another_format_is_not_taken_for_a_transcript(tmp_path: Path) -> None:
    other = next((FIXTURES / "agentcmd-codex-exec-json").glob("*.jsonl"))
    path = tmp_path / other.name
    shutil.copy(other, path)
    tail = TranscriptTail(path)
    assert tail.read() is None
    assert tail.not_transcript


def _events(settings: Settings) -> list[tuple[str, int, str, str]]:
    services = build(settings)
    try:
        found = services.ledger.read_log(0, 10**9, raw=False)
    finally:
        services.close()
    return sorted(
        (str(e.originator_id), e.originator_version, type(e).__name__, e.event_key)
        for _, e in found
    )


def _follow(settings: Settings, steps: Iterable[list[str]]) -> TranscriptFollower:
    """A follower on a store built as ``serve`` builds it, importing each step's paths
    in turn."""
    services = build(settings, cache_size=1024)
    follower = TranscriptFollower(services.ledger, settings.data_dir, settings.store_identity(), 1.0)
    try:
        with ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, settings.store_identity()) as imported:
            for paths in steps:
                follower.import_files(paths, imported)
                assert follower.error is None
    finally:
        services.close()
    return follower



def _growing(path: Path, data: bytes, ends: list[int]) -> Iterator[list[str]]:
    """Steps for :func:`_follow`: ``path`` grown to each of ``ends`` bytes of ``data``."""
    for end in ends:
        _grow(path, data, end)
        yield [str(path)]

def test_the_follower_records_a_growing_transcript_as_an_import_of_the_whole_does(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript_follower, "RECORD_FACTS", 100)  # reads span chunks
    src = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    data = src.read_bytes()
    path = _copy(src, tmp_path / "followed")
    cuts = [data.find(b"\n", n * len(data) // 5) + 1 for n in range(1, 5)]
    follower = _follow(settings, _growing(path, data, [*cuts, cuts[-1], len(data)]))  # once unchanged
    assert (follower.tail_reads, follower.whole_reads) == (6, 0)

    reference = Settings(tmp_path / "reference")
    whole = _copy(src, tmp_path / "whole")
    whole.write_bytes(data)
    services = build(reference)
    try:
        import_paths(services.ledger, [whole])
    finally:
        services.close()
    assert _events(settings) == _events(reference)


def test_a_transcript_first_seen_before_it_names_a_session_is_followed_by_its_tail(
    settings: Settings, tmp_path: Path
) -> None:
    src = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    data = src.read_bytes()
    assert b'"sessionId"' not in data[: data.find(b"\n")]  # a file-history-snapshot
    path = _copy(src, tmp_path)
    ends = [data.find(b"\n") + 1, *(data.find(b"\n", n * len(data) // 4) + 1 for n in (1, 2, 3)), len(data)]
    follower = _follow(settings, _growing(path, data, ends))
    # the first read could not tell the format (read whole); every later one is a tail's
    assert (follower.whole_reads, follower.tail_reads) == (1, len(ends) - 1)


def test_an_unreadable_file_does_not_hold_back_the_others(settings: Settings, tmp_path: Path) -> None:
    good = _copy(SPOTTER / "short.jsonl", tmp_path)
    good.write_bytes((SPOTTER / "short.jsonl").read_bytes())
    bad = tmp_path / "unreadable.jsonl"
    bad.symlink_to("/proc/self/mem")  # a regular file whose first bytes raise EIO
    with pytest.raises(OSError):
        bad.read_bytes()
    follower = _follow(settings, [[str(bad), str(good)]])
    assert follower.imports == 1
    assert _events(settings)


def test_a_path_is_followed_under_its_normal_name(settings: Settings, tmp_path: Path) -> None:
    src = FIXTURES / "claude-code-log-fixtures" / "edge_cases.SYNTHETIC_malformed.jsonl"
    path = _copy(src, tmp_path / "p")
    path.write_bytes(src.read_bytes())
    roundabout = str(path.parent / ".." / path.parent.name / path.name)
    _follow(settings, [[roundabout]])
    before = _events(settings)
    assert any(e[2] == "InputRejected" for e in before)

    services = build(settings)
    try:
        with ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, settings.store_identity()) as imported:
            summary = import_paths(services.ledger, [path], imported=imported, reread=True)
    finally:
        services.close()
    assert summary.result.appended == 0
    assert _events(settings) == before


def test_a_file_read_while_it_is_being_written_gives_the_facts_of_a_whole_read(tmp_path: Path) -> None:
    """An agent appending while the tail reads: chunks of any size, cut mid-line and
    mid-character; half-written last lines are left for the next read."""
    src = SPOTTER / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    data = src.read_bytes()
    path = _copy(src, tmp_path)
    rnd = random.Random(7)
    done = threading.Event()

    def write() -> None:
        at = 0
        with open(path, "ab", buffering=0) as f:
            while at < len(data):
                n = rnd.randrange(1, 20_000)
                f.write(data[at : at + n])
                at += n
                time.sleep(rnd.random() / 500)
        done.set()

    writer = threading.Thread(target=write)
    tail = TranscriptTail(path)
    got: list[tuple[object, ...]] = []
    reads = 0
    writer.start()
    try:
        while True:
            finished = done.is_set()
            parsed = tail.read()
            if parsed is None:  # before the first line that names a session: start again
                assert not got
                tail = TranscriptTail(path)
                continue
            reads += 1
            got += [_fact(f) for f in parsed.facts]
            if finished:
                break
    finally:
        writer.join()
    assert reads > 10
    assert tail.offset == len(data)
    assert got == [_fact(f) for f in parse_one(path).facts]


def test_a_transcript_whose_first_lines_name_no_session_is_not_taken_for_another_format(
    settings: Settings, tmp_path: Path
) -> None:
    # Review finding: 32 lines without a sessionId (summaries) made the follower read
    # the file whole for the rest of the server's life, though detection reads the
    # whole head of a file under 1 MiB, and so finds the transcript once it grows.
    src = FIXTURES / "agentcmd-claude-transcripts" / "full-session-five.jsonl"
    summaries = b"".join(
        b'{"type":"summary","summary":"earlier work %d","leafUuid":"leaf-%d"}\n' % (n, n)
        for n in range(40)
    )
    data = summaries + src.read_bytes()
    path = _copy(src, tmp_path)
    follower = _follow(settings, _growing(path, data, [len(summaries), len(data)]))
    assert (follower.whole_reads, follower.tail_reads) == (1, 1)
