"""The hookledger HTTP service (Starlette).

Endpoints (JSON; times ISO-8601 UTC; tokens counts):

* ``POST /v1/hooks/{agent}`` — one hook payload. 202 ``{"appended", "duplicates",
  "positions"}``; 400 ``{"error", "positions"}`` when it cannot be parsed (the body is
  still recorded as rejected input). Headers ``X-Hookledger-Capture-Key`` (idempotency
  key assigned once by the hook client) and ``X-Hookledger-Captured-At``.
* ``GET /v1/sessions`` (``limit``, ``offset``, ``agent``, ``status``),
  ``GET /v1/sessions/{id}`` (batches, tool calls, status history),
  ``GET /v1/sessions/{id}/events`` (ledger events with positions and digests),
  ``GET /healthz``.

The app is the single writer of the SQLite store. Reads answer after the projections
have applied everything already in the log.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.analytics import routes as analytics_routes
from api.bootstrap import Services
from api.hook_client import uuid7
from ledger.ingest import HOOK_PARSERS, ingest_hook
from ledger.sources.claude_common import parse_time
from ledger.spool import drain
from projections import queries

SPOOL_INTERVAL_S = 0.1


class Background:
    """Keeps projections current and drains the spool, in one thread."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        services.ledger.add_listener(lambda _pos: self.wake.set())
        self.thread = threading.Thread(target=self._run, name="hookledger-background", daemon=True)

    def _run(self) -> None:
        spool = self.services.settings.data_dir / "spool"
        while not self.stop.is_set():
            try:
                drain(self.services.ledger, spool)
                self.services.runner.catch_up()
                self.error = None
            except Exception as e:  # keep serving; /healthz reports it
                self.error = e
            self.wake.wait(SPOOL_INTERVAL_S)
            self.wake.clear()


def create_app(services: Services) -> Starlette:
    """Build the ASGI app around already-built services (see :mod:`api.bootstrap`)."""
    background = Background(services)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(lambda: drain(services.ledger, services.settings.data_dir / "spool"))
        background.thread.start()
        try:
            yield
        finally:
            background.stop.set()
            background.wake.set()
            await anyio.to_thread.run_sync(background.thread.join)

    async def post_hook(request: Request) -> Response:
        agent = request.path_params["agent"]
        body = await request.body()
        key = request.headers.get("x-hookledger-capture-key") or uuid7()
        at = parse_time(request.headers.get("x-hookledger-captured-at")) or datetime.now(UTC)
        outcome = await anyio.to_thread.run_sync(lambda: ingest_hook(services.ledger, agent, body, key, at))
        r = outcome.result
        if outcome.error is not None:
            status = 404 if agent not in HOOK_PARSERS else 400
            return JSONResponse({"error": outcome.error, "rejected": True, "positions": r.positions}, status)
        return JSONResponse(
            {"appended": r.appended, "duplicates": r.duplicates, "positions": r.positions,
             "sessions": [str(s) for s in r.sessions]},
            202,
        )

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
        rows = await anyio.to_thread.run_sync(
            lambda: queries.list_sessions(
                services.models, limit=limit, offset=offset, agent=q.get("agent"), status=q.get("status")
            )
        )
        return JSONResponse({"sessions": rows, "limit": limit, "offset": offset})

    async def get_session(request: Request) -> Response:
        await current()
        sid = await anyio.to_thread.run_sync(
            lambda: queries.find_session_id(services.models, request.path_params["id"])
        )
        found = sid and await anyio.to_thread.run_sync(lambda: queries.get_session(services.models, sid))
        if not found:
            return JSONResponse({"error": "no such session"}, 404)
        return JSONResponse(found)

    async def session_events(request: Request) -> Response:
        await current()
        sid = await anyio.to_thread.run_sync(
            lambda: queries.find_session_id(services.models, request.path_params["id"])
        )
        if not sid:
            return JSONResponse({"error": "no such session"}, 404)
        events = await anyio.to_thread.run_sync(lambda: _events(services, sid))
        return JSONResponse({"session_id": sid, "events": events})

    async def healthz(_request: Request) -> Response:
        status = await anyio.to_thread.run_sync(services.runner.status)
        body: dict[str, Any] = {
            "ok": background.error is None,
            "head": status[0].head if status else 0,
            "projections": {s.name: {"position": s.position, "lag": s.lag} for s in status},
        }
        if background.error is not None:
            body["error"] = repr(background.error)
        return JSONResponse(body, 200 if background.error is None else 503)

    return Starlette(
        routes=[
            Route("/v1/hooks/{agent}", post_hook, methods=["POST"]),
            Route("/v1/sessions", list_sessions),
            Route("/v1/sessions/{id}", get_session),
            Route("/v1/sessions/{id}/events", session_events),
            Route("/healthz", healthz),
            *analytics_routes(services),
        ],
        lifespan=lifespan,
    )


def _events(services: Services, sid: str) -> list[dict[str, Any]]:
    positions = queries.session_event_positions(services.models, sid)
    out = []
    for event in services.ledger.events.get(UUID(sid)):
        data = event.model_dump(mode="json")
        data["kind"] = type(event).__name__
        data["position"] = positions.get(event.originator_version)
        data["recorded_at"] = data.pop("timestamp")
        out.append(data)
    return out
