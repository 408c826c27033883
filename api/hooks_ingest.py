"""Hook ingestion in the server: ``POST /v1/hooks/{agent}`` and the spool journal pump.

Both paths parse in their own thread/task and record through one
:class:`ledger.writer.GroupWriter` (group commit), so many concurrent hooks share one
``Ledger.record`` call.

* ``POST /v1/hooks/{agent}`` — one hook payload. 202 ``{"appended", "duplicates",
  "positions", "sessions"}`` (this request's share of its group); 400/404
  ``{"error", "rejected", "positions"}`` when it cannot be parsed (the body is still
  recorded as rejected input). Headers ``X-Hookledger-Capture-Key`` (idempotency key
  assigned once by the hook client), ``X-Hookledger-Captured-At`` and
  ``X-Hookledger-Redactions`` (what the client removed before sending, e.g.
  ``[{"kind":"private_tag","path":"$.prompt","count":1}]``, recorded with the event;
  a malformed value is ignored with a logged reason, never refused:
  :func:`ledger.ingest.parse_edge_redactions`). A body over ``MAX_BODY_BYTES``
  (32 MiB) is not held in memory: its first 16 MiB, size and sha256 are recorded as
  rejected input and the answer is 413 ``{"error", "rejected": true, "positions"}``.
* ``POST /v1/journal`` — many hook payloads in one body, in the spool journal's own
  framing (``Content-Type: application/x-hookledger-journal``; each record carries its
  agent, capture key, capture time and edge redactions: :mod:`ledger.journal`). A remote
  hook forwards what it spooled while the server was unreachable this way
  (:func:`api.hot_path.hook_fast.forward_spool`). Recorded in chunks through the group
  writer, idempotent by capture key (a piece sent twice appends nothing twice). 202
  ``{"records", "appended", "duplicates", "rejected", "positions"}``; broken framing is
  recorded as rejected input and counted in ``rejected``; 400 ``{"error"}`` for an empty
  body, or one in which no record could be read (its bytes are still recorded as
  rejected input).
* :class:`JournalPump` — a thread that checks ``<data dir>/spool/hooks.journal`` every
  ``JOURNAL_POLL_S`` (20 ms) and drains it (:mod:`ledger.journal`); the transcripts its
  hooks name are imported by :class:`api.transcript_follower.TranscriptFollower`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import NamedTuple

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.bootstrap import Services
from api.hot_path.hook_fast import uuid7
from api.transcript_follower import TranscriptFollower
from ledger.app import RecordResult
from ledger.ingest import (
    HOOK_PARSERS,
    MAX_BODY_BYTES,
    EdgeRedactionsError,
    parse_edge_redactions,
    parse_hook_body,
)
from ledger.journal import JournalIngester, ingest_journal
from ledger.observation import Rejected
from ledger.quarantine import MAX_KEPT_BYTES
from ledger.sources.claude_common import parse_time
from ledger.writer import GroupWriter, Item

JOURNAL_POLL_S = 0.02
MAX_JOURNAL_BODY_BYTES = MAX_BODY_BYTES + (2 << 20)
"""A forwarded journal piece is at most 1 MiB of records, or one record alone (a hook
body, itself rejected beyond ``MAX_BODY_BYTES``, plus its header)."""
INLINE_PARSE_BYTES = 64 * 1024
"""Bodies up to this size are parsed on the event loop (cheaper than a thread hop)."""

log = logging.getLogger(__name__)


class JournalPump:
    """Drains the spool journal continuously in one thread (errors are kept in
    ``error`` and retried on the next tick; the journal file keeps the records)."""

    def __init__(
        self, services: Services, writer: GroupWriter, follower: TranscriptFollower | None = None
    ) -> None:
        submit = writer.submit
        if follower is not None:

            def submit(items: Sequence[Item]) -> Future[RecordResult]:
                follower.notice(items)
                return writer.submit(items)

        self.ingester = JournalIngester(services.settings.data_dir / "spool", submit=submit)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hookledger-journal", daemon=True)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.ingester.pending():
                    self.ingester.drain()
                self.error = None
            except Exception as e:
                if self.error is None:
                    log.exception("journal ingest failed; retrying")
                self.error = e
            self.stop_event.wait(JOURNAL_POLL_S)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread, then drain once more: a hook that wrote just before the
        server was asked to stop is ingested now, not at the next start."""
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join()
        try:
            if self.ingester.pending():
                self.ingester.drain()
        except Exception:
            log.exception("journal ingest at shutdown failed; the next start retries")


