"""Full-text search over the ``search`` read model (:mod:`projections.search`).

A query is reduced to its words (``\\w+``, case-folded; at most :data:`MAX_TERMS`):
operators, quotes and punctuation are never passed to the database, so no input can
be a syntax error or an injection. All words must match (``any_term=True``: any
word). Matching is stemmed English on both backends (SQLite FTS5 ``porter``,
PostgreSQL ``english``), so ``tests`` finds ``test`` and ``testing``.

Ranking, ``order="best"`` (the default): the :data:`CANDIDATES` most relevant documents
(SQLite ``bm25``, PostgreSQL ``ts_rank_cd``) are scored ``relevance × (0.5 + 0.5 ×
2^(−age_days / half_life_days))``, relevance normalised to the best candidate (1.0), so
of two equally relevant documents the more recent comes first and age alone can at
most halve a score. ``order="recent"``: matches newest first (log position).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select, text

from projections.schema import session_times
from projections.search import FTS_CONFIG, TSV_COLUMN, fts_table, pg_words

KINDS = ("prompt", "tool_input", "summary", "observation")
MAX_TERMS = 32
CANDIDATES = 200
HALF_LIFE_DAYS = 14.0
_WORD = re.compile(r"\w+")
_HIT_TIME = (
    "COALESCE(d.occurred_at, s.last_activity_at, s.last_activity_recorded_at, s.first_recorded_at)"
)
"""A hit's time: its own (the source's, else the ledger's), else (a summary or an
observation) its session's last activity (:func:`projections.schema.session_times`)."""
_MARK = ("\x02", "\x03")  # snippet highlight markers, replaced by « » after the query
HEADLINE = f"StartSel={_MARK[0]}, StopSel={_MARK[1]}, MaxWords=30, MinWords=10, MaxFragments=1, FragmentDelimiter=…"


class SearchQueryError(ValueError):
    """The query has no words, or names an unknown kind or order."""


