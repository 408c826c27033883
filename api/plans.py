"""``GET /v1/sessions/{id}/plans``: the plans a session wrote (see ``projections/plans.py``).

200 ``{"session_id", "plans": [...]}``; 404 when there is no such session.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from projections import queries
from projections.plans import session_plans


def routes(services: Any) -> list[Route]:
    async def get_plans(request: Request) -> Response:
        def read() -> dict[str, Any] | None:
            services.runner.catch_up()
            sid = queries.find_session_id(services.models, request.path_params["id"])
            return (
                None
                if sid is None
                else {"session_id": sid, "plans": session_plans(services.models, sid)}
            )

        found = await anyio.to_thread.run_sync(read)
        if found is None:
            return JSONResponse({"error": "no such session"}, 404)
        return JSONResponse(found)

    return [Route("/v1/sessions/{id}/plans", get_plans)]
