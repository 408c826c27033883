"""Batched row access for projections: prefetch by key, mutate in memory, upsert once.

A projection applies a batch of events (up to 1,000) to rows held in a
:class:`RowCache`; the runner then writes every changed row with one executemany
upsert per table, in the same transaction as the tracking position.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Table, tuple_
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

    def prefetch(self, name: str, keys: Iterable[Key]) -> None:
        """Load the rows with these primary keys (missing ones are remembered as absent)."""
        table = self.tables[name]
        pk = list(table.primary_key.columns)
        wanted = [k for k in set(keys) if k not in self.rows[name] and k not in self.absent[name]]
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]
            cond = pk[0].in_([k[0] for k in chunk]) if len(pk) == 1 else tuple_(*pk).in_(chunk)
            found = set()
            for row in self.conn.execute(table.select().where(cond)).mappings():
                key = tuple(row[c.name] for c in pk)
                self.rows[name][key] = dict(row)
                found.add(key)
            self.absent[name].update(set(chunk) - found)

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

    def flush(self) -> None:
        """Upsert every changed row (one executemany per table)."""
        for name, keys in self.dirty.items():
            if not keys:
                continue
            table = self.tables[name]
            columns = [c.name for c in table.columns]
            rows = self.rows[name]
            values = [tuple(map(rows[k].get, columns)) for k in sorted(keys)]
            upsert_values(self.conn, table, values)
            keys.clear()


def upsert_values(conn: Connection, table: Table, values: list[tuple[Any, ...]]) -> None:
    """Upsert rows given as tuples in the table's column order, through the driver's
    own ``executemany`` (SQLAlchemy's per-row parameter processing is the slow part
    of a rebuild; these values are plain str/int/bool/None)."""
    if values:
        conn.exec_driver_sql(_upsert_sql(table, conn.dialect.name, conn.dialect.paramstyle), values)


@functools.cache
def _upsert_sql(table: Table, dialect: str, paramstyle: str) -> str:
    """``INSERT … ON CONFLICT (pk) DO UPDATE SET c = excluded.c`` (same text for SQLite
    and PostgreSQL but for the parameter markers)."""
    q = (postgresql if dialect == "postgresql" else sqlite).dialect().identifier_preparer.quote
    columns = [c.name for c in table.columns]
    pk = [c.name for c in table.primary_key.columns]
    marker = "?" if paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {q(table.name)} ({', '.join(map(q, columns))}) "
        f"VALUES ({', '.join([marker] * len(columns))}) "
        f"ON CONFLICT ({', '.join(map(q, pk))}) "
    )
    updates = [f"{q(c)} = excluded.{q(c)}" for c in columns if c not in pk]
    return sql + (f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING")
