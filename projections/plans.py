"""``plans`` read model: plans the agent wrote, one row per plan, updated in place.

* A ``Write``/``Edit``/``MultiEdit`` whose ``file_path`` has a directory named ``plans``
  (``.claude/plans/``, ``.cursor/plans/``, ``docs/plans/`` …) captures that file as a
  plan (``plan_id`` = the path) and marks its prompt batch as a plan batch. ``Write``
  sets the content; ``Edit``/``MultiEdit`` apply ``old_string`` -> ``new_string`` to the
  captured content (left as is when the plan was never captured whole, counted in
  ``unapplied_edits``). Repeated writes update the row and count ``revisions``.
* ``ExitPlanMode`` captures its ``plan`` as the batch's plan (``plan_id`` =
  ``exit_plan_mode:<batch>``); its tool result sets ``approved`` (True unless the result
  is an error, i.e. the user rejected it).

Tool inputs follow Claude Code's tool schemas (``Write{file_path, content}``,
``Edit{file_path, old_string, new_string, replace_all}``, ``MultiEdit{file_path,
edits[]}``, ``ExitPlanMode{plan}``; FORMATS.md A1/A2). Content is captured from the
tool call's input as recorded (after privacy redaction).
"""

from __future__ import annotations

from typing import Any

from ledger.session import Session
from projections.base import Batch, Projection, event_time, session_events
from projections.rows import RowCache

FILE_TOOLS = frozenset({"Write", "Edit", "MultiEdit"})


def plan_path(tool_input: Any) -> str | None:
    """The plan file a file tool writes to, when it is in a ``plans`` directory."""
    if not isinstance(tool_input, dict):
        return None
    path = tool_input.get("file_path")
    if not isinstance(path, str):
        return None
    parts = path.replace("\\", "/").split("/")
    return path if "plans" in parts[:-1] else None


def _edit(content: str | None, old: Any, new: Any, replace_all: bool) -> str | None:
    if (
        content is None
        or not isinstance(old, str)
        or not isinstance(new, str)
        or old not in content
    ):
        return None
    return content.replace(old, new) if replace_all else content.replace(old, new, 1)


class PlansProjection(Projection):
    name = "plans"
    kinds = (Session.ToolCallStarted, Session.ToolCallCompleted)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        plans, calls = [], []
        for _, e in session_events(batch):
            sid = str(e.originator_id)
            if isinstance(e, Session.ToolCallStarted):
                path = plan_path(e.tool_input) if e.tool_name in FILE_TOOLS else None
                if path is not None:
                    plans.append((sid, path))
                elif e.tool_name == "ExitPlanMode":
                    plans.append((sid, f"exit_plan_mode:{e.batch}"))
            elif isinstance(e, Session.ToolCallCompleted):
                calls.append((sid, e.tool_use_id))
        rows.prefetch("plans", plans)
        rows.prefetch("plan_tool_calls", calls)

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if isinstance(event, Session.ToolCallStarted):
            self._started(rows, position, event)
        elif isinstance(event, Session.ToolCallCompleted):
            link = rows.get("plan_tool_calls", (str(event.originator_id), event.tool_use_id))
            if link is not None and link["plan_id"].startswith("exit_plan_mode:"):
                row = rows.get("plans", (link["session_id"], link["plan_id"]))
                if row is not None:
                    row["approved"] = not event.is_error
                    row["last_position"] = position
                    rows.put("plans", (row["session_id"], row["plan_id"]), row)

    def _started(self, rows: RowCache, position: int, e: Session.ToolCallStarted) -> None:
        sid = str(e.originator_id)
        ti = e.tool_input if isinstance(e.tool_input, dict) else {}
        if e.tool_name in FILE_TOOLS and (path := plan_path(ti)) is not None:
            plan_id, source = path, "file"
        elif e.tool_name == "ExitPlanMode":
            plan_id, source, path = f"exit_plan_mode:{e.batch}", "exit_plan_mode", None
        else:
            return
        row = rows.get("plans", (sid, plan_id)) or {
            "session_id": sid,
            "plan_id": plan_id,
            "source": source,
            "path": path,
            "content": None,
            "revisions": 0,
            "unapplied_edits": 0,
            "approved": None,
            "first_position": position,
            "created_at": event_time(e),
        }
        row.update(batch=e.batch, last_position=position, updated_at=event_time(e))
        row["revisions"] += 1
        if e.tool_name == "ExitPlanMode":
            row["content"] = ti.get("plan") if isinstance(ti.get("plan"), str) else row["content"]
            row["approved"] = None  # a new version waits for the user's answer
        elif e.tool_name == "Write":
            row["content"] = ti.get("content") if isinstance(ti.get("content"), str) else None
        else:
            edits = ti.get("edits") if e.tool_name == "MultiEdit" else [ti]
            for edit in edits if isinstance(edits, list) else []:
                edit = edit if isinstance(edit, dict) else {}
                new = _edit(
                    row["content"],
                    edit.get("old_string"),
                    edit.get("new_string"),
                    bool(edit.get("replace_all")),
                )
                if new is None:
                    row["unapplied_edits"] += 1
                else:
                    row["content"] = new
        rows.put("plans", (sid, plan_id), row)
        rows.put(
            "plan_tool_calls",
            (sid, e.tool_use_id),
            {"session_id": sid, "tool_use_id": e.tool_use_id, "plan_id": plan_id},
        )


def session_plans(models: Any, session_id: str) -> list[dict[str, Any]]:
    """The plans of one session, in the order they were first written: dicts with
    ``plan_id``, ``source`` (``file``|``exit_plan_mode``), ``path``, ``batch``,
    ``content``, ``revisions``, ``unapplied_edits``, ``approved``, ``created_at``,
    ``updated_at`` (ISO-8601 UTC)."""
    from sqlalchemy import select

    t = models.table("plans")
    cols = [c for c in t.c if c.name not in ("session_id", "first_position", "last_position")]
    query = select(*cols).where(t.c.session_id == session_id).order_by(t.c.first_position)
    with models.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]
