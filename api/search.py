"""``GET /v1/search?q=…``: full-text search over prompts, tool inputs, summaries and
observations (:mod:`projections.search_query`).

Query parameters: ``q`` (required; its words, stemmed, every one must match),
``kind`` (repeatable or comma-separated: ``prompt``, ``tool_input``, ``summary``,
``observation``), ``session`` (ledger id, the agent's id or a prefix), ``project``
(the sessions' ``cwd``), ``any=1`` (any word matches), ``order`` (``best``, the
default: relevance weighted by recency; ``recent``), ``limit`` (1–500, default 20).

200 ``{"query", "hits": [SearchHit…]}``; 400 ``{"error"}`` for a query without words,
an unknown kind or order, a bad limit; 404 for an unknown session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from projections import queries
from projections.search_query import SearchQueryError, search_models

MAX_LIMIT = 500


def routes(services: Any, current: Callable[[], Awaitable[None]]) -> list[Route]:
    """``current``: awaits the projections catching up with the log."""

    async def search(request: Request) -> Response:
        params = request.query_params
        try:
            limit = int(params.get("limit", "20"))
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_LIMIT:
            return JSONResponse({"error": f"limit must be an integer from 1 to {MAX_LIMIT}"}, 400)
        kinds = tuple(k for value in params.getlist("kind") for k in value.split(",") if k)
        order = params.get("order", "best")
        any_term = params.get("any", "").lower() in ("1", "true", "yes")
        query = params.get("q", "")
        await current()

        def run() -> Response:
            sid = None
            if params.get("session"):
                sid = queries.find_session_id(services.models, params["session"])
                if sid is None:
                    return JSONResponse({"error": "no such session"}, 404)
            try:
                hits = search_models(
                    services.models, query, limit=limit, kinds=kinds or None, session_id=sid,
                    cwd=params.get("project") or None, any_term=any_term, order=order,
                )
            except SearchQueryError as e:
                return JSONResponse({"error": str(e)}, 400)
            return JSONResponse({"query": query, "hits": [h.as_dict() for h in hits]})

        return await anyio.to_thread.run_sync(run)

    return [Route("/v1/search", search)]
