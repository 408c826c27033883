"""Read-model schema upgrades: a projection whose tables no longer match the code is
dropped and rebuilt from the log.

Read models are disposable (every row derives from the ledger), so an upgrade that adds
or removes columns needs no migration scripts: :func:`reset_outdated` compares each
live table's columns with the table the code defines and, for a projection with any
difference, drops its tables and its tracking row. The next catch-up fills the fresh
tables from position 0 (the same path as ``hookledger projections rebuild``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy import Connection, Engine, Table, inspect


def reset_outdated(
    engine: Engine,
    tables: dict[str, dict[str, Table]],
    tracking: Table,
    ignore: Mapping[str, set[str]] | None = None,
    on_drop: Callable[[Connection, str], None] | None = None,
    created: set[str] | None = None,
) -> list[str]:
    """Drop the tables and tracking row of every projection whose live columns differ
    from ``tables`` (projection name -> base name -> Table); returns those names.

    ``ignore``: table name -> live columns the code does not model (generated columns
    the projection adds itself). ``on_drop(conn, name)`` runs in the same transaction
    for each projection dropped (to drop its full-text index, say), so an interrupted
    upgrade leaves either everything or nothing of it. ``created``: names of the tables
    that did not exist before this start; a projection with some of its tables new and
    some old gained a table, which its tracking position never filled: it is outdated."""
    ignore = ignore or {}
    created = created or set()
    names = [t.name for own in tables.values() for t in own.values()]
    # every table's columns in one catalogue query (PostgreSQL; SQLite: one PRAGMA per
    # table, in-process), not a has_table and a get_columns round trip per table
    columns = {
        table: {c["name"] for c in cols}
        for (_schema, table), cols in inspect(engine).get_multi_columns(filter_names=names).items()
    }
    outdated = []
    for name, own in tables.items():
        new = [t.name in created for t in own.values()]
        if any(new) and not all(new):
            outdated.append(name)
            continue
        for t in own.values():
            if t.name in columns:
                live = columns[t.name] - ignore.get(t.name, set())
                if live != {c.name for c in t.columns}:
                    outdated.append(name)
                    break
    if outdated:
        with engine.begin() as conn:
            for name in outdated:
                if on_drop is not None:
                    on_drop(conn, name)
                for t in tables[name].values():
                    t.drop(conn, checkfirst=True)
                conn.execute(tracking.delete().where(tracking.c.name == name))
    return outdated
