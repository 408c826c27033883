"""An import whose files are parsed in worker processes (``workers``) records the same
log, position for position, and gives the same read models as one that parses them
itself; this process stays the only writer."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.bootstrap import build
from ledger.config import Settings
from ledger.importer import _parsed_by_workers, _runs, auto_workers, import_paths
from ledger.observation import Observation, SessionRef
from ledger.parsing import discover, parse_run
from projections import queries

from conftest import FIXTURES, cli

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _ledger_and_read_models(settings: Settings, since: str) -> tuple[object, ...]:
    """Every event by log position (stream, version, class, idempotency key, digest of
    the payload's source record), then what ``sessions --json`` (by id), ``show --json``
    of each session and ``stats --json`` print. Records without a time of their own
    take the time they were recorded, which differs between any two imports: times from
    ``since`` on read ``<recorded>``."""
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

    def same(value: object) -> object:
        if isinstance(value, str) and ISO.fullmatch(value) and value >= since:
            return "<recorded>"
        return value

    read = json.loads(printed, object_hook=lambda o: {k: same(v) for k, v in o.items()})
    return (events, *read)


def test_parsing_workers_give_the_same_log_and_read_models(
    settings: Settings, other_settings: Settings
) -> None:
    since = datetime.now(UTC).isoformat()[:19]
    services = build(settings)
    try:
        with_workers = import_paths(services.ledger, [FIXTURES], workers=2)
    finally:
        services.close()
    services = build(other_settings)
    try:
        alone = import_paths(services.ledger, [FIXTURES])
    finally:
        services.close()

    assert alone.parsed_by == {os.getpid()}  # the default: all parsed here
    counts, reference = with_workers.as_dict(), alone.as_dict()
    assert reference["events_appended"] > 5000 and reference["rejected"] > 0
    assert counts.pop("parse_processes") >= 1 and reference.pop("parse_processes") == 1
    assert counts == reference
    assert with_workers.result.positions == alone.result.positions

    ours = _ledger_and_read_models(settings, since)
    theirs = _ledger_and_read_models(other_settings, since)
    assert ours[0] == theirs[0]  # the same events at the same positions
    assert ours[1:] == theirs[1:]  # the same read models


def test_a_second_import_with_workers_appends_nothing(settings: Settings) -> None:
    first = json.loads(cli(settings, "import", "--workers", "1", "--json", str(FIXTURES)).stdout)
    again = json.loads(cli(settings, "import", "--workers", "1", "--reread", "--json", str(FIXTURES)).stdout)
    assert first["events_appended"] > 5000 and first["parse_processes"] >= 1
    assert again["events_appended"] == 0
    assert again["duplicates_skipped"] > first["duplicates_skipped"]
    assert again["jobs"]["appended"] == 0  # the first import's jobs settled everything
    stored = json.loads(cli(settings, "stats", "--json").stdout)["events"]
    assert stored == first["events_appended"] + first["jobs"]["appended"]


def test_runs_keep_the_files_in_order() -> None:
    files = discover([FIXTURES])
    runs = list(_runs(files))
    assert len(runs) > 2
    assert [f for r in runs for f in r] == files


def test_runs_are_parsed_here_until_a_worker_has_started_then_by_the_workers() -> None:
    files = discover([FIXTURES])
    expected = [[f.path for f in run] for run in map(parse_run, _runs(files))]
    runs = _parsed_by_workers(files, 1)
    got = [next(runs)]
    assert {f.parsed_by for f in got[0]} == {os.getpid()}  # no worker can have started yet
    time.sleep(3)  # a slow recording: the worker has started meanwhile
    got.extend(runs)
    assert [[f.path for f in run] for run in got] == expected  # in order, each once
    later = {f.parsed_by for run in got[1:] for f in run}
    assert len(got) > 2 and os.getpid() not in later


def test_workers_must_not_be_negative(settings: Settings) -> None:
    services = build(settings)
    try:
        with pytest.raises(ValueError, match="0 or more"):
            import_paths(services.ledger, [FIXTURES], workers=-1)
    finally:
        services.close()


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize("workers", [0, 1])
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
    assert workers or summary.parsed_by == {os.getpid()}


def test_auto_workers_parse_aside_only_large_inputs(tmp_path: Path) -> None:
    assert auto_workers(discover([FIXTURES / "spotter-claude-transcripts"])) == 0
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:  # sparse: only the size is read
        out.truncate(8 << 20)
    can = len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else True
    assert auto_workers([big]) == (1 if can else 0)
    assert auto_workers([tmp_path / "gone.jsonl"]) == 0  # vanished since discovery: no error


def test_an_observation_crosses_processes_whole() -> None:
    # workers send observations pickled; every field must come back, also one added later
    values = {
        "session": SessionRef("claude-code", "s-1", "p-1", "general", "/w"),
        "kind": "PromptSubmitted",
        "occurred_at": datetime(2026, 1, 2, tzinfo=UTC),
        "raw": b'{"a": 1}',
        "alias_keys": ("k2",),
        "redactions": ({"kind": "private_tag"},),
        "data": {"prompt": "hi"},
        "extra": {"x": 1},
    }
    sent = Observation(**{
        f.name: values.get(f.name, f"{f.name}-value") for f in dataclasses.fields(Observation)
    })
    got = pickle.loads(pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
    for f in dataclasses.fields(Observation):
        assert getattr(got, f.name) == getattr(sent, f.name), f.name