@dataclass(frozen=True)
class SearchHit:
    """One matching document. ``snippet``: the matching passage with matched words in
    « » (on PostgreSQL without its punctuation); ``occurred_at``: ISO-8601 UTC (the source's time; for a summary or
    observation, its session's last activity, as ``GET /v1/sessions`` gives it: the
    ledger's clock for a source without one); ``score``: the ranking score (0–1, higher
    first); ``relevance``: the backend's own rank (bm25 negated, or ts_rank_cd)."""

    doc_id: int
    session_id: str
    agent: str | None
    cwd: str | None
    kind: str
    batch: int
    title: str
    snippet: str
    occurred_at: str | None
    position: int
    relevance: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def terms(query: str) -> list[str]:
    """The distinct words of ``query``, case-folded, in order (at most MAX_TERMS)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.casefold()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def search(
    conn: Connection,
    tables: dict[str, Table],
    query: str,
    *,
    limit: int = 20,
    kinds: tuple[str, ...] | None = None,
    session_id: str | None = None,
    cwd: str | None = None,
    any_term: bool = False,
    order: str = "best",
    now: datetime | None = None,
    half_life_days: float = HALF_LIFE_DAYS,
) -> list[SearchHit]:
    """Documents matching ``query`` (optionally only ``kinds``, one session, or sessions
    whose ``cwd`` is ``cwd``), best first, at most ``limit``.

    ``tables``: ``search_documents`` and ``sessions``. Raises :class:`SearchQueryError`
    for a query with no words, an unknown kind or order."""
    words = terms(query)
    if not words:
        raise SearchQueryError("the query has no words to search for")
    if order not in ("best", "recent"):
        raise SearchQueryError(f"unknown order {order!r}: best or recent")
    unknown = set(kinds or ()) - set(KINDS)
    if unknown:
        raise SearchQueryError(f"unknown kind(s) {sorted(unknown)}: {', '.join(KINDS)}")
    docs, sessions = tables["search_documents"], tables["sessions"]
    filters, params = _filters(kinds, session_id, cwd)
    k = max(limit, 1) if order == "recent" else max(limit, CANDIDATES)
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        params["match"] = (" OR " if any_term else " ").join(f'"{w}"' for w in words)
        fts = '"' + fts_table(docs.name) + '"'
        ranked = "d.position DESC" if order == "recent" else f"bm25({fts}), d.position DESC"
        sql = (
            "SELECT d.doc_id, d.session_id, s.agent, s.cwd, d.kind, d.batch, d.title, "
            f"{_HIT_TIME} AS occurred_at, d.position, "
            f"-bm25({fts}) AS relevance "
            f'FROM {fts} JOIN "{docs.name}" AS d ON d.doc_id = {fts}.rowid '
            f'LEFT JOIN "{sessions.name}" AS s ON s.id = d.session_id '
            f"WHERE {fts} MATCH :match {filters} ORDER BY {ranked} LIMIT :k"
        )
        snippets = (
            f"SELECT rowid, snippet({fts}, 0, '{_MARK[0]}', '{_MARK[1]}', '…', 24) "
            f"FROM {fts} WHERE {fts} MATCH :match AND rowid IN :ids"
        )
    else:
        params.update(config=FTS_CONFIG, tsq=(" | " if any_term else " & ").join(f"'{w}'" for w in words))
        sql = (
            "SELECT d.doc_id, d.session_id, s.agent, s.cwd, d.kind, d.batch, d.title, "
            f"{_HIT_TIME} AS occurred_at, d.position, "
            f"ts_rank_cd(d.{TSV_COLUMN}, to_tsquery(:config, :tsq)) AS relevance "
            f'FROM "{docs.name}" AS d LEFT JOIN "{sessions.name}" AS s ON s.id = d.session_id '
            f"WHERE d.{TSV_COLUMN} @@ to_tsquery(:config, :tsq) {filters} "
            f"ORDER BY {'d.position DESC' if order == 'recent' else 'relevance DESC, d.position DESC'} "
            "LIMIT :k"
        )
        snippets = (
            f"SELECT doc_id, ts_headline(:config, {pg_words('body')}, to_tsquery(:config, :tsq), :headline) "
            f'FROM "{docs.name}" WHERE doc_id IN :ids'
        )
    params["k"] = k
    statement = text(sql)
    if "kinds" in params:
        statement = statement.bindparams(bindparam("kinds", expanding=True))
    rows = [dict(r) for r in conn.execute(statement, params).mappings()]
    hits = _rank(rows, order, now or datetime.now(UTC), half_life_days)[:limit]
    # snippets (the costly part) only for the hits returned
    if hits:
        found = dict(conn.execute(
            text(snippets).bindparams(bindparam("ids", expanding=True)),
            {**({"match": params["match"]} if sqlite else {
                "config": FTS_CONFIG, "tsq": params["tsq"], "headline": HEADLINE}),
             "ids": [h.doc_id for h in hits]},
        ).all())
        hits = [replace(h, snippet=_snippet(found.get(h.doc_id))) for h in hits]
    return hits


def _snippet(raw: str | None) -> str:
    text_ = (raw or "").replace(_MARK[0], "«").replace(_MARK[1], "»")
    return " ".join(text_.split())


def _filters(kinds: tuple[str, ...] | None, session_id: str | None, cwd: str | None) -> tuple[str, dict[str, Any]]:
    parts, params = [], {}
    if kinds:
        parts.append("AND d.kind IN :kinds")
        params["kinds"] = list(kinds)
    if session_id:
        parts.append("AND d.session_id = :session_id")
        params["session_id"] = session_id
    if cwd:
        parts.append("AND s.cwd = :cwd")
        params["cwd"] = cwd
    return " ".join(parts), params


def _rank(rows: list[dict[str, Any]], order: str, now: datetime, half_life: float) -> list[SearchHit]:
    best = max((float(r["relevance"] or 0.0) for r in rows), default=0.0) or 1.0
    hits = []
    for r in rows:
        relevance = float(r["relevance"] or 0.0)
        age = _age_days(r["occurred_at"], now)
        score = (relevance / best) * (0.5 + 0.5 * 2 ** (-age / half_life))
        hits.append(SearchHit(
            doc_id=int(r["doc_id"]), session_id=r["session_id"], agent=r["agent"], cwd=r["cwd"],
            kind=r["kind"], batch=int(r["batch"]), title=r["title"], snippet="",
            occurred_at=r["occurred_at"], position=int(r["position"]), relevance=relevance,
            score=round(score, 6),
        ))
    if order == "best":
        hits.sort(key=lambda h: (-h.score, -h.position))
    return hits


def _age_days(at: str | None, now: datetime) -> float:
    if not at:
        return 0.0
    try:
        then = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (now - then).total_seconds() / 86400)


def recent_documents(
    conn: Connection, tables: dict[str, Table], *, kinds: tuple[str, ...], cwd: str, limit: int
) -> list[dict[str, Any]]:
    """The newest documents of ``kinds`` in sessions whose ``cwd`` is ``cwd`` (no query):
    dicts with ``session_id``, ``kind``, ``title``, ``body``, ``occurred_at``, ``position``."""
    d, s = tables["search_documents"], tables["sessions"]
    q = (
        select(d.c.session_id, d.c.kind, d.c.title, d.c.body,
               func.coalesce(d.c.occurred_at, session_times(s)["last_activity_at"]).label("occurred_at"),
               d.c.position)
        .join(s, s.c.id == d.c.session_id)
        .where(s.c.cwd == cwd, d.c.kind.in_(kinds))
        .order_by(d.c.position.desc())
        .limit(limit)
    )
    return [dict(r) for r in conn.execute(q).mappings()]


def search_models(models: Any, query: str, **options: Any) -> list[SearchHit]:
    """:func:`search` over ``models`` (:class:`projections.runner.ReadModels`); same
    options and errors."""
    with models.engine.connect() as conn:
        return search(conn, _tables(models), query, **options)


def _tables(models: Any) -> dict[str, Table]:
    return {n: models.table(n) for n in ("search_documents", "sessions")}
