"""The web viewer: static HTML/JS/CSS served at ``GET /`` and ``/static`` (no build step).

The page (``api/static/``) lists sessions (``GET /v1/sessions``, paginated) and shows
one session (``GET /v1/sessions/{id}``), updating both over ``GET /v1/stream``.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
"""Sent with the page: it loads only its own script and style (no inline code, no
other origin), so text from a session that slipped past escaping could not run."""


def routes() -> list[BaseRoute]:
    async def index(_request: Request) -> Response:
        headers = {
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
        }
        return FileResponse(STATIC / "index.html", headers=headers)

    return [Route("/", index), Mount("/static", StaticFiles(directory=STATIC), name="static")]
