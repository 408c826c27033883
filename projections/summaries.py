"""``summaries`` and ``observations`` read models, from ``Session.Summarised`` events, and
the queries the summary worker (:mod:`api.summaries`) nominates work with.

One row per (session, scope, batch): a later summary of the same scope replaces it (a
session reopened and ended again is summarised again; a batch with activity after its
summary is summarised again). Observations are kept per event; those of a replaced
summary are marked ``superseded_by`` the replacing summary's position. ``summary_spend``
keeps one row per summary that cost tokens (the budget counts it: a replaced summary was
still paid for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Table, and_, func, select

from ledger.lifecycle import ENDED_STATES
from ledger.session import Session
from ledger.summary import SummaryFacts, ToolFact
from projections.base import Batch, Projection, iso
from projections.rows import RowCache

LIST_FIELDS = (
    "investigated", "learned", "completed", "next_steps", "files_read", "files_edited",
    "commands_failed",
)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


class SummariesProjection(Projection):
    name = "summaries"
    kinds = (Session.Summarised,)

    def prefetch(self, rows: RowCache, batch: Batch) -> None:
        rows.prefetch(
            "summaries",
            [(str(e.originator_id), e.scope, _batch_key(e)) for _, e in batch if isinstance(e, Session.Summarised)],
        )

    def apply(self, rows: RowCache, position: int, event: Any) -> None:
        if not isinstance(event, Session.Summarised):
            return
        sid = str(event.originator_id)
        batch = _batch_key(event)
        at = iso(event.timestamp) or ""
        old = rows.get("summaries", (sid, event.scope, batch))
        if old is not None and old["position"] != position:
            for i in range(old["observation_count"]):
                replaced = rows.get("observations", (sid, old["position"], i))
                if replaced is not None and replaced["superseded_by"] is None:
                    replaced["superseded_by"] = position
                    rows.touch("observations", (sid, old["position"], i))
        rows.put(
            "summaries",
            (sid, event.scope, batch),
            {
                "session_id": sid,
                "scope": event.scope,
                "batch": batch,
                "request": event.request,
                **{name: _json(getattr(event, name)) for name in LIST_FIELDS},
                "observation_count": len(event.observations),
                "summariser": event.summariser,
                "model": event.model,
                "input_tokens": event.input_tokens,
                "output_tokens": event.output_tokens,
                "cost_usd": event.cost_usd,
                "fallback_reason": event.fallback_reason,
                "through_version": event.through_version,
                "through_position": event.through_position,
                "position": position,
                "recorded_at": at,
            },
        )
        tokens = event.input_tokens + event.output_tokens
        if tokens:
            rows.put("summary_spend", (sid, position), {
                "session_id": sid, "position": position, "tokens": tokens, "recorded_at": at,
            })
        for i, o in enumerate(event.observations):
            rows.put(
                "observations",
                (sid, position, i),
                {
                    "session_id": sid,
                    "position": position,
                    "idx": i,
                    "scope": event.scope,
                    "batch": batch,
                    "kind": o.kind,
                    "title": o.title,
                    "detail": o.detail,
                    "files": _json(o.files),
                    "recorded_at": at,
                    "superseded_by": None,
                },
            )


def _batch_key(event: Session.Summarised) -> int:
    return event.batch if event.scope == "batch" else 0


# -- queries --------------------------------------------------------------------------


def pending_batches(conn: Connection, tables: dict[str, Table], limit: int) -> list[tuple[str, int, int, int]]:
    """(session id, batch, session head position, the batch's activity position) of
    completed prompt batches that have no summary yet, and of batches with activity
    after their summary's ``through_position`` once that activity has ended (a turn the
    idle job closed that then went on: a later ``TurnEnded``, ``ActivitiesAttached``,
    next prompt …), oldest first."""
    b, s, sm = tables["prompt_batches"], tables["sessions"], tables["summaries"]
    summary = and_(sm.c.session_id == b.c.session_id, sm.c.scope == "batch", sm.c.batch == b.c.batch)
    query = (
        select(b.c.session_id, b.c.batch, s.c.head_position, b.c.activity_position)
        .join(s, s.c.id == b.c.session_id)
        .outerjoin(sm, summary)
        .where(
            b.c.status == "completed",
            sm.c.session_id.is_(None)
            | (
                (sm.c.through_position < b.c.activity_position)
                & (b.c.settled_position >= b.c.activity_position)
            ),
        )
        .order_by(b.c.last_position, b.c.session_id, b.c.batch)
        .limit(limit)
    )
    return [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in conn.execute(query)]


def pending_sessions(conn: Connection, tables: dict[str, Table], limit: int) -> list[tuple[str, int, int]]:
    """(session id, position of its latest end, head position) of ended sessions with no
    session summary since that end, oldest first. An end is a move from a live state into
    an ended one: archiving a completed session (or terminating a failed one) adds nothing
    to summarise."""
    s, h, sm = tables["sessions"], tables["status_history"], tables["summaries"]
    ended = [st.value for st in ENDED_STATES]
    last_end = (
        select(h.c.session_id, func.max(h.c.position).label("ended_position"))
        .where(h.c.to_status.in_(ended), h.c.from_status.is_(None) | h.c.from_status.not_in(ended))
        .group_by(h.c.session_id)
        .subquery()
    )
    summary = and_(sm.c.session_id == s.c.id, sm.c.scope == "session")
    query = (
        select(s.c.id, last_end.c.ended_position, s.c.head_position)
        .join(last_end, last_end.c.session_id == s.c.id)
        .outerjoin(sm, summary)
        .where(
            s.c.status.in_(ended),
            (sm.c.session_id.is_(None)) | (sm.c.through_position < last_end.c.ended_position),
        )
        .order_by(last_end.c.ended_position)
        .limit(limit)
    )
    return [(r[0], int(r[1]), int(r[2])) for r in conn.execute(query)]


def tokens_spent(conn: Connection, table: Table, since: str, session_id: str) -> tuple[int, int]:
    """Summariser tokens (prompt + completion) recorded since ``since`` (ISO time), and
    recorded for ``session_id`` ever, from ``summary_spend`` (``table``): one row per
    ``Summarised`` event that cost tokens, never replaced."""
    total = func.coalesce(func.sum(table.c.tokens), 0)
    day = conn.execute(select(total).where(table.c.recorded_at >= since)).scalar_one()
    session = conn.execute(select(total).where(table.c.session_id == session_id)).scalar_one()
    return int(day), int(session)


def summaries_of(conn: Connection, tables: dict[str, Table], session_id: str) -> list[dict[str, Any]]:
    """A session's summaries (session scope first, then batches in order), each with its
    ``observations``; list fields decoded."""
    sm, ob = tables["summaries"], tables["observations"]
    found = conn.execute(
        select(sm).where(sm.c.session_id == session_id).order_by(sm.c.batch, sm.c.scope)
    ).mappings()
    result = []
    for row in found:
        item = dict(row)
        for name in LIST_FIELDS:
            item[name] = orjson.loads(item[name])
        obs = conn.execute(
            select(ob).where(ob.c.session_id == session_id, ob.c.position == row["position"]).order_by(ob.c.idx)
        ).mappings()
        item["observations"] = [{**dict(o), "files": orjson.loads(o["files"])} for o in obs]
        result.append(item)
    return result


def observation_titles(conn: Connection, table: Table, session_id: str) -> set[tuple[str, str]]:
    """(kind, title) of the current (not superseded) observations recorded for a session."""
    query = select(table.c.kind, table.c.title).where(
        table.c.session_id == session_id, table.c.superseded_by.is_(None)
    )
    return {(r[0], r[1]) for r in conn.execute(query)}


def all_tables(models: Any, names: Sequence[str]) -> dict[str, Table]:
    """The named read-model tables of ``models`` (:class:`projections.runner.ReadModels`)."""
    return {n: models.table(n) for n in names}


def _tool_input(text: str | None) -> Any:
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def summary_facts(
    conn: Connection, tables: dict[str, Table], session_id: str, batch: int | None
) -> SummaryFacts:
    """What the read models hold about one prompt batch (``batch``) or, with ``batch``
    None, the whole session: prompts, tool calls in log order, the final assistant
    message, how it ended and approved plans."""
    b, t, p = tables["prompt_batches"], tables["tool_calls"], tables["plans"]
    batches = select(b).where(b.c.session_id == session_id).order_by(b.c.batch)
    calls = select(t.c.tool_name, t.c.tool_input, t.c.is_error, t.c.error).where(t.c.session_id == session_id)
    plans = select(p.c.content).where(p.c.session_id == session_id, p.c.approved.is_(True))
    if batch is not None:
        batches = batches.where(b.c.batch == batch)
        calls = calls.where(t.c.batch == batch)
        plans = plans.where(p.c.batch == batch)
    rows = list(conn.execute(batches).mappings())
    tools = tuple(
        ToolFact(r[0] or "", _tool_input(r[1]), bool(r[2]), r[3])
        for r in conn.execute(calls.order_by(t.c.start_position, t.c.tool_use_id))
    )
    final = next((r["last_assistant_message"] for r in reversed(rows) if r["last_assistant_message"]), None)
    turn_ended = False
    if rows and (rows[-1]["end_reason"] or "").startswith("idle_timeout"):
        # the idle job closed it: was the agent's last reply the end of its turn?
        h = tables["status_history"]
        last = conn.execute(
            select(h.c.to_status, h.c.cause)
            .where(h.c.session_id == session_id, h.c.position <= rows[-1]["activity_position"])
            .order_by(h.c.position.desc())
            .limit(1)
        ).first()
        turn_ended = last is not None and last[0] == "WAITING" and last[1] in ("AssistantReplied", "TurnEnded")
    return SummaryFacts(
        scope="session" if batch is None else "batch",
        prompts=tuple(r["prompt"] for r in rows if r["prompt"]),
        tools=tools,
        final_message=final,
        end_reason=rows[-1]["end_reason"] if rows else None,
        plans=tuple(c for (c,) in conn.execute(plans.order_by(p.c.first_position)) if c),
        turn_ended=turn_ended,
    )
