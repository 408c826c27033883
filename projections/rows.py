"""Batched row access for projections: prefetch by key, mutate in memory, upsert once.

A projection applies a batch of events (up to 1,000) to rows held in a
:class:`RowCache`; the runner then writes every changed row with one executemany
upsert per table, in the same transaction as the tracking position.
"""

from __future__ import annotations

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
            if len(pk) == 1:
                cond = pk[0].in_([k[0] for k in chunk])
            else:
                cond = tuple_(*pk).in_(chunk)
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
            rows = [{c: self.rows[name][k].get(c) for c in columns} for k in sorted(keys, key=repr)]
            upsert(self.conn, table, rows)
            keys.clear()


def upsert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """INSERT … ON CONFLICT (primary key) DO UPDATE, for SQLite and PostgreSQL."""
    if not rows:
        return
    dialect = conn.dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table)
    pk = [c.name for c in table.primary_key.columns]
    update = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in pk}
    if update:
        stmt = stmt.on_conflict_do_update(index_elements=pk, set_=update)
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=pk)
    conn.execute(stmt, rows)
