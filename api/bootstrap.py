"""Composition root: builds the ledger, read models and runner from :class:`Settings`.

The only place that turns configuration into objects; everything else receives them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select

from ledger.app import Ledger
from ledger.config import Settings
from ledger.llm_summary import LLMConfig, LLMSummariser
from ledger.verify import Anchor
from projections.runner import ProjectionRunner, ReadModels
from projections.store import make_engine, schema_lock


@dataclass
class Services:
    settings: Settings
    ledger: Ledger
    models: ReadModels
    runner: ProjectionRunner
    summariser: LLMSummariser | None = None
    """The optional LLM summariser (``settings.llm_base_url``); None: deterministic only."""

    def close(self) -> None:
        self.ledger.close()
        self.models.engine.dispose()

    def anchors(self) -> Iterator[Anchor]:
        """Anchors for :func:`ledger.verify.verify_store`, from ``event_index``."""
        ei = self.models.table("event_index")
        with self.models.engine.connect() as conn:
            rows = conn.execute(
                select(ei.c.position, ei.c.stream_id, ei.c.version, ei.c.digest).order_by(ei.c.position)
            )
            for r in rows:
                yield Anchor(int(r[0]), r[1], int(r[2]), r[3])


def build(settings: Settings, *, cache_size: int = 0) -> Services:
    """Open the event store and the read models (creating tables when needed)."""
    env = settings.event_store_env()
    if cache_size:
        env["AGGREGATE_CACHE_MAXSIZE"] = str(cache_size)
        # Cache what was saved and do not query for newer events on every cache hit:
        # a write from another process makes the cached aggregate stale, and its next
        # save here then clashes on the version, is evicted and recorded again
        # (Ledger.record); Ledger.session reads past the cache.
        env["AGGREGATE_CACHE_FASTFORWARD"] = "n"
    engine = make_engine(settings.views_url(), settings.database_schema)
    # creating the event store's tables: PostgreSQL's CREATE TABLE IF NOT EXISTS is not
    # safe against another process doing the same at once (a duplicate pg_type row)
    with schema_lock(engine):
        ledger = Ledger(env)
    models = ReadModels(engine)
    summariser = None
    if settings.llm_base_url:
        summariser = LLMSummariser(
            LLMConfig(
                base_url=settings.llm_base_url,
                model=settings.llm_model,
                api_key=settings.llm_api_key,
                day_tokens=settings.llm_day_tokens,
                session_tokens=settings.llm_session_tokens,
            )
        )
    return Services(settings, ledger, models, ProjectionRunner(ledger, models), summariser)
