"""Read models are the same whichever way they are made: applied incrementally while
the log grows, caught up in small sections, rebuilt in one pass (all projections or
one), and as the runner made them before it decoded only the events each projection
consumes (every event decoded by the ledger's mapper and passed to every projection).

Every table of every projection is compared row by row (and, on SQLite, the full-text
index's contents), on both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import MetaData, Table, text

from api.bootstrap import Services
from api.jobs import run_jobs
from api.summaries import run_summaries
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.quarantine import Quarantine
from projections.decode import LogReader
from projections.rows import RowCache
from projections.runner import PROJECTION_CLASSES, ProjectionRunner
from projections.schema import build_tables
from projections.search import fts_table

from conftest import FIXTURES

SOURCES = [
    FIXTURES / "spotter-claude-transcripts",
    FIXTURES / "agentcmd-codex-rollouts",
    FIXTURES / "agentcmd-gemini-sessions",
    FIXTURES / "claude-code-action-stream-json",
]
LATER = datetime(2030, 1, 1, tzinfo=UTC)
REFERENCE = "__ref"


def _grow_the_log(services: Services) -> None:
    """Sessions from several agents, liveness decisions, summaries and a rejected hook
    body; the read models are caught up between the steps (jobs and summaries read them)."""
    import_paths(services.ledger, SOURCES[:1])
    services.runner.catch_up()
    import_paths(services.ledger, SOURCES[1:])
    ingest_hook(services.ledger, "claude-code", b"{not json", "bad-body")
    run_jobs(services, LATER)
    run_summaries(services, now=LATER)
    services.runner.catch_up()


def _dump(conn: Any, tables: dict[str, Table]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of each table (by base name), in primary-key order; the SQLite
    full-text index's (rowid, body) beside ``search_documents``."""
    out = {}
    for base, t in sorted(tables.items()):
        order = ", ".join(f'"{c.name}"' for c in t.primary_key.columns)
        query = text(f'SELECT * FROM "{t.name}" ORDER BY {order}')
        out[base] = [tuple(r) for r in conn.execute(query)]
        if base == "search_documents" and conn.dialect.name == "sqlite":
            fts = fts_table(t.name)
            query = text(f'SELECT rowid, body FROM "{fts}" ORDER BY rowid')
            out["search_fts"] = [tuple(r) for r in conn.execute(query)]
    return out


def _live(services: Services) -> dict[str, list[tuple[Any, ...]]]:
    tables = {b: t for own in services.models.tables.values() for b, t in own.items()}
    with services.models.engine.connect() as conn:
        return _dump(conn, tables)


def _reference(services: Services, section: int = 700) -> dict[str, list[tuple[Any, ...]]]:
    """The read models as the runner made them before kinds: every event decoded by the
    mapper (``Ledger.read_log``) and passed to every projection, section by section,
    into ``*__ref`` tables."""
    engine, dialect = services.models.engine, services.models.engine.dialect.name
    md = MetaData()
    projections = []
    for name, cls in PROJECTION_CLASSES.items():
        projection = cls(build_tables(md, name, REFERENCE))
        projections.append(projection)
    md.create_all(engine)
    with engine.begin() as conn:
        for cls in PROJECTION_CLASSES.values():
            for c in cls.companions(dialect, REFERENCE):
                conn.execute(text(c.create))
    head = services.ledger.max_position()
    events = services.ledger.read_log(0, head + 1, raw=False)
    assert [p for p, _ in events] == list(range(1, head + 1))
    for i in range(0, len(events), section):
        chunk = events[i : i + section]
        with engine.begin() as conn:
            for projection in projections:
                rows = RowCache(conn, projection.tables)
                projection.prefetch(rows, chunk)
                for position, event in chunk:
                    projection.apply(rows, position, event)
                projection.flush(rows)
    tables = {b: t for p in projections for b, t in p.tables.items()}
    with engine.connect() as conn:
        return _dump(conn, tables)


def _empty_views(services: Services) -> None:
    """Delete every read-model row and tracking position (tables and index stay)."""
    with services.models.engine.begin() as conn:
        for own in services.models.tables.values():
            for t in own.values():
                conn.execute(t.delete())
                if t.name == "search_documents" and conn.dialect.name == "sqlite":
                    conn.execute(text(f'DELETE FROM "{fts_table(t.name)}"'))
        conn.execute(services.models.tracking.delete())


def _assert_same(expected: dict[str, list[Any]], got: dict[str, list[Any]], how: str) -> None:
    assert expected.keys() == got.keys(), how
    for table in expected:
        assert got[table] == expected[table], f"{how}: table {table} differs"


