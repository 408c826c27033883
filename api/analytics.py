"""``GET /v1/analytics`` and ``GET /v1/analytics/{query}``: the named analytics queries.

Read-only and parameterised: only the named queries of
:mod:`projections.analytics.queries` run, with ``since`` (ISO-8601 date or time, UTC)
and ``limit`` (1..10,000) as query parameters; there is no arbitrary SQL over HTTP.

* ``GET /v1/analytics`` -> 200 ``{"queries": {name: description}}``
* ``GET /v1/analytics/{query}`` -> 200 ``{"query", "since", "limit", "position", "rows"}``
  (``position``: the log position the answer includes); 404 ``{"error", "known"}``
  for an unknown name; 400 ``{"error"}`` for a bad ``since``/``limit``.

Each request catches the analytics model up (the writer lock serialises it with any
other writer) and reads the published snapshot read-only (docs/analytics.md).
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.bootstrap import Services


def routes(services: Services) -> list[Route]:
    """The analytics routes, for :func:`api.app.create_app`."""
    from projections.analytics import catch_up, named_queries, open_snapshot, run_query
    from projections.analytics.store import snapshots

    data_dir = services.settings.data_dir

    async def list_queries(_request: Request) -> Response:
        return JSONResponse({"queries": named_queries()})

    def answer(name: str, since: str | None, limit: int | None) -> dict[str, Any]:
        catch_up(services.ledger, data_dir)
        position = snapshots(data_dir)[-1][0]
        con = open_snapshot(data_dir)
        try:
            rows = run_query(con, name, since=since, limit=limit)
        finally:
            con.close()
        return {"query": name, "since": since, "limit": limit, "position": position, "rows": rows}

    async def run(request: Request) -> Response:
        name = request.path_params["query"]
        known = named_queries()
        if name not in known:
            return JSONResponse({"error": f"unknown query {name!r}", "known": list(known)}, 404)
        q = request.query_params
        # ``token``: the access token's query form (api/access.py), not a query parameter
        unknown = sorted(set(q) - {"since", "limit", "token"})
        if unknown:
            return JSONResponse({"error": f"unknown parameters: {', '.join(unknown)}"}, 400)
        try:
            limit = int(q["limit"]) if "limit" in q else None
        except ValueError:
            return JSONResponse({"error": "limit must be an integer"}, 400)
        try:
            body = await anyio.to_thread.run_sync(lambda: answer(name, q.get("since"), limit))
        except ValueError as e:
            return JSONResponse({"error": str(e)}, 400)
        return JSONResponse(body)

    return [
        Route("/v1/analytics", list_queries),
        Route("/v1/analytics/{query}", run),
    ]
