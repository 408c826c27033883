"""``GET /v1/sessions/{id}/plans``: the plans a session wrote (see ``projections/plans.py``).

200 ``{"session_id", "plans": [...]}``; 404 ``{"error"}`` when there is no such session
(or the sessions an ambiguous prefix matches, listed).
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
        def read() -> dict[str, Any] | str:
            services.runner.catch_up()
            ref = request.path_params["id"]
            sid = queries.find_session_id(services.models, ref)
            if sid is None:
                return queries.unresolved(services.models, ref)
            return {"session_id": sid, "plans": session_plans(services.models, sid)}

        found = await anyio.to_thread.run_sync(read)
        if isinstance(found, str):
            return JSONResponse({"error": found}, 404)
        return JSONResponse(found)

    return [Route("/v1/sessions/{id}/plans", get_plans)]