def test_catch_up_in_sections_and_rebuilds_give_the_read_models_of_every_event_decoded(
    services: Services,
) -> None:
    _grow_the_log(services)
    kinds = {type(e).__name__ for _, e in services.ledger.read_log(0, 10**9, raw=False)}
    # the log exercises what the projections filter on
    assert {"Summarised", "ToolCallStarted", "ToolCallCompleted", "UsageRecorded",
            "PromptSubmitted", "BatchClosed", "InputRejected"} <= kinds
    head = services.ledger.max_position()

    reference = _reference(services)
    assert len(reference["event_index"]) == head
    assert all(reference[t] for t in ("sessions", "prompt_batches", "tool_calls", "summaries",
                                      "observations", "search_documents", "status_history"))
    _assert_same(reference, _live(services), "incremental, while the log grew")

    _empty_views(services)
    runner = ProjectionRunner(services.ledger, services.models, read_ahead=True)
    assert runner.catch_up(section=97) == head * len(PROJECTION_CLASSES)
    _assert_same(reference, _live(services), "caught up in sections of 97, read ahead")
    assert set(runner.positions().values()) == {head}

    _empty_views(services)
    runner.read_ahead = False
    runner.catch_up(section=1000)
    _assert_same(reference, _live(services), "caught up without read-ahead")

    assert runner.rebuild() == head * len(PROJECTION_CLASSES)
    _assert_same(reference, _live(services), "rebuild of all projections")
    for name in PROJECTION_CLASSES:
        runner.rebuild(name)
    _assert_same(reference, _live(services), "rebuild of each projection")
    assert set(runner.positions().values()) == {head}


def test_a_projection_is_given_exactly_the_events_it_consumes(services: Services) -> None:
    """What the runner skips for a projection is what ``apply`` ignores: every event
    outside a projection's ``kinds`` leaves its rows alone, applied on its own."""
    import_paths(services.ledger, SOURCES[:1])
    ingest_hook(services.ledger, "claude-code", b"{not json", "bad-body")
    events = services.ledger.read_log(0, 10**9, raw=False)
    assert any(isinstance(e, Quarantine.Event) for _, e in events)
    for cls in PROJECTION_CLASSES.values():
        if cls.kinds is None:
            continue
        projection = cls(services.models.tables[cls.name])
        with services.models.engine.connect() as conn:
            rows = RowCache(conn, projection.tables)
            skipped = [(p, e) for p, e in events if not cls.consumes(type(e))]
            assert skipped, cls.name
            projection.prefetch(rows, skipped)
            for position, event in skipped:
                projection.apply(rows, position, event)
            assert not any(rows.dirty.values()), f"{cls.name} changed rows for a skipped event"
            assert not any(getattr(rows, "added", {}).values()), cls.name


def test_the_log_reader_decodes_like_the_mapper(services: Services) -> None:
    import_paths(services.ledger, SOURCES)
    ingest_hook(services.ledger, "claude-code", b"{not json", "bad-body")
    head = services.ledger.max_position()
    expected = services.ledger.read_log(0, head, raw=False)
    got = LogReader(services.ledger).read(0, head)
    assert got.positions == [p for p, _ in expected]
    assert len(got.events) == len(expected)
    for (p, a), (q, b) in zip(got.events, expected, strict=True):
        assert p == q
        assert type(a) is type(b)
        assert a.__dict__ == b.__dict__
        assert str(a.originator_id) == str(b.originator_id)
    only = LogReader(services.ledger, lambda cls: cls is Quarantine.InputRejected).read(0, head)
    assert only.positions == got.positions
    rejected = [(p, e) for p, e in expected if type(e) is Quarantine.InputRejected]
    assert rejected
    assert [(p, e.__dict__) for p, e in only.events] == [(p, e.__dict__) for p, e in rejected]


def test_two_rebuilds_at_once_from_separate_connections_both_finish(
    services: Services,
) -> None:
    """Two runners with their own engines (as two processes: ``serve`` and a CLI
    command) rebuild the same projections at once; the database-wide rebuild lock makes
    the second wait instead of dropping the first one's ``__rebuild`` tables mid-way.
    Both finish and the read models are those of a single rebuild."""
    import threading

    from api.bootstrap import build

    _grow_the_log(services)
    expected = _live(services)
    others = [build(services.settings) for _ in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def rebuild(other: Services) -> None:
        try:
            start.wait()
            other.runner.rebuild("tool_calls", "sessions", "search")
        except BaseException as e:  # reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=rebuild, args=(o,)) for o in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for o in others:
            o.close()
    assert errors == []
    _assert_same(expected, _live(services), "after two concurrent rebuilds")
