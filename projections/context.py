"""Context for a starting session: a short markdown digest of what hookledger remembers
about the project (same ``cwd``) and of its recent sessions, read from the ``search``,
``sessions``, ``prompt_batches`` and ``tool_calls`` read models.

Memory first (at most :data:`MEMORY_SHARE` of the budget): the observations and
summaries of the project most relevant to its latest prompts (the asking session's own
when it has some, else the project's), ranked by :func:`projections.search_query.search`
(relevance weighted by recency); with no prompt words or no match, the newest
observations.

Per session (most recent activity first, subagent sessions and the asking session
left out): when and how it ended, what was asked (prompts), what was done (tool
counts, files edited) and what failed (tool errors). The whole digest is at most
``max_chars`` characters (10,000 by default: Claude Code's ``additionalContext`` cap).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from sqlalchemy import select

from projections.runner import ReadModels
from projections.schema import session_times
from projections.search_query import recent_documents, search, terms

MAX_CHARS = 10_000
MEMORY_SHARE = 0.4
MEMORY_ITEMS = 8
QUERY_PROMPTS = 5
QUERY_TERMS = 12
_STOPWORDS = frozenset({
    "about", "after", "also", "been", "before", "being", "both", "could", "does", "doing",
    "done", "each", "from", "have", "here", "into", "just", "like", "make", "more", "most",
    "much", "need", "only", "other", "over", "please", "same", "should", "some", "such",
    "than", "that", "their", "them", "then", "there", "these", "they", "this", "those",
    "through", "under", "very", "want", "were", "what", "when", "where", "which", "while",
    "with", "would", "your", "file", "files", "code",
})
MAX_SESSIONS = 5
PROMPTS_PER_SESSION = 5
ERRORS_PER_SESSION = 5
FILES_PER_SESSION = 15
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}


def _short(text: str | None, limit: int) -> str:
    one_line = " ".join((text or "").split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def recent_sessions(
    models: ReadModels, cwd: str, exclude: str | None, limit: int
) -> list[dict[str, Any]]:
    """Top-level sessions in ``cwd`` (most recent activity first), except the one whose
    ledger or agent id is ``exclude``."""
    s = models.table("sessions")
    times = session_times(s)
    last = times["last_activity_at"]
    q = (
        select(s.c.id, s.c.external_id, s.c.agent, s.c.status, s.c.model, s.c.prompt_count,
               s.c.tool_call_count, s.c.tool_error_count,
               times["started_at"].label("started_at"), last.label("last_activity_at"))
        .where(s.c.cwd == cwd, s.c.parent_id.is_(None))
        .order_by(last.desc(), s.c.id)
        .limit(limit + 1)
    )
    with models.engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(q).mappings()]
    return [r for r in rows if exclude not in (r["id"], r["external_id"])][:limit]


def _details(models: ReadModels, sid: str) -> tuple[list[str], Counter[str], list[str], list[str]]:
    b = models.table("prompt_batches")
    tc = models.table("tool_calls")
    with models.engine.connect() as conn:
        prompts = [
            r[0] for r in conn.execute(
                select(b.c.prompt).where(b.c.session_id == sid, b.c.prompt.is_not(None))
                .order_by(b.c.batch)
            )
        ]
        calls = conn.execute(
            select(tc.c.tool_name, tc.c.tool_input, tc.c.is_error, tc.c.error)
            .where(tc.c.session_id == sid)
            .order_by(tc.c.start_position.is_(None), tc.c.start_position, tc.c.end_position)
        ).all()
    tools: Counter[str] = Counter()
    files: list[str] = []
    errors: list[str] = []
    for name, tool_input, is_error, error in calls:
        tools[name or "?"] += 1
        field = EDIT_TOOLS.get(name or "")
        if field and tool_input and not is_error:  # a failed or rejected edit changed nothing
            try:
                path = orjson.loads(tool_input).get(field)
            except (orjson.JSONDecodeError, AttributeError):
                path = None
            if isinstance(path, str) and path not in files:
                files.append(path)
        if is_error:
            errors.append(f"{name or '?'}: {_short(error, 200) or '(no message)'}")
    return prompts, tools, files, errors


def memory_query(models: ReadModels, cwd: str, session_id: str | None = None) -> str:
    """Up to QUERY_TERMS frequent words (4+ letters, no stopwords) of the latest typed
    prompts (``human``: not subagent task prompts, which restate the parent's request in
    the subagent's words): the session's own (ledger or agent id) when it has some, else
    the project's."""
    b, s = models.table("prompt_batches"), models.table("sessions")
    base = (
        select(b.c.prompt)
        .join(s, s.c.id == b.c.session_id)
        .where(s.c.cwd == cwd, b.c.prompt.is_not(None), b.c.prompt_kind == "human")
        .order_by(b.c.last_position.desc())
        .limit(QUERY_PROMPTS)
    )
    with models.engine.connect() as conn:
        prompts: list[str] = []
        if session_id:
            own = base.where((s.c.id == session_id) | (s.c.external_id == session_id))
            prompts = [r[0] for r in conn.execute(own)]
        if not prompts:
            prompts = [r[0] for r in conn.execute(base)]
    words: Counter[str] = Counter(
        w for p in prompts for w in terms(p) if len(w) >= 4 and not w.isdigit() and w not in _STOPWORDS
    )
    return " ".join(w for w, _ in words.most_common(QUERY_TERMS))


def memory_digest(models: ReadModels, cwd: str, *, session_id: str | None = None,
                  query: str | None = None, max_chars: int = MAX_CHARS) -> str:
    """Markdown list of the project's most relevant observations and summaries for
    ``query`` (default :func:`memory_query`), at most ``max_chars`` characters ("" when
    the project has none)."""
    query = query if query is not None else memory_query(models, cwd, session_id)
    tables = {n: models.table(n) for n in ("search_documents", "sessions")}
    items: list[tuple[str, str, str | None, str]] = []
    with models.engine.connect() as conn:
        if terms(query):
            # 3× the items: repeated titles are dropped below, before the limit
            for h in search(conn, tables, query, kinds=("observation", "summary"), cwd=cwd,
                            any_term=True, limit=3 * MEMORY_ITEMS):
                items.append((h.title, h.snippet.replace("«", "").replace("»", ""), h.occurred_at, h.session_id))
        if not items:
            for d in recent_documents(conn, tables, kinds=("observation",), cwd=cwd, limit=3 * MEMORY_ITEMS):
                detail = " ".join(d["body"].split("\n")[1:2])
                items.append((d["title"], detail, d["occurred_at"], d["session_id"]))
    if not items:
        return ""
    parts = [f"# What hookledger remembers about {cwd}\n"]
    seen: set[str] = set()
    for title, detail, at, sid in items:
        if title in seen:
            continue
        if len(seen) == MEMORY_ITEMS:
            break
        seen.add(title)
        line = f"- {_short(title, 200)}" + (f" — {_short(detail, 240)}" if detail and detail not in title else "")
        line += f" ({(at or '?')[:10]}, session {sid[:8]})\n"
        if sum(map(len, parts)) + len(line) > max_chars:
            break
        parts.append(line)
    return "".join(parts) if len(parts) > 1 else ""


def project_digest(
    models: ReadModels,
    cwd: str,
    *,
    session_id: str | None = None,
    max_sessions: int = MAX_SESSIONS,
    max_chars: int = MAX_CHARS,
    query: str | None = None,
) -> str:
    """Markdown digest: :func:`memory_digest` (at most MEMORY_SHARE of ``max_chars``),
    then recent sessions in ``cwd`` ("" when there is neither), at most ``max_chars``
    characters. ``session_id`` (ledger or agent id) is left out of the sessions and its
    prompts, when it has some, choose the memory (``query``: choose it instead)."""
    if not cwd:
        return ""
    memory = memory_digest(
        models, cwd, session_id=session_id, query=query, max_chars=int(max_chars * MEMORY_SHARE)
    )
    sessions = recent_sessions(models, cwd, session_id, max_sessions)
    if not sessions:
        return memory
    parts = [memory + ("\n" if memory else "") + f"# Recent sessions in {cwd} (hookledger)\n"]
    for row in sessions:
        prompts, tools, files, errors = _details(models, row["id"])
        lines = [
            f"\n## {row['started_at'] or '?'} → {row['last_activity_at'] or '?'} · "
            f"{row['agent']} · {row['status'].lower()} · {row['prompt_count']} prompts, "
            f"{row['tool_call_count']} tool calls, {row['tool_error_count']} failed"
        ]
        if prompts:
            lines.append("Asked:")
            lines += [f"- {_short(p, 300)}" for p in prompts[-PROMPTS_PER_SESSION:]]
        if tools:
            lines.append("Done: " + ", ".join(f"{n} ×{c}" for n, c in tools.most_common()))
        if files:
            more = len(files) - FILES_PER_SESSION
            lines.append("Files edited: " + ", ".join(files[:FILES_PER_SESSION])
                         + (f" (+{more} more)" if more > 0 else ""))
        if errors:
            lines.append("Failed:")
            lines += [f"- {e}" for e in errors[-ERRORS_PER_SESSION:]]
        block = "\n".join(lines) + "\n"
        if sum(map(len, parts)) + len(block) > max_chars:
            if len(parts) == 1:
                parts.append(block)
            break
        parts.append(block)
    text = "".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
