"""Catch-up of the DuckDB analytics read model: exactly once, resumable, rebuildable.

Each section of the notification log (up to ``SECTION`` events) is applied in ONE
DuckDB transaction: the ``events`` rows (bulk, through Arrow), the derived rows of the
sessions it touched, and the tracking position (``analytics_tracking``, in the same
file, advanced only from the position the section started at). A crash or SIGKILL
anywhere loses at most the section in flight, which the next catch-up applies again.

The writer holds :func:`projections.analytics.store.writer_lock` while the file is
open, then publishes a read-only snapshot for readers (docs/analytics.md).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ledger.app import Ledger
from ledger.store_id import read_store_id
from projections.analytics import extract
from projections.analytics.store import (
    TRACKING_NAME,
    generation,
    next_generation,
    open_writer,
    publish,
    remove_all,
    writer_lock,
)

SECTION = 100_000
"""Notifications per DuckDB transaction. Large on purpose: DuckDB writes a transaction
of a whole row group (122,880 rows) or more straight to the data file instead of the
WAL; measured at 100k vs 20k: commits 3x cheaper (docs/benchmarks.md)."""


class TrackingConflict(RuntimeError):
    """The tracking position moved under this writer (should not happen under the lock)."""


def position(con: Any) -> int:
    """The last log position applied to the file behind ``con`` (0 when none)."""
    row = con.execute(
        "SELECT position FROM analytics_tracking WHERE name = ?", [TRACKING_NAME]
    ).fetchone()
    return int(row[0]) if row else 0


def catch_up(
    ledger: Ledger,
    data_dir: Path,
    *,
    stop: int | None = None,
    max_sections: int | None = None,
    section: int = SECTION,
    after_section: Callable[[int], None] | None = None,
    publish_snapshot: bool = True,
) -> int:
    """Apply every event of the log after the file's position (up to ``stop``).

    Returns the number of events applied. ``after_section(position)`` is called after
    each committed section (tests use it to kill a catch-up between sections).
    Raises whatever the store or DuckDB raises; committed sections stay committed.
    """
    with writer_lock(data_dir):
        con = open_writer(data_dir, store=store_identity(ledger, data_dir),
                          store_id=read_store_id(ledger.recorder))
        try:
            _refresh_prices(con)
            applied = _apply(con, ledger, stop, max_sections, section, after_section)
            pos, gen = position(con), generation(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        if publish_snapshot:
            publish(data_dir, pos, gen)
    return applied


def store_identity(ledger: Ledger, data_dir: Path) -> str:
    """Names the event store ``ledger`` reads, in the form of
    :meth:`ledger.config.Settings.store_identity`: ``sqlite:events.db`` for the data
    directory's own file (else ``sqlite:<absolute path>``), or the PostgreSQL server,
    database and schema."""
    env = ledger.env
    if "postgres" in (env.get("PERSISTENCE_MODULE") or ""):
        return (
            f"postgresql://{env.get('POSTGRES_HOST') or '127.0.0.1'}:"
            f"{env.get('POSTGRES_PORT') or 5432}/{env.get('POSTGRES_DBNAME') or 'postgres'}"
            f"?schema={env.get('POSTGRES_SCHEMA') or 'public'}"
        )
    db = Path(env.get("SQLITE_DBNAME") or "").resolve()
    if db.parent == Path(data_dir).resolve():
        return f"sqlite:{db.name}"
    return f"sqlite:{db}"


def rebuild(ledger: Ledger, data_dir: Path, *, section: int = SECTION) -> int:
    """Delete the analytics file and replay the whole log into a new one."""
    with writer_lock(data_dir):
        remove_all(data_dir)
    return catch_up(ledger, data_dir, section=section)


def _apply(
    con: Any,
    ledger: Ledger,
    stop: int | None,
    max_sections: int | None,
    section: int,
    after_section: Callable[[int], None] | None,
) -> int:
    applied = sections = 0

    def more(after: int, done: int) -> bool:
        return (max_sections is None or done < max_sections) and (stop is None or after < stop)

    def read(after: int) -> tuple[int, int, Any] | None:
        with _gc_paused():  # ~100k short-lived objects: no cyclic GC passes over them
            notifications = ledger.recorder.select_notifications(
                start=after, limit=section, stop=stop, inclusive_of_start=False
            )
            if not notifications:
                return None
            return notifications[-1].id, len(notifications), extract.stage_table(notifications)

    # One reader thread stays a section ahead: the next section is read and staged
    # (Python) while DuckDB applies this one (DuckDB releases the GIL).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="analytics-read") as pool:
        start = position(con)
        ahead = pool.submit(read, start) if more(start, 0) else None
        while ahead is not None:
            got = ahead.result()
            if got is None:
                break
            last, count, stage = got
            ahead = pool.submit(read, last) if more(last, sections + 1) else None
            _apply_section(con, stage, start, last)
            del stage, got
            applied += count
            sections += 1
            start = last
            if after_section is not None:
                after_section(last)
    return applied


def _apply_section(con: Any, stage: Any, start: int, last: int) -> None:
    """Events, derived rows and tracking of one section, in one DuckDB transaction."""
    con.begin()
    try:
        con.register("stage", stage)
        con.execute(extract.insert_events_sql())
        con.unregister("stage")
        _derive(con, start)
        moved = con.execute(
            "UPDATE analytics_tracking SET position = $new "
            "WHERE name = $name AND position = $old RETURNING position",
            {"new": last, "name": TRACKING_NAME, "old": start},
        ).fetchall()
        if len(moved) != 1:
            raise TrackingConflict(f"analytics position is no longer {start}")
        con.commit()
    except BaseException:
        con.rollback()
        raise


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _derive(con: Any, after: int) -> None:
    """Recompute the derived tables of the sessions with events after ``after``."""
    models = extract.new_models(con, after)
    if models:
        con.executemany(extract.INSERT_PRICES, extract.price_rows(models))
    con.execute(extract.TOUCHED, {"after": after})
    _recompute(con)


def _recompute(con: Any) -> None:
    lo = con.execute("SELECT min(lo) FROM touched").fetchone()[0]
    if lo is None:
        return
    for sql in extract.RECOMPUTE:
        con.execute(sql, {"lo": lo} if "$lo" in sql else None)


def _refresh_prices(con: Any) -> None:
    """When the bundled price table changed, re-price every model and recompute."""
    from projections import pricing

    version = pricing.PRICE_TABLE_VERSION
    row = con.execute("SELECT value FROM analytics_meta WHERE key = 'price_table_version'")
    found = row.fetchone()
    if found and found[0] == version:
        return
    con.begin()
    try:
        con.execute("DELETE FROM model_prices")
        models = [r[0] for r in con.execute(
            "SELECT DISTINCT model FROM events WHERE kind = 'UsageRecorded' AND model IS NOT NULL"
        ).fetchall()]
        if models:
            con.executemany(extract.INSERT_PRICES, extract.price_rows(models))
        con.execute(
            "CREATE OR REPLACE TEMP TABLE touched AS "
            "SELECT id, 0::BIGINT AS lo FROM sessions"
        )
        _recompute(con)
        con.execute(
            "INSERT OR REPLACE INTO analytics_meta VALUES ('price_table_version', ?)", [version]
        )
        if found:  # costs changed at the same position: readers need a new snapshot
            next_generation(con)
        con.commit()
    except BaseException:
        con.rollback()
        raise

