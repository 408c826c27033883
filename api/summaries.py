"""The summary worker: reads what the read models nominate — completed prompt batches
without a summary, sessions that ended since their last session summary — and appends a
:class:`~ledger.session.Session.Summarised` event to each session (never from inside a
projection; the ``summaries`` read model is a projection of these events).

The deterministic summariser (:func:`ledger.summary.deterministic_summary`) always runs;
when an LLM summariser is configured (``services.summariser``) and its budget allows the
request, the model's summary is recorded instead, with its tokens and cost. When the
budget is spent, the service is down or it answers nonsense, the deterministic summary is
recorded with the reason (``fallback_reason``) and any tokens the failed call cost.

Run by ``hookledger serve`` every ``settings.summaries_interval_s`` seconds in its own
thread (a slow model never delays ingestion or projections) and by
``hookledger summaries run --once``. Event keys (``summary:batch:<n>:<position of the
batch's latest activity>``, ``summary:session:<position of the end>``) make a second run,
or two workers at once, append nothing twice; a batch with activity after its summary
(a turn the idle job closed that went on) gets a new key, and the new summary replaces
the old one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ledger.jobs import append_decision
from ledger.llm_summary import (
    LLMSummariser,
    SummariserUnavailable,
    budget_refusal,
    call_estimate,
)
from ledger.session import Session
from ledger.summary import SummaryFacts, deterministic_summary
from projections import pricing
from projections.base import iso
from projections.summaries import (
    all_tables,
    observation_titles,
    pending_batches,
    pending_sessions,
    summary_facts,
    tokens_spent,
)

SOURCE_FORMAT = "hookledger.summary"
TABLES = (
    "prompt_batches", "sessions", "summaries", "observations", "summary_spend", "tool_calls", "plans",
    "status_history",
)
LIMIT = 200
"""Batches and sessions summarised per run at most (the next run takes the rest)."""

log = logging.getLogger(__name__)


@dataclass
class SummaryReport:
    """What one run did: summaries written by summariser, fallbacks by reason, ``tokens``
    the summariser spent (prompt + completion of the appended summaries, estimates
    included), and the appended notification positions."""

    written: dict[str, int] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    positions: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "fallbacks": self.fallbacks,
            "tokens": self.tokens,
            "appended": len(self.positions),
        }


@dataclass
class _Spent:
    """Tokens this run spent, not yet in the read model."""

    day: int = 0
    sessions: dict[str, int] = field(default_factory=dict)


def run_summaries(
    services: Any,
    summariser: LLMSummariser | None = None,
    now: datetime | None = None,
    limit: int = LIMIT,
) -> SummaryReport:
    """Catch the read models up, summarise what is pending, catch up again.

    ``summariser``: the LLM summariser to try first (default ``services.summariser``);
    ``now`` (UTC): the time recorded on the events and the day the budget counts.
    """
    summariser = summariser if summariser is not None else getattr(services, "summariser", None)
    now = now or datetime.now(UTC)
    services.runner.catch_up()
    tables = all_tables(services.models, TABLES)
    report = SummaryReport()
    spent = _Spent()
    with services.models.engine.connect() as conn:
        batches = pending_batches(conn, tables, limit)
    for sid, n, head, activity in batches:
        key = f"summary:batch:{n}:{activity}"
        _summarise(services, tables, summariser, now, report, spent, "batch", sid, n, key, head)
    # session summaries after the batches' are in the read model: their observations
    # are not repeated
    services.runner.catch_up()
    with services.models.engine.connect() as conn:
        ended = pending_sessions(conn, tables, limit)
    for sid, end, head in ended:
        _summarise(services, tables, summariser, now, report, spent, "session", sid, None, f"summary:session:{end}", head)
    if report.positions:
        services.runner.catch_up()
    return report


def _summarise(
    services: Any,
    tables: dict[str, Any],
    summariser: LLMSummariser | None,
    now: datetime,
    report: SummaryReport,
    spent: _Spent,
    scope: str,
    sid: str,
    batch: int | None,
    key: str,
    head: int,
) -> None:
    with services.models.engine.connect() as conn:
        facts = summary_facts(conn, tables, sid, batch)
        known = observation_titles(conn, tables["observations"], sid) if scope == "session" else set()
    draft = deterministic_summary(facts)
    draft.observations = [o for o in draft.observations if (o.kind, o.title) not in known]
    usage: dict[str, Any] = {"summariser": "deterministic"}
    if summariser is not None:
        usage = _try_llm(services, tables, summariser, now, spent, sid, facts, draft)
        if usage["summariser"] == "llm":
            draft = usage.pop("draft")
    fields = draft.event_fields()

    def command(agg: Session) -> bool:
        return append_decision(
            agg, Session.Summarised, key, now, SOURCE_FORMAT,
            scope=scope, batch=batch if batch is not None else agg.batch,
            through_version=agg.liveness.last_activity_version, through_position=head,
            **fields, **usage,
        )

    appended, positions = services.ledger.update(UUID(sid), command)
    if appended:
        name = usage["summariser"]
        report.written[name] = report.written.get(name, 0) + 1
        report.tokens += usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        if usage.get("fallback_reason"):
            reason = usage["fallback_reason"].split(":", 1)[0]
            report.fallbacks[reason] = report.fallbacks.get(reason, 0) + 1
        report.positions.extend(positions)


def _try_llm(
    services: Any,
    tables: dict[str, Any],
    summariser: LLMSummariser,
    now: datetime,
    spent: _Spent,
    sid: str,
    facts: SummaryFacts,
    draft: Any,
) -> dict[str, Any]:
    """The LLM's summary and usage (``summariser: llm``, ``draft``), or the deterministic
    one's fields with the reason and what a failed call cost."""
    config = summariser.config
    text = summariser.request_text(facts, draft)
    need = sum(call_estimate(config, text))
    day_start = iso(now.replace(hour=0, minute=0, second=0, microsecond=0)) or ""
    with services.models.engine.connect() as conn:
        day, session = tokens_spent(conn, tables["summary_spend"], day_start, sid)
    day += spent.day
    session += spent.sessions.get(sid, 0)
    refusal = budget_refusal(config, need, day, session)
    if refusal:
        return {"summariser": "deterministic", "fallback_reason": refusal}
    try:
        result = summariser.summarise(facts, draft, text)
    except SummariserUnavailable as e:
        log.warning("LLM summariser: %s (deterministic summary kept)", e.reason)
        _charge(spent, sid, e.input_tokens + e.output_tokens)
        return {
            "summariser": "deterministic",
            "fallback_reason": e.reason,
            "model": config.model if e.input_tokens or e.output_tokens else None,
            "input_tokens": e.input_tokens,
            "output_tokens": e.output_tokens,
            "cost_usd": _cost(config.model, e.input_tokens, e.output_tokens),
            "tokens_estimated": e.estimated,
        }
    _charge(spent, sid, result.input_tokens + result.output_tokens)
    return {
        "summariser": "llm",
        "draft": result.draft,
        "model": result.model,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cost_usd": _cost(result.model, result.input_tokens, result.output_tokens),
        "tokens_estimated": result.estimated,
    }


def _charge(spent: _Spent, sid: str, tokens: int) -> None:
    spent.day += tokens
    spent.sessions[sid] = spent.sessions.get(sid, 0) + tokens


def _cost(model: str, tokens_in: int, tokens_out: int) -> float | None:
    if not (tokens_in or tokens_out):
        return None
    return pricing.cost_usd(model, tokens_in, tokens_out)


class SummaryThread:
    """Runs :func:`run_summaries` every ``interval_s`` seconds in a daemon thread."""

    def __init__(self, services: Any, interval_s: float) -> None:
        self.services = services
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hookledger-summaries", daemon=True)

    def start(self) -> None:
        if self.interval_s > 0:
            self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                run_summaries(self.services)
                self.error = None
            except Exception as e:  # keep serving; /healthz reports it
                if repr(e) != repr(self.error):  # the traceback once per distinct error
                    log.exception("summary worker")
                self.error = e
