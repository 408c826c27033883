"""``search`` projection: the documents full-text search runs over, and their index.

One ``search_documents`` row per searchable text, keyed by a deterministic ``doc_id``
(the first 63 bits of BLAKE2b of ``session id`` + ``ref``, so a rebuild gives the same
ids):

===============  ===========================  ===============================================
kind             ref                          from
===============  ===========================  ===============================================
``prompt``       ``prompt:<position>``        ``PromptSubmitted`` (``human`` and ``task``)
``tool_input``   ``tool:<position>``          ``ToolCallStarted``: the strings of its input
``summary``      ``summary:<scope>:<batch>``  ``Summarised`` (replaced by a later summary)
``observation``  ``observation:<pos>:<i>``    each observation of a ``Summarised`` (deleted
                                              when a later summary replaces that one)
===============  ===========================  ===============================================

Bodies are cut at :data:`MAX_BODY` characters. They are indexed in the same transaction
as the rows and the tracking position (exactly once, like every read model):

* SQLite: an FTS5 table ``search_fts`` (``porter unicode61`` tokenizer: case-folded,
  diacritics removed, English stemming) whose ``rowid`` is ``doc_id``; the projection
  writes it beside the rows (:meth:`SearchProjection.flush`).
* PostgreSQL: a stored generated column ``tsv`` = :func:`pg_document` of ``body``
  (``english`` configuration, punctuation made spaces first) with a GIN index on it,
  both kept by the database; ranking reads the stored vector instead of parsing every
  matching body again.

Both are :class:`~projections.base.Companion` objects, so ``projections rebuild search``
rebuilds and swaps them with the table. Queries: :mod:`projections.search_query`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import bindparam

from ledger.observation import BATCH_OPENERS
from ledger.session import Session
from ledger.summary import MAX_ITEMS
from projections.base import Batch, Companion, Projection, event_time
from projections.rows import RowCache

MAX_BODY = 8_000
"""Characters of one document that are stored and indexed."""
TITLE_CHARS = 160
FTS_CONFIG = "english"
"""PostgreSQL text search configuration (SQLite: the ``porter`` tokenizer)."""
PG_SEPARATORS = r"[!-/:-@[-`{-~\s]+"
"""PostgreSQL regular expression (ARE) of the characters that separate words: every
ASCII punctuation character (``!``..``/``, ``:``..``@``, ``[``..`` ` ``, ``{``..``~``,
underscore included, as in FTS5) and white space."""
TSV_COLUMN = "tsv"
"""PostgreSQL: the stored ``tsvector`` column of ``search_documents``."""


def pg_words(column: str) -> str:
    """``column`` with runs of ASCII punctuation and white space replaced by one space,
    so that PostgreSQL's parser sees the words FTS5's ``unicode61`` sees: ``2>/dev/null``
    holds ``dev`` and ``null``, ``snake_case`` holds ``snake`` and ``case``, not one
    file-path or identifier token. The class is spelled as ASCII ranges (not ``\\W``,
    whose meaning depends on the database's collation: under ``C`` it would erase every
    non-ASCII letter)."""
    return f"regexp_replace({column}, '{PG_SEPARATORS}', ' ', 'g')"


def pg_document(column: str) -> str:
    """The indexed tsvector expression on PostgreSQL."""
    return f"to_tsvector('{FTS_CONFIG}', {pg_words(column)})"


def doc_id(session_id: str, ref: str) -> int:
    """The document's id: 63 bits of BLAKE2b(session id, ref) (a positive int64)."""
    digest = hashlib.blake2b(f"{session_id}\x00{ref}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def fts_table(documents_table: str) -> str:
    """Name of the SQLite FTS5 table beside ``search_documents[suffix]``."""
    return "search_fts" + documents_table.removeprefix("search_documents")


def companions(dialect: str, suffix: str = "") -> list[Companion]:
    """The full-text index of ``search_documents{suffix}`` on ``dialect``."""
    if dialect == "sqlite":
        name = f"search_fts{suffix}"
        return [Companion(
            "table", name,
            f"CREATE VIRTUAL TABLE IF NOT EXISTS \"{name}\" USING fts5(body, tokenize = 'porter unicode61')",
        )]
    table, name = f"search_documents{suffix}", f"search_documents_fts{suffix}"
    return [
        Companion(
            "column", TSV_COLUMN,
            f'ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS "{TSV_COLUMN}" tsvector '
            f"GENERATED ALWAYS AS ({pg_document('body')}) STORED",
            table,
        ),
        Companion("index", name, f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" USING gin ("{TSV_COLUMN}")'),
    ]


def searchable_text(value: Any, limit: int = MAX_BODY) -> str:
    """The strings inside a tool input (depth first, dict values in order), joined by
    newlines and cut at ``limit`` characters; keys, numbers and booleans left out."""
    parts: list[str] = []
    size = 0
    stack = [value]
    while stack and size < limit:
        item = stack.pop()
        if isinstance(item, str):
            if item.strip():
                parts.append(item)
                size += len(item) + 1
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
    return "\n".join(parts)[:limit]


def _line(text: str, limit: int = TITLE_CHARS) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


_TITLE_FIELDS = ("command", "file_path", "notebook_path", "pattern", "url", "query", "path", "description")


def _tool_title(name: str, tool_input: Any) -> str:
    if isinstance(tool_input, dict):
        for field in _TITLE_FIELDS:
            value = tool_input.get(field)
            if isinstance(value, str) and value.strip():
                return _line(f"{name}: {value}")
    return name


def _summary_body(e: Session.Summarised) -> str:
    lines = [e.request or ""]
    for part in (e.investigated, e.learned, e.completed, e.next_steps, e.files_edited, e.commands_failed):
        lines.extend(part)
    return "\n".join(x for x in lines if x)


class SearchProjection(Projection):
    name = "search"
    kinds = (Session.PromptSubmitted, Session.ToolCallStarted, Session.Summarised)

    def __init__(self, tables: dict[str, Any]) -> None:
        super().__init__(tables)
        self._fts = fts_table(tables["search_documents"].name)
        self._pending: dict[int, str] = {}  # doc_id -> body, to index at flush
        self._dropped: set[int] = set()  # doc_ids to delete at flush

    @classmethod
    def companions(cls, dialect: str, suffix: str = "") -> list[Companion]:
        return companions(dialect, suffix)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        self._pending.clear()  # rows are upserted by key: nothing to load
        self._dropped.clear()

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if isinstance(event, Session.PromptSubmitted):
            if event.prompt_kind in BATCH_OPENERS and event.text.strip():
                self._put(rows, event, position, f"prompt:{position}", "prompt", _line(event.text), event.text)
        elif isinstance(event, Session.ToolCallStarted):
            body = searchable_text(event.tool_input)
            title = _tool_title(event.tool_name, event.tool_input)
            self._put(rows, event, position, f"tool:{position}", "tool_input", title, f"{event.tool_name}\n{body}")
        elif isinstance(event, Session.Summarised):
            # the observations of the summary this one replaces are no longer current
            old = rows.get("search_documents", (doc_id(str(event.originator_id), _summary_ref(event)),))
            if old is not None and old["position"] != position:
                sid = str(event.originator_id)
                for i in range(MAX_ITEMS):
                    key = doc_id(sid, f"observation:{old['position']}:{i}")
                    self._dropped.add(key)
                    self._pending.pop(key, None)
                    rows.rows["search_documents"].pop((key,), None)
                    rows.dirty["search_documents"].discard((key,))
            self._put(rows, event, position, _summary_ref(event), "summary",
                      _line(event.request or f"{event.scope} summary"), _summary_body(event))
            for i, o in enumerate(event.observations):
                body = "\n".join([o.title, o.detail, *o.files])
                self._put(rows, event, position, f"observation:{position}:{i}", "observation",
                          _line(f"{o.kind}: {o.title}"), body)

    def _put(self, rows: RowCache, event: Session.Event, position: int, ref: str, kind: str,
             title: str, body: str) -> None:
        sid = str(event.originator_id)
        key = doc_id(sid, ref)
        body = body[:MAX_BODY]
        self._pending[key] = body
        rows.put("search_documents", (key,), {
            "doc_id": key,
            "session_id": sid,
            "ref": ref,
            "kind": kind,
            "batch": event.batch,
            "title": title,
            "body": body,
            # a summary's own time is when it was written: the query uses the session's
            # last activity instead
            "occurred_at": None if kind in ("summary", "observation") else event_time(event),
            "position": position,
        })

    def flush(self, rows: RowCache) -> None:
        rows.flush()
        conn = rows.conn
        if conn.dialect.name == "sqlite" and self._pending:
            # OR REPLACE: a summary replaced by a later one keeps its doc_id, and an index
            # row left by an interrupted upgrade or a losing concurrent runner (whose
            # transaction then fails on tracking) never turns into a constraint error
            conn.exec_driver_sql(
                f'INSERT OR REPLACE INTO "{self._fts}" (rowid, body) VALUES (?, ?)',
                sorted(self._pending.items()),
            )
        if self._dropped:
            dropped = [(k,) for k in sorted(self._dropped)]
            table = self.tables["search_documents"]
            conn.execute(table.delete().where(table.c.doc_id == bindparam("k")), [{"k": k} for (k,) in dropped])
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(f'DELETE FROM "{self._fts}" WHERE rowid = ?', dropped)
        self._pending.clear()
        self._dropped.clear()


def _summary_ref(e: Session.Summarised) -> str:
    return f"summary:{e.scope}:{e.batch if e.scope == 'batch' else 0}"
