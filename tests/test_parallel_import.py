"""An import in several processes (``workers``) records the same ledger and gives the
same read models as one process; each process records whole directories, so a session
and its subagents' transcripts are recorded together."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import _tasks, auto_workers, discover, import_paths, unit_of
from projections import queries

from conftest import FIXTURES, cli

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _read_models(settings: Settings, since: str) -> tuple[object, ...]:
    """What ``sessions --json`` (by id), ``show --json`` of each session and ``stats
    --json`` print.

    Log positions differ between two imports (the processes' sessions interleave): each
    reads as the event at that position (stream, version, class, idempotency key).
    Records without a time of their own take the time they were recorded, which differs
    between any two imports: times from ``since`` on read ``<recorded>``."""
    services = build(settings)
    try:
        log = services.ledger.read_log(0, services.ledger.max_position() + 1)
        events = {
            p: (str(e.originator_id), e.originator_version, type(e).__name__, e.event_key)
            for p, e in log
        }
        services.runner.catch_up()
        models = services.models
        sessions = sorted(queries.list_sessions(models), key=lambda s: s["id"])
        printed = json.dumps(
            [sessions, [queries.get_session(models, s["id"]) for s in sessions], queries.stats(models)]
        )
    finally:
        services.close()

    def same(key: str, value: object) -> object:
        if key.endswith("position") and isinstance(value, int):
            return events[value]
        if isinstance(value, str) and ISO.fullmatch(value) and value >= since:
            return "<recorded>"
        return value

    read = json.loads(printed, object_hook=lambda o: {k: same(k, v) for k, v in o.items()})
    return (sorted(events.values()), *read)


def test_two_processes_record_what_one_does(settings: Settings, other_settings: Settings) -> None:
    since = datetime.now(UTC).isoformat()[:19]
    services = build(settings)
    try:
        parallel = import_paths(services.ledger, [FIXTURES], workers=2)
    finally:
        services.close()
    services = build(other_settings)
    try:
        alone = import_paths(services.ledger, [FIXTURES])
    finally:
        services.close()

    assert os.getpid() not in parallel.recorded_by  # recorded by the workers ...
    assert alone.recorded_by == {os.getpid()}  # ... not here, unlike the default
    counts, reference = parallel.as_dict(), alone.as_dict()
    assert reference["events_appended"] > 5000 and reference["rejected"] > 0
    for c in (counts, reference):
        del c["processes"]
    assert counts == reference
    assert parallel.result.positions == sorted(parallel.result.positions)
    assert len(parallel.result.positions) == alone.result.appended

    ours, reference = _read_models(settings, since), _read_models(other_settings, since)
    assert ours[0] == reference[0]  # the same events in the log
    assert ours[1:] == reference[1:]  # the same read models


def test_a_second_parallel_import_appends_nothing(settings: Settings) -> None:
    first = json.loads(cli(settings, "import", "--workers", "2", "--json", str(FIXTURES)).stdout)
    again = json.loads(cli(settings, "import", "--workers", "2", "--json", str(FIXTURES)).stdout)
    assert first["events_appended"] > 5000 and first["processes"] == 2
    assert again["events_appended"] == 0
    assert again["duplicates_skipped"] > first["duplicates_skipped"]
    assert json.loads(cli(settings, "stats", "--json").stdout)["events"] == first["events_appended"]


def test_tasks_hold_whole_directories_with_their_subagents() -> None:
    files = discover([FIXTURES])
    subagents = [f for f in files if f.parent.name == "subagents"]
    assert subagents
    for f in subagents:  # <project>/<session>/subagents/agent-*.jsonl
        assert unit_of(f) == unit_of(f.parent.parent.with_suffix(".jsonl"))
    tasks = _tasks(files, workers=2)
    assert len(tasks) > 2
    assert sorted(f for t in tasks for f in t) == sorted(files)
    owner = {unit_of(f): i for i, t in enumerate(tasks) for f in t}
    for i, task in enumerate(tasks):
        assert all(owner[unit_of(f)] == i for f in task)
        for unit in {unit_of(f) for f in task}:  # file order kept within each unit
            assert [f for f in task if unit_of(f) == unit] == [f for f in files if unit_of(f) == unit]


def test_workers_must_be_positive(settings: Settings) -> None:
    services = build(settings)
    try:
        with pytest.raises(ValueError, match="at least 1"):
            import_paths(services.ledger, [FIXTURES], workers=0)
    finally:
        services.close()


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize("workers", [1, 2])
def test_an_unreadable_file_is_skipped_with_the_reason(settings: Settings, workers: int) -> None:
    # /proc/self/mem is a file that read() refuses (EIO), even for root
    services = build(settings)
    try:
        summary = import_paths(
            services.ledger, [FIXTURES / "spotter-claude-transcripts", "/proc/self/mem"],
            workers=workers,
        )
    finally:
        services.close()
    assert summary.skipped == [("/proc/self/mem", "[Errno 5] Input/output error")]
    assert summary.files == len(discover([FIXTURES / "spotter-claude-transcripts"])) - summary.metadata_files
    assert summary.result.appended > 0


def test_auto_workers_grow_with_the_input_up_to_the_cpus(tmp_path: Path) -> None:
    small = discover([FIXTURES / "spotter-claude-transcripts"])
    assert auto_workers(small) == 1
    big = []
    for i in range(3):  # 3 × 8 MiB (sparse: only the size is read)
        f = tmp_path / f"s{i}.jsonl"
        with f.open("wb") as out:
            out.truncate(8 << 20)
        big.append(f)
    assert auto_workers(big) == min(len(os.sched_getaffinity(0)), 3)
    assert auto_workers(big * 3) == min(len(os.sched_getaffinity(0)), 4)  # at most 4
