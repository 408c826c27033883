"""Context for a starting session: a short markdown digest of recent sessions of the
same project (same ``cwd``), read from the ``sessions``, ``prompt_batches`` and
``tool_calls`` read models.

Per session (most recent activity first, subagent sessions and the asking session
left out): when and how it ended, what was asked (prompts), what was done (tool
counts, files edited) and what failed (tool errors). The whole digest is at most
``max_chars`` characters (10,000 by default: Claude Code's ``additionalContext`` cap).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from sqlalchemy import func, select

from projections.runner import ReadModels

MAX_CHARS = 10_000
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
    last = func.coalesce(s.c.last_activity_at, s.c.last_recorded_at)
    q = (
        select(s.c.id, s.c.external_id, s.c.agent, s.c.status, s.c.model, s.c.prompt_count,
               s.c.tool_call_count, s.c.tool_error_count,
               func.coalesce(s.c.started_at, s.c.first_recorded_at).label("started_at"),
               last.label("last_activity_at"))
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
        if field and tool_input:
            try:
                path = orjson.loads(tool_input).get(field)
            except (orjson.JSONDecodeError, AttributeError):
                path = None
            if isinstance(path, str) and path not in files:
                files.append(path)
        if is_error:
            errors.append(f"{name or '?'}: {_short(error, 200) or '(no message)'}")
    return prompts, tools, files, errors


def project_digest(
    models: ReadModels,
    cwd: str,
    *,
    session_id: str | None = None,
    max_sessions: int = MAX_SESSIONS,
    max_chars: int = MAX_CHARS,
) -> str:
    """Markdown digest of recent sessions in ``cwd`` ("" when there are none), at most
    ``max_chars`` characters. ``session_id`` (ledger or agent id) is left out."""
    if not cwd:
        return ""
    sessions = recent_sessions(models, cwd, session_id, max_sessions)
    if not sessions:
        return ""
    parts = [f"# Recent sessions in {cwd} (hookledger)\n"]
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
