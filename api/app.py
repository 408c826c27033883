"""The hookledger HTTP service (Starlette).

Endpoints (JSON; times ISO-8601 UTC; tokens counts; ``duration_ms`` milliseconds;
``cost_usd`` USD):

* ``POST /v1/hooks/{agent}`` (``claude-code``, ``codex``, ``gemini``, ``cursor``,
  ``openclaw``) — one hook payload, the agent's hook JSON. 202 ``{"appended",
  "duplicates", "positions", "sessions"}``; ``{"error", "rejected": true,
  "positions"}`` with 400 when it cannot be parsed, 404 for an unknown agent, 413 over
  the size limit (the body is still recorded as rejected input). Headers
  ``X-Hookledger-Capture-Key`` (idempotency key assigned once by the hook client),
  ``X-Hookledger-Captured-At`` and ``X-Hookledger-Redactions``
  (:mod:`api.hooks_ingest`, ``docs/hooks.md``).
* ``POST /v1/journal`` — many hook payloads in the spool's framing (a remote hook's
  spool); 202 ``{"records", "appended", "duplicates", "rejected", "positions"}``.
* ``GET /v1/sessions`` (``limit`` default 100, at most 1000, ``0`` lists none;
  ``offset`` (at most :data:`MAX_OFFSET`); ``agent`` (exact; 400 naming the known ones unless it is an agent
  hookledger records, :data:`ledger.ingest.HOOK_PARSERS`, or one that has sessions:
  a known agent without sessions lists none); ``status`` (one of the ten
  :class:`~ledger.lifecycle.SessionStatus` values, any case; else 400 listing them);
  ``totals=1`` adds ``totals``,
  sums over every session the filters match (:func:`projections.queries.session_totals`),
  and ``agents``, the agents that have sessions) — ``{"sessions", "limit", "offset"}``,
  most recent activity first; ``GET /v1/sessions/{id}`` (ledger id, the agent's id or a
  unique prefix: the session with its batches, inputs, tool calls, status history,
  lineage (``parent``, ``spawned_by``, ``subagents``) and summaries; 404 ``{"error"}``
  ``no such session: <id>``, or listing the sessions an ambiguous prefix matches),
  ``GET /v1/sessions/{id}/events`` (ledger events with positions, digests and raw
  records, in stream-version order; all of them, or a page: ``limit`` (1 to
  :data:`MAX_EVENTS_PAGE`) events with ``originator_version`` > ``after_version``, and
  ``next_after_version``, the cursor of the next page, None after the last), ``/plans`` (:mod:`api.plans`), ``/summaries``.
* ``POST /v1/sessions/{id}/commands/{command}`` — operator commands
  (:mod:`api.commands`, ``docs/lifecycle.md``).
* ``GET /v1/search`` (:mod:`api.search`), ``GET /v1/context`` (:mod:`api.context`),
  ``GET /v1/analytics`` and ``/v1/analytics/{query}`` (:mod:`api.analytics`).
* ``GET /v1/stream`` — server-sent events (:mod:`api.stream`, ``docs/sse.md``);
  ``GET /`` — the web viewer (:mod:`api.viewer`).
* ``GET /healthz`` — ``{"ok", "head", "projections": {name: {"position", "lag"}},
  "data_dir_id"}`` (and ``projection_process``, ``transcripts``: the transcript
  follower's :meth:`~api.transcript_follower.TranscriptFollower.health`, ``error``);
  503 when a background thread failed or the projection process's catch-ups fail
  (``projection_process.error``: the projections are stuck), and 503 ``{"ok": false, "error": "database
  unavailable: <reason>"}`` at once when the database cannot be reached (as any
  request that needs it).
  Open even when a token is required (:mod:`api.access`).

The app is the single writer of the SQLite store. Reads answer after the projections
have applied everything already in the log.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID

import anyio
import eventsourcing.persistence
import sqlalchemy.exc
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from api import context as context_api
from api import search as search_api
from api import stream, viewer
from api.access import TokenMiddleware
from api.analytics import routes as analytics_routes
from api.bootstrap import Services
from api.commands import routes as command_routes
from api.hooks_ingest import HookIngest
from api.jobs import run_jobs
from api.plans import routes as plan_routes
from api.projection_process import ProjectionProcess
from api.summaries import SummaryThread
from api.url_guard import NulInUrl
from ledger.envelope import raw_record
from ledger.ingest import HOOK_PARSERS
from ledger.lifecycle import SessionStatus
from projections import queries

CATCH_UP_INTERVAL_S = 0.1
"""Longest wait of the background thread between catch-ups (s); an append wakes it."""
MAX_OFFSET = 2**63 - 1
"""Largest ``offset`` of ``GET /v1/sessions`` (SQL's BIGINT); a larger one is a 400."""
MAX_EVENTS_PAGE = 10_000
"""Most events per page of ``GET /v1/sessions/{id}/events?limit=``."""
EVENTS_CHUNK = 500
"""Events read, encoded and sent at a time by ``GET /v1/sessions/{id}/events`` without
``limit``: the server holds a chunk, not the session (a 31k-event session's 50 MB
answer built whole peaked at 618 MB)."""


class Background:
    """Keeps projections current in one thread (with a :class:`ProjectionProcess`, sees
    that the child runs instead); runs the liveness jobs
    (:mod:`api.jobs`) every ``settings.jobs_interval_s`` seconds (0: never). The hook
    journal is drained by :class:`api.hooks_ingest.JournalPump`."""

    def __init__(
        self, services: Services, projection_process: ProjectionProcess | None = None
    ) -> None:
        self.services = services
        self.projection_process = projection_process
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        if projection_process is None:  # an append means new work for this thread
            services.ledger.add_listener(lambda _pos: self.wake.set())
        self.thread = threading.Thread(target=self._run, name="hookledger-background", daemon=True)

    def _run(self) -> None:
        interval = self.services.settings.jobs_interval_s
        next_jobs = time.monotonic() + interval
        while not self.stop.is_set():
            try:
                if self.projection_process is None:
                    self.services.runner.catch_up()
                else:  # the child process projects; see that it runs
                    self.projection_process.ensure_running()
                if interval > 0 and time.monotonic() >= next_jobs:
                    next_jobs = time.monotonic() + interval
                    run_jobs(self.services, stop=self.stop)  # shutdown ends a run
                self.error = None
            except Exception as e:  # keep serving; /healthz reports it
                self.error = e
            self.wake.wait(CATCH_UP_INTERVAL_S)
            self.wake.clear()


def create_app(
    services: Services, token: str | None = None, *, projection_process: bool = False
) -> Starlette:
    """Build the ASGI app around already-built services (see :mod:`api.bootstrap`).

    ``token``: when set, requests need it (:class:`api.access.TokenMiddleware`).
    ``projection_process``: run the projections in a child process
    (:class:`api.projection_process.ProjectionProcess`; what ``serve`` does) instead of
    this process's background thread."""
    process = ProjectionProcess(services) if projection_process else None
    background = Background(services, process)
    hooks = HookIngest(services)
    summaries = SummaryThread(services, services.settings.summaries_interval_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if process is not None:
            process.start()
        background.thread.start()
        await anyio.to_thread.run_sync(hooks.start)
        summaries.start()
        try:
            async with stream.broadcasting(app, services):
                yield
        finally:
            await anyio.to_thread.run_sync(summaries.close)
            hooks.stop()
            background.stop.set()
            background.wake.set()
            await anyio.to_thread.run_sync(background.thread.join)
            if process is not None:
                await anyio.to_thread.run_sync(process.stop)

    async def current() -> None:
        await anyio.to_thread.run_sync(services.runner.catch_up)

    async def list_sessions(request: Request) -> Response:
        await current()
        q = request.query_params
        try:
            limit = min(int(q.get("limit", "100")), 1000)
            offset = int(q.get("offset", "0"))
        except ValueError:
            return JSONResponse({"error": "limit and offset must be integers"}, 400)
        if limit < 0 or offset < 0:  # PostgreSQL refuses a negative OFFSET (500)
            return JSONResponse({"error": "limit and offset must not be negative"}, 400)
        if offset > MAX_OFFSET:  # past a 64-bit integer: the drivers raised (500)
            return JSONResponse({"error": f"offset must be at most {MAX_OFFSET}"}, 400)
        agent, status = q.get("agent"), q.get("status")
        if status and status.upper() not in SessionStatus.__members__:  # "COMPLETE" listed none
            known = ", ".join(SessionStatus.__members__)
            return JSONResponse({"error": f"unknown status {status!r} (known: {known})"}, 400)
        if agent and agent not in HOOK_PARSERS:  # "claude" listed none
            stored = await anyio.to_thread.run_sync(queries.agents, services.models)
            if agent not in stored:
                known = ", ".join(sorted({*HOOK_PARSERS, *stored}))
                return JSONResponse({"error": f"unknown agent {agent!r} (known: {known})"}, 400)

        def read() -> dict[str, Any]:
            rows = (
                queries.list_sessions(services.models, limit=limit, offset=offset, agent=agent, status=status)
                if limit > 0
                else []
            )
            body: dict[str, Any] = {"sessions": rows, "limit": limit, "offset": offset}
            if q.get("totals") in ("1", "true"):
                body["totals"] = queries.session_totals(services.models, agent=agent, status=status)
                body["agents"] = queries.agents(services.models)
            return body

        return JSONResponse(await anyio.to_thread.run_sync(read))

    async def session_of(request: Request) -> str | Response:
        """The ledger id the path's ``{id}`` names, else 404 ``{"error"}`` saying why
        (no such session, or the sessions an ambiguous prefix matches)."""
        await current()
        ref = request.path_params["id"]
        sid = await anyio.to_thread.run_sync(lambda: queries.find_session_id(services.models, ref))
        if sid is None:
            error = await anyio.to_thread.run_sync(queries.unresolved, services.models, ref)
            return JSONResponse({"error": error}, 404)
        return sid

    async def get_session(request: Request) -> Response:
        sid = await session_of(request)
        if isinstance(sid, Response):
            return sid
        found = await anyio.to_thread.run_sync(lambda: queries.get_session(services.models, sid))
        if not found:
            return JSONResponse({"error": f"no such session: {sid}"}, 404)
        return JSONResponse(found)

    async def session_events(request: Request) -> Response:
        sid = await session_of(request)
        if isinstance(sid, Response):
            return sid
        q = request.query_params
        try:
            after = int(q.get("after_version", "0"))
            limit = int(q["limit"]) if "limit" in q else None
        except ValueError:
            return JSONResponse({"error": "after_version and limit must be integers"}, 400)
        if after < 0 or after > MAX_OFFSET or (limit is not None and not 1 <= limit <= MAX_EVENTS_PAGE):
            return JSONResponse(
                {"error": f"after_version must be 0..{MAX_OFFSET}, limit 1..{MAX_EVENTS_PAGE}"}, 400
            )
        if limit is None:  # all of them, read and sent a chunk at a time
            first = await anyio.to_thread.run_sync(lambda: _events(services, sid, after, EVENTS_CHUNK))
            return StreamingResponse(_all_events(services, sid, first), media_type="application/json")
        events = await anyio.to_thread.run_sync(lambda: _events(services, sid, after, limit))
        more = len(events) == limit  # the cursor of the next page (None: this was the last)
        return JSONResponse({"session_id": sid, "events": events,
                             "next_after_version": events[-1]["originator_version"] if more else None})

    async def session_summaries(request: Request) -> Response:
        sid = await session_of(request)
        if isinstance(sid, Response):
            return sid
        found = await anyio.to_thread.run_sync(lambda: queries.session_summaries(services.models, sid))
        return JSONResponse({"session_id": sid, "summaries": found})

    data_dir_id = services.settings.data_dir_id()

    async def healthz(_request: Request) -> Response:
        try:
            status = await anyio.to_thread.run_sync(services.runner.status)
        except DATABASE_ERRORS as e:
            body: dict[str, Any] = {"ok": False, "error": database_unavailable(e),
                                    "data_dir_id": data_dir_id}
            if process is not None:
                body["projection_process"] = process.health()
            return JSONResponse(body, 503)
        error = background.error or hooks.pump.error or summaries.error
        health = process.health() if process is not None else {}
        if error is None and health.get("error"):  # the projections are stuck
            error = f"projections cannot catch up: {health['error']}"
        body = {
            "ok": error is None,
            "head": status[0].head if status else 0,
            "projections": {s.name: {"position": s.position, "lag": s.lag} for s in status},
            "data_dir_id": data_dir_id,
        }
        if process is not None:
            body["projection_process"] = health
        if hooks.follower is not None:
            body["transcripts"] = hooks.follower.health()
        if error is not None:
            body["error"] = error if isinstance(error, str) else repr(error)
        return JSONResponse(body, 200 if error is None else 503)

    return Starlette(
        routes=[
            *hooks.routes(),
            *context_api.routes(services, current),
            *search_api.routes(services, current),
            Route("/v1/sessions", list_sessions),
            Route("/v1/sessions/{id}", get_session),
            Route("/v1/sessions/{id}/events", session_events),
            Route("/v1/sessions/{id}/summaries", session_summaries),
            Route("/healthz", healthz),
            *command_routes(services),
            *plan_routes(services),
            *stream.routes(services),
            *viewer.routes(),
            *analytics_routes(services),
        ],
        lifespan=lifespan,
        middleware=[
            *([Middleware(TokenMiddleware, token=token)] if token else []),
            Middleware(NulInUrl),
        ],
        exception_handlers=dict.fromkeys(DATABASE_ERRORS, _database_error),
    )


DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    eventsourcing.persistence.OperationalError,
    eventsourcing.persistence.InterfaceError,
)
"""What the stores raise when the database cannot be reached (PostgreSQL stopped or
restarting, a connection cut; SQLite: locked past its busy timeout)."""


def database_unavailable(e: BaseException) -> str:
    """One line saying that the database is unavailable, and the driver's reason."""
    reason = str(getattr(e, "orig", None) or e).strip().splitlines()
    return "database unavailable: " + (reason[0] if reason else type(e).__name__)


async def _database_error(_request: Request, e: Exception) -> Response:
    """503 ``{"error": "database unavailable: <reason>"}`` instead of a bare 500: the
    request may succeed once the database is back (a hook client spools a 5xx)."""
    return JSONResponse({"error": database_unavailable(e)}, 503)


def _all_events(services: Services, sid: str, first: list[dict[str, Any]]) -> Iterator[bytes]:
    """The JSON body ``{"session_id", "events"}`` of all of session ``sid``'s events:
    ``first``, the first :data:`EVENTS_CHUNK` of them, then the rest a chunk at a time
    (encoded as :class:`JSONResponse` encodes). A stream's versions are 1, 2, 3, …, so a
    chunk shorter than :data:`EVENTS_CHUNK` is the last."""
    yield b'{"session_id":' + _json(sid) + b',"events":['
    chunk, sep = first, b""
    while chunk:
        yield sep + b",".join(map(_json, chunk))
        if len(chunk) < EVENTS_CHUNK:
            break
        chunk, sep = _events(services, sid, chunk[-1]["originator_version"], EVENTS_CHUNK), b","
    yield b"]}"


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _events(
    services: Services, sid: str, after: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    """The events of stream ``sid`` with stream version > ``after``, at most ``limit``
    (None: all), in version order, each with its log position (None while the
    ``event_index`` projection has not reached it)."""
    upto = None if limit is None else after + limit  # a stream's versions are 1, 2, 3, …
    positions = queries.session_event_positions(services.models, sid, after, upto)
    out = []
    for event in services.ledger.events.get(UUID(sid), gt=after or None, limit=limit):
        data = event.model_dump(mode="json")
        data["kind"] = type(event).__name__
        data["raw"] = raw_record(event)
        data["position"] = positions.get(event.originator_version)
        data["recorded_at"] = data.pop("timestamp")
        out.append(data)
    return out