class HookIngest:
    """The group writer, the journal pump, the transcript follower (when
    ``transcript_quiet_s`` > 0) and the POST route of one app."""

    def __init__(self, services: Services) -> None:
        self.writer = GroupWriter(services.ledger)
        settings = services.settings
        self.follower = (
            TranscriptFollower(
                services.ledger, settings.data_dir, settings.store_identity(),
                settings.transcript_quiet_s,
            )
            if settings.transcript_quiet_s > 0
            else None
        )
        self.pump = JournalPump(services, self.writer, self.follower)

    def start(self) -> None:
        """Start the writer, ingest what was journalled while the server was down
        (errors are left to the pump's retries), then start the pump and the follower."""
        if self.follower is not None:
            self.follower.start()
        self.writer.start()
        try:
            self.pump.ingester.drain()
        except Exception:
            log.exception("journal ingest at start failed; the pump retries")
        self.pump.start()

    def stop(self) -> None:
        self.pump.stop()
        if self.follower is not None:
            self.follower.stop()
        self.writer.close()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/hooks/{agent}", self.post_hook, methods=["POST"]),
            Route("/v1/journal", self.post_journal, methods=["POST"]),
        ]

    async def post_hook(self, request: Request) -> Response:
        agent = request.path_params["agent"]
        key = request.headers.get("x-hookledger-capture-key") or uuid7()
        at = parse_time(request.headers.get("x-hookledger-captured-at")) or datetime.now(UTC)
        edge = _edge_redactions(request, key)
        body = await _read_body(request, MAX_BODY_BYTES)
        if isinstance(body, Oversized):
            return await self._too_large(body.rejected(
                f"hook:{agent}", f"capture {key}", agent, f"{agent}.hook", edge
            ))
        if len(body) <= INLINE_PARSE_BYTES:
            items, error = parse_hook_body(agent, body, key, at, edge)
        else:
            items, error = await anyio.to_thread.run_sync(
                lambda: parse_hook_body(agent, body, key, at, edge)
            )
        r = await self.writer.answer(items)
        if error is not None:
            status = 404 if agent not in HOOK_PARSERS else 400
            return _json({"error": error, "rejected": True, "positions": r.positions}, status)
        return _json(
            {"appended": r.appended, "duplicates": r.duplicates, "positions": r.positions,
             "sessions": r.sessions},
            202,
        )


    async def post_journal(self, request: Request) -> Response:
        source = f"http:journal:{uuid7()}"
        body = await _read_body(request, MAX_JOURNAL_BODY_BYTES)
        if isinstance(body, Oversized):
            return await self._too_large(body.rejected("spool:journal", f"{source} request"))
        if not body:
            return JSONResponse({"error": "empty body: expected journal records"}, 400)

        records, r = await anyio.to_thread.run_sync(
            lambda: ingest_journal(body, source, self.writer.submit)
        )
        if records == 0:
            return JSONResponse(
                {"error": "no journal record could be read (recorded as rejected input)",
                 "rejected": r.rejected, "positions": r.positions},
                400,
            )
        return JSONResponse(
            {"records": records, "appended": r.appended, "duplicates": r.duplicates,
             "rejected": r.rejected, "positions": r.positions},
            202,
        )


    async def _too_large(self, rejected: Rejected) -> Response:
        """Record a body cut at the limit (its first bytes, size and sha256) as rejected
        input; 413 ``{"error", "rejected": true, "positions"}``."""
        r = await self.writer.answer([rejected])
        return _json({"error": rejected.reason, "rejected": True, "positions": r.positions}, 413)


class Oversized(NamedTuple):
    """A request body longer than the route's limit: its first bytes, whole size, sha256."""

    head: bytes
    size: int
    sha256: str
    limit: int

    def rejected(
        self, source: str, location: str, agent: str = "unknown",
        source_format: str = "unknown", edge: list[dict] | None = None,
    ) -> Rejected:
        reason = f"body of {self.size} bytes is larger than the limit of {self.limit} bytes"
        return Rejected(source, location, reason, self.head, agent, source_format,
                        tuple(edge or ()), self.size, self.sha256)


async def _read_body(request: Request, limit: int) -> bytes | Oversized:
    """The request body; or, when it is longer than ``limit`` bytes, its first
    ``MAX_KEPT_BYTES``, size and sha256. Memory stays within ``limit`` plus one chunk,
    whatever the sender sends."""
    buf = bytearray()
    digest = None
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if digest is not None:
            digest.update(chunk)
            continue
        buf += chunk
        if len(buf) > limit:
            digest = hashlib.sha256(buf)
            del buf[MAX_KEPT_BYTES:]
    if digest is None:
        return bytes(buf)
    return Oversized(bytes(buf), size, digest.hexdigest(), limit)


def _json(content: dict, status: int) -> Response:
    """``content`` as a JSON response, encoded by orjson (UUIDs as strings); what
    ``JSONResponse`` sends, at a third of its cost per hook answer."""
    return Response(orjson.dumps(content), status, media_type="application/json")


def _edge_redactions(request: Request, key: str) -> list[dict] | None:
    """The ``X-Hookledger-Redactions`` header, checked; None (and a logged warning)
    when absent or malformed: the body is recorded all the same."""
    raw = request.headers.get("x-hookledger-redactions")
    if raw is None:
        return None
    try:
        return parse_edge_redactions(raw)
    except EdgeRedactionsError as e:
        log.warning("ignoring X-Hookledger-Redactions of capture %s: %s", key, e)
        return None
