"""Batched row access for projections: prefetch by key, mutate in memory, upsert once.

A projection applies a section of events (up to 5,000) to rows held in a
:class:`RowCache`; the runner then writes every changed row with one executemany
upsert per table, in the same transaction as the tracking position. Rows that are
only ever written once (an ``event_index`` row per position) skip the cache:
:meth:`RowCache.add` queues them as tuples.

On SQLite the prefetch joins the table to a ``VALUES`` list of the wanted keys: the
``(a, b) IN (VALUES …)`` form scans the whole table for every chunk of keys, which
made a rebuild quadratic in the size of the tables with two-column keys.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Boolean, Connection, Table, tuple_
from sqlalchemy.dialects import postgresql, sqlite

Key = tuple[Any, ...]
_CHUNK = 400


class RowCache:
    """Rows of some tables, keyed by primary key tuple."""

    def __init__(self, conn: Connection, tables: dict[str, Table]) -> None:
        self.conn = conn
        self.tables = tables
        self.rows: dict[str, dict[Key, dict[str, Any]]] = {name: {} for name in tables}
        self.dirty: dict[str, set[Key]] = {name: set() for name in tables}
        self.absent: dict[str, set[Key]] = {name: set() for name in tables}
        self.added: dict[str, list[tuple[Any, ...]]] = {name: [] for name in tables}

    def prefetch(self, name: str, keys: Iterable[Key]) -> None:
        """Load the rows with these primary keys (missing ones are remembered as absent)."""
        table = self.tables[name]
        held, absent = self.rows[name], self.absent[name]
        wanted = [k for k in set(keys) if k not in held and k not in absent]
        sqlite = self.conn.dialect.name == "sqlite"
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]
            found = set()
            for key, row in (_select_sqlite if sqlite else _select)(self.conn, table, chunk):
                held[key] = row
                found.add(key)
            absent.update(set(chunk) - found)

    def get(self, name: str, key: Key) -> dict[str, Any] | None:
        row = self.rows[name].get(key)
        if row is None and key not in self.absent[name]:
            self.prefetch(name, [key])
            row = self.rows[name].get(key)
        return row

    def put(self, name: str, key: Key, row: dict[str, Any]) -> None:
        self.rows[name][key] = row
        self.absent[name].discard(key)
        self.dirty[name].add(key)

    def touch(self, name: str, key: Key) -> None:
        self.dirty[name].add(key)

    def add(self, name: str, values: tuple[Any, ...]) -> None:
        """Queue a row that nothing reads back before the flush (its key is new), as a
        tuple in the table's column order; written (upserted) before the changed rows."""
        self.added[name].append(values)

    def flush(self) -> None:
        """Upsert every added and changed row (one executemany each per table)."""
        for name, added in self.added.items():
            if added:
                upsert_values(self.conn, self.tables[name], added)
                self.added[name] = []
        for name, keys in self.dirty.items():
            if not keys:
                continue
            table = self.tables[name]
            columns = [c.name for c in table.columns]
            rows = self.rows[name]
            values = [tuple(map(rows[k].get, columns)) for k in sorted(keys)]
            upsert_values(self.conn, table, values)
            keys.clear()


def _select(
    conn: Connection, table: Table, keys: list[Key]
) -> Iterable[tuple[Key, dict[str, Any]]]:
    """(key, row) of the rows with these primary keys, through SQLAlchemy."""
    pk = list(table.primary_key.columns)
    cond = pk[0].in_([k[0] for k in keys]) if len(pk) == 1 else tuple_(*pk).in_(keys)
    for row in conn.execute(table.select().where(cond)).mappings():
        yield tuple(row[c.name] for c in pk), dict(row)


def _select_sqlite(
    conn: Connection, table: Table, keys: list[Key]
) -> Iterable[tuple[Key, dict[str, Any]]]:
    """(key, row) of the rows with these primary keys: the table joined to the keys as
    a ``VALUES`` list (an index search per key), read through the driver."""
    sql, columns, pk_at, bools = _select_sql(_shape(table), len(keys))
    params = [v for k in keys for v in k]
    for values in conn.exec_driver_sql(sql, tuple(params)).fetchall():
        row = dict(zip(columns, values, strict=True))
        for c in bools:  # what SQLAlchemy's Boolean gives on SQLite
            if row[c] is not None:
                row[c] = bool(row[c])
        yield tuple(values[i] for i in pk_at), row


_Shape = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _shape(table: Table) -> _Shape:
    """(name, columns, primary key columns, Boolean columns): what the SQL depends on."""
    return (
        table.name,
        tuple(c.name for c in table.columns),
        tuple(c.name for c in table.primary_key.columns),
        tuple(c.name for c in table.columns if isinstance(c.type, Boolean)),
    )


@functools.lru_cache(maxsize=512)
def _select_sql(shape: _Shape, n: int) -> tuple[str, tuple[str, ...], list[int], tuple[str, ...]]:
    name, columns, pk, bools = shape
    q = sqlite.dialect().identifier_preparer.quote
    row = "(" + ", ".join("?" * len(pk)) + ")"
    on = " AND ".join(f"t.{q(c)} = v.column{i + 1}" for i, c in enumerate(pk))
    sql = (
        f"SELECT {', '.join(f't.{q(c)}' for c in columns)} "
        f"FROM (VALUES {', '.join([row] * n)}) AS v JOIN {q(name)} AS t ON {on}"
    )
    return sql, columns, [columns.index(c) for c in pk], bools


def upsert_values(conn: Connection, table: Table, values: list[tuple[Any, ...]]) -> None:
    """Upsert rows given as tuples in the table's column order, through the driver's
    own ``executemany`` (SQLAlchemy's per-row parameter processing is the slow part
    of a rebuild; these values are plain str/int/bool/None)."""
    if values:
        sql = _upsert_sql(_shape(table), conn.dialect.name, conn.dialect.paramstyle)
        conn.exec_driver_sql(sql, values)


@functools.lru_cache(maxsize=256)
def _upsert_sql(shape: _Shape, dialect: str, paramstyle: str) -> str:
    """``INSERT … ON CONFLICT (pk) DO UPDATE SET c = excluded.c`` (same text for SQLite
    and PostgreSQL but for the parameter markers). Cached by the table's name and
    columns, not the Table object: every rebuild makes new shadow Table objects."""
    q = (postgresql if dialect == "postgresql" else sqlite).dialect().identifier_preparer.quote
    name, columns, pk, _ = shape
    marker = "?" if paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {q(name)} ({', '.join(map(q, columns))}) "
        f"VALUES ({', '.join([marker] * len(columns))}) "
        f"ON CONFLICT ({', '.join(map(q, pk))}) "
    )
    updates = [f"{q(c)} = excluded.{q(c)}" for c in columns if c not in pk]
    return sql + (f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING")
