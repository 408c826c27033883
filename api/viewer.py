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


def routes() -> list[BaseRoute]:
    async def index(_request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    return [Route("/", index), Mount("/static", StaticFiles(directory=STATIC), name="static")]
