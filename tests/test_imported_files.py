"""An import skips, unread, the files an earlier import recorded whole and that have not
changed since (``ledger.imported_files``); everything else is read as before: a grown
file, a file whose subagent ``.meta.json`` changed, a store that no longer holds what was
recorded, other hookledger code, ``--reread``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from api.bootstrap import build
from ledger.config import Settings
from ledger.imported_files import FILE_NAME, ImportedFiles
from ledger.importer import import_paths

from conftest import FIXTURES, cli

SPOTTER = FIXTURES / "spotter-claude-transcripts"
SUBAGENT = FIXTURES / "agent-sessions-schema-drift" / "claude_subagent"


def _import(settings: Settings, path: Path, *flags: str) -> dict[str, object]:
    return json.loads(cli(settings, "import", "--json", *flags, str(path)).stdout)


def _sessions(settings: Settings) -> list[dict[str, object]]:
    return json.loads(cli(settings, "sessions", "--json").stdout)  # type: ignore[no-any-return]


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "projects" / src.name
    shutil.copytree(src, dst)
    return dst


def test_unchanged_files_are_not_read_again(settings: Settings, tmp_path: Path) -> None:
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)
    assert first["files"] >= 2 and first["events_appended"] > 0 and first["files_unchanged"] == 0

    # the same bytes, rewritten in place with another record's content of the same size
    # and the old modification time, is taken as unchanged: proof that it is not read
    victim = sorted(projects.glob("*.jsonl"))[0]
    st = victim.stat()
    data = victim.read_bytes()
    garbled = data[:-2].replace(b'"type":"user"', b'"type":"usex"') + data[-2:]
    assert garbled != data and len(garbled) == len(data)
    with victim.open("r+b") as f:
        f.write(garbled)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))

    again = _import(settings, projects)
    assert again["files"] == 0 and again["files_unchanged"] == first["files"]
    assert again["events_appended"] == again["duplicates_skipped"] == again["rejected"] == 0

    reread = _import(settings, projects, "--reread")  # reads them all: the garbled file
    assert reread["files"] == first["files"] and reread["files_unchanged"] == 0
    assert reread["duplicates_skipped"] > 0 and reread["events_appended"] + reread["rejected"] > 0


def test_reread_remembers_what_it_read(settings: Settings, tmp_path: Path) -> None:
    """``--reread`` after the cache was lost (deleted, or written by other hookledger
    code) records the files again: the import after it reads nothing."""
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)
    (settings.data_dir / FILE_NAME).unlink()
    reread = _import(settings, projects, "--reread")
    assert reread["files"] == first["files"] and reread["events_appended"] == 0
    again = _import(settings, projects)
    assert again["files"] == 0 and again["files_unchanged"] == first["files"]


def test_a_grown_file_is_read_again(settings: Settings, other_settings: Settings, tmp_path: Path) -> None:
    source = SPOTTER / "short.jsonl"
    lines = source.read_bytes().rstrip(b"\n").split(b"\n")
    path = tmp_path / "projects" / "p" / source.name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines[: len(lines) // 2]) + b"\n")
    # --no-jobs: the half recorded months ago would be timed out in between, which adds
    # the jobs' and the reopening's events (test_jobs.py covers that path)
    first = _import(settings, path.parent, "--no-jobs")

    path.write_bytes(source.read_bytes())  # the agent wrote the rest
    grown = _import(settings, path.parent, "--no-jobs")
    assert grown["files"] == 1 and grown["files_unchanged"] == 0
    assert grown["events_appended"] > 0 and grown["duplicates_skipped"] >= first["events_appended"] - 1

    _import(other_settings, source, "--no-jobs")  # the whole file at once
    assert _sessions(settings) == _sessions(other_settings)


def test_a_changed_subagent_meta_file_reads_its_transcript_again(
    settings: Settings, tmp_path: Path
) -> None:
    root = _copy(SUBAGENT, tmp_path)
    meta = next(root.rglob("agent-*.meta.json"))
    first = _import(settings, root)
    assert first["files"] == 2
    meta.write_text(json.dumps({"agentType": "code-reviewer", "spawnDepth": 1}))
    again = _import(settings, root)
    assert again["files"] == 1 and again["files_unchanged"] == 1  # the child's transcript


def test_a_store_that_lost_the_events_reads_everything_again(tmp_path: Path) -> None:
    # SQLite only: the store is the data directory's file, removed here
    settings = Settings(tmp_path / "data")
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)
    for name in os.listdir(settings.data_dir):
        if name != FILE_NAME:  # the event store and read models go, the cache stays
            (settings.data_dir / name).unlink()
    again = _import(settings, projects)
    assert again["files"] == first["files"] and again["files_unchanged"] == 0
    assert again["events_appended"] == first["events_appended"]


def test_another_store_in_the_same_data_directory_reads_everything(
    settings: Settings, tmp_path: Path
) -> None:
    # the same data directory, another event store (another database or schema, or the
    # embedded file when the first was PostgreSQL): the cache rows are the first one's
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)
    other = Settings(settings.data_dir) if settings.is_postgres else Settings(
        settings.data_dir, database_url="postgresql://postgres@127.0.0.1:5432/none", database_schema="x",
    )
    services = build(settings)
    try:
        with ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, other.store_identity()) as imported:
            summary = import_paths(services.ledger, [projects], imported=imported)
    finally:
        services.close()
    assert summary.files == first["files"] and summary.unchanged == 0
    assert summary.result.appended == 0  # read again: all duplicates


def test_other_hookledger_code_reads_everything_again(settings: Settings, tmp_path: Path) -> None:
    projects = _copy(SPOTTER, tmp_path)
    services = build(settings)
    try:
        with ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, settings.store_identity()) as imported:
            first = import_paths(services.ledger, [projects], imported=imported)
            assert import_paths(services.ledger, [projects], imported=imported).unchanged == first.files
            imported.generation = "an-older-version"  # as a new release would compute it
            again = import_paths(services.ledger, [projects], imported=imported)
    finally:
        services.close()
    assert again.unchanged == 0 and again.files == first.files


def test_files_not_read_whole_are_not_remembered(settings: Settings, tmp_path: Path) -> None:
    projects = _copy(SPOTTER, tmp_path)
    (projects / "notes.jsonl").write_text('{"not": "an agent transcript"}\n')
    cut = projects / "cut.jsonl"  # a last line still being written (fresh mtime)
    data = (SPOTTER / "short.jsonl").read_bytes()
    cut.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 20])
    first = _import(settings, projects)
    assert [s["path"] for s in first["files_skipped"]] == [str(projects / "notes.jsonl")]
    assert [u["path"] for u in first["unfinished_lines_left"]] == [str(cut)]
    again = _import(settings, projects)
    assert again["files_unchanged"] == first["files"] - 1  # all but the cut one
    assert [s["path"] for s in again["files_skipped"]] == [str(projects / "notes.jsonl")]
    assert [u["path"] for u in again["unfinished_lines_left"]] == [str(cut)]


def test_the_summary_line_says_how_many_were_not_read(settings: Settings, tmp_path: Path) -> None:
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)
    out = cli(settings, "import", str(projects)).stdout.decode()
    assert f"0 files ({first['files']} more unchanged since their last import: not read)" in out


def _through_other_url(settings: Settings) -> Settings:
    """The same store reached by another URL: PostgreSQL through the loopback host's
    other name (``127.0.0.1`` <-> ``localhost``); the embedded file has one name only."""
    if not settings.is_postgres:
        return settings
    from dataclasses import replace

    from sqlalchemy.engine import make_url

    u = make_url(settings.database_url or "")
    host = "localhost" if u.host in ("127.0.0.1", None) else "127.0.0.1"
    return replace(settings, database_url=u.set(host=host).render_as_string(hide_password=False))


def test_the_cache_follows_the_store_by_its_id_whatever_url_reaches_it(
    settings: Settings, tmp_path: Path
) -> None:
    """Rows were matched to the store by its URL's text: the same PostgreSQL store
    reached through ``localhost`` after ``127.0.0.1`` read every file again. Once the
    store has an id (the first export makes it), rows are kept under it; rows of the
    URL form written before still count (and move to the id)."""
    projects = _copy(SPOTTER, tmp_path)
    first = _import(settings, projects)  # no id yet: rows under the URL form
    cli(settings, "export", "--format", "jsonl", "--output", str(tmp_path / "out"))
    again = _import(settings, projects)
    assert again["files_unchanged"] == first["files"], again
    other = _through_other_url(settings)
    assert other.store_identity() != settings.store_identity() or not settings.is_postgres
    through_other = _import(other, projects)
    assert through_other["files_unchanged"] == first["files"], through_other
    assert through_other["events_appended"] == 0
