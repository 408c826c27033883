"""What an import leaves for later or skips, with the reason. An import that reads a
transcript while its agent is writing the last line leaves that line for the next import
instead of rejecting it (each import would otherwise reject the half it saw as new
invalid input); a last line that stays cut is rejected once. A missing path is skipped."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from ledger.config import Settings
from ledger.parsing import WRITING_GRACE_S

from conftest import FIXTURES, cli

SHORT = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"


def _import(settings: Settings, path: Path, *flags: str) -> dict[str, object]:
    return json.loads(cli(settings, "import", "--json", *flags, str(path)).stdout)


def _stats(settings: Settings) -> dict[str, int]:
    return json.loads(cli(settings, "stats", "--json").stdout)


def _split_last_line(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    """A copy of a real transcript holding all but the first half of its last record."""
    data = SHORT.read_bytes()
    lines = data.rstrip(b"\n").split(b"\n")
    last = lines[-1]
    path = tmp_path / "projects" / "p" / SHORT.name
    path.parent.mkdir(parents=True)
    head = b"\n".join(lines[:-1]) + b"\n"
    path.write_bytes(head + last[: len(last) // 2])
    return path, head, last


def test_a_last_line_being_written_is_left_for_the_next_import(
    settings: Settings, other_settings: Settings, tmp_path: Path
) -> None:
    path, head, last = _split_last_line(tmp_path)
    first = _import(settings, path)
    assert first["unfinished_lines_left"] == [{"path": str(path), "bytes": len(last) // 2}]
    assert first["rejected"] == 0 and _stats(settings)["rejected"] == 0

    path.write_bytes(head + last[: len(last) - 10])  # longer, still unfinished
    again = _import(settings, path)
    assert again["events_appended"] == 0 and again["rejected"] == 0
    assert again["unfinished_lines_left"] == [{"path": str(path), "bytes": len(last) - 10}]

    path.write_bytes(head + last + b"\n")  # the agent finished the line
    done = _import(settings, path)
    assert done["unfinished_lines_left"] == [] and done["rejected"] == 0
    assert done["events_appended"] > 0

    whole = tmp_path / "whole" / SHORT.name  # the same file imported finished at once
    whole.parent.mkdir()
    shutil.copyfile(SHORT, whole)
    reference = _import(other_settings, whole)
    assert _stats(settings)["events"] == _stats(other_settings)["events"]
    assert reference["rejected"] == _stats(settings)["rejected"] == 0


def test_a_last_line_that_stays_cut_is_rejected_once(settings: Settings, tmp_path: Path) -> None:
    path, _head, _last = _split_last_line(tmp_path)
    old = time.time() - WRITING_GRACE_S - 5  # the writer stopped a while ago
    os.utime(path, (old, old))
    first = _import(settings, path)
    assert first["unfinished_lines_left"] == []
    assert first["rejected"] == 1
    again = _import(settings, path, "--reread")  # read again (not skipped as unchanged)
    assert again["rejected"] == 1 and again["events_appended"] == 0  # seen, not added
    assert _stats(settings)["rejected"] == 1


def test_the_cli_says_what_it_left(settings: Settings, tmp_path: Path) -> None:
    path, _head, _last = _split_last_line(tmp_path)
    err = cli(settings, "import", str(path)).stderr.decode()
    assert f"left for the next import: the last line of {path}" in err


def test_a_missing_path_is_skipped_and_the_others_imported(settings: Settings, tmp_path: Path) -> None:
    # ``import ~/.claude/projects ~/.codex/sessions`` by a user of one agent
    gone = tmp_path / "no-codex-here"
    out = _import(settings, SHORT.parent)
    again = json.loads(cli(settings, "import", "--json", "--reread", str(gone), str(SHORT.parent)).stdout)
    assert again["files_skipped"] == [{"path": str(gone), "reason": "no such file or directory"}]
    assert again["files"] == out["files"] and again["duplicates_skipped"] > 0
    only_missing = cli(settings, "import", str(gone), check=False)
    assert only_missing.returncode == 2 and b"no such file or directory" in only_missing.stderr
    device = json.loads(cli(settings, "import", "--json", "/dev/null", str(SHORT.parent)).stdout)
    assert device["files_skipped"] == [{"path": "/dev/null", "reason": "not a file or directory"}]
