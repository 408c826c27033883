"""``GET /v1/context?session_id=…&cwd=…``: context for a starting session.

200 ``{"session_id", "cwd", "markdown"}`` — ``markdown`` is a digest of what hookledger
remembers about the project (observations and summaries found by full-text search for
the latest prompts, or for ``q`` when given) and of its recent sessions
(:func:`projections.context.project_digest`, at most 10,000 characters; "" when there
is nothing). 400 when ``cwd`` is missing. With
``format=hook`` the body is the hook output itself (Claude Code hook output contract,
FORMATS.md A2): ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
"additionalContext": markdown}}``, or ``{}`` when there is no context; the hook client
prints it as is, with no JSON library.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.bootstrap import Services
from projections.context import MAX_CHARS, project_digest


def routes(services: Services, current: Callable[[], Awaitable[None]]) -> list[Route]:
    """``current``: awaits the projections catching up with the log."""

    async def context(request: Request) -> Response:
        # a trailing "/" names the same directory (agents write cwd without one), as the
        # SSE project filter reads it; "/" stays "/"
        given = request.query_params.get("cwd", "")
        cwd = given.rstrip("/") or given
        sid = request.query_params.get("session_id") or None
        query = request.query_params.get("q")
        if not cwd:
            return JSONResponse({"error": "cwd is required"}, 400)
        await current()
        text = await anyio.to_thread.run_sync(
            lambda: project_digest(services.models, cwd, session_id=sid, max_chars=MAX_CHARS, query=query)
        )
        if request.query_params.get("format") == "hook":
            if not text:
                return JSONResponse({})
            return JSONResponse(
                {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
            )
        return JSONResponse({"session_id": sid, "cwd": cwd, "markdown": text})

    return [Route("/v1/context", context)]
