"""Baseline for ``benchmarks/sse.py --baseline``: a bare sse-starlette broadcaster
(no ledger, no database) with the same URLs, run under uvicorn:

    .venv/bin/python -m uvicorn --app-dir benchmarks sse_baseline_app:app --port 8000

``POST /v1/hooks/claude-code`` assigns the next position and puts one message in every
client's queue; ``GET /v1/stream`` sends them as ``event.appended`` with that id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

queues: set[asyncio.Queue[bytes]] = set()
position = 0


async def publish(request: Request) -> Response:
    global position
    body = await request.body()
    position += 1
    frame = ServerSentEvent(body.decode()[:200], event="event.appended", id=str(position)).encode()
    for q in list(queues):
        q.put_nowait(frame)
    return JSONResponse({"positions": [position]}, 202)


async def stream(_request: Request) -> Response:
    async def frames() -> AsyncIterator[bytes]:
        q: asyncio.Queue[bytes] = asyncio.Queue(1000)
        queues.add(q)
        try:
            while True:
                yield await q.get()
        finally:
            queues.discard(q)

    return EventSourceResponse(frames())


async def healthz(_request: Request) -> Response:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[
        Route("/v1/hooks/claude-code", publish, methods=["POST"]),
        Route("/v1/stream", stream),
        Route("/healthz", healthz),
    ]
)
