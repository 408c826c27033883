"""Operator commands over HTTP: ``POST /v1/sessions/{id}/commands/{command}``.

``command`` is ``pause``, ``resume``, ``terminate``, ``archive`` or ``fork``. Optional
JSON body: ``{"by": str, "reason": str, "key": str, "at": int}`` — ``key`` is the
command's idempotency key (default: the ``X-Hookledger-Command-Key`` header, else a new
UUIDv7), ``at`` (fork only) the parent's notification position to fork at (default:
its head). ``by`` defaults to the ``X-Hookledger-Operator`` header, else ``api``.

Responses: 200 ``{"session_id", "command", "from_status", "to_status", "appended",
"positions"[, "fork_id"]}``; 404 no such session; 400 unknown command or bad body;
409 ``{"error", "status", "allowed_from", "allowed_commands"}`` when the transition is
invalid (nothing is appended).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.hook_client import uuid7
from ledger.commands import InvalidTransition, UnknownCommand, fork_session, run_command
from projections import queries


def fork_version(services: Any, sid: str, at_position: int | None) -> tuple[int | None, int | None]:
    """(parent version, position) to fork at: the last version at or before ``at_position``
    (default: the head). Raises ValueError when the session has no event at or before it."""
    positions = queries.session_event_positions(services.models, sid)
    if at_position is None:
        version = max(positions) if positions else None
        return version, positions.get(version) if version else None
    eligible = [v for v, p in positions.items() if p <= at_position]
    if not eligible:
        raise ValueError(f"session {sid} has no event at or before position {at_position}")
    version = max(eligible)
    return version, positions[version]


def execute(
    services: Any,
    ref: str,
    command: str,
    *,
    by: str | None,
    reason: str | None,
    key: str | None,
    at_position: int | None,
) -> dict[str, Any]:
    """Run one command (catching the read models up first); returns the result dict.

    Raises LookupError, UnknownCommand, InvalidTransition, ValueError."""
    services.runner.catch_up()
    sid = queries.find_session_id(services.models, ref)
    if sid is None:
        raise LookupError(queries.unresolved(services.models, ref))
    now = datetime.now(UTC)
    key = key or uuid7()
    if command == "fork":
        version, position = fork_version(services, sid, at_position)
        result = fork_session(
            services.ledger,
            UUID(sid),
            key,
            now,
            at_version=version,
            at_position=position,
            by=by,
            reason=reason,
        )
    else:
        if at_position is not None:
            raise ValueError("'at' applies to fork only")
        result = run_command(services.ledger, UUID(sid), command, key, now, by, reason)
    services.runner.catch_up()
    return result.as_dict()


TEXT_FIELDS = {"by": 200, "key": 200, "reason": 10_000}
"""The body's text fields and their longest accepted length (characters)."""


def routes(services: Any) -> list[Route]:
    async def post_command(request: Request) -> Response:
        body: dict[str, Any] = {}
        raw = await request.body()
        if raw.strip():
            try:
                import orjson

                body = orjson.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                at = body.get("at")
                if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
                    raise ValueError("'at' must be an integer log position")
                for name, most in TEXT_FIELDS.items():
                    value = body.get(name)
                    if value is not None and (not isinstance(value, str) or len(value) > most):
                        raise ValueError(f"{name!r} must be a string of at most {most} characters")
            except ValueError as e:
                return JSONResponse({"error": f"bad request body: {e}"}, 400)
        by = body.get("by") or request.headers.get("x-hookledger-operator") or "api"
        key = body.get("key") or request.headers.get("x-hookledger-command-key")
        try:
            out = await anyio.to_thread.run_sync(
                lambda: execute(
                    services,
                    request.path_params["id"],
                    request.path_params["command"],
                    by=by,
                    reason=body.get("reason"),
                    key=key,
                    at_position=body.get("at"),
                )
            )
        except LookupError as e:
            return JSONResponse({"error": str(e)}, 404)
        except InvalidTransition as e:
            return JSONResponse(
                {
                    "error": str(e),
                    "status": e.status.value,
                    "allowed_from": e.allowed_from,
                    "allowed_commands": e.allowed_commands,
                },
                409,
            )
        except (UnknownCommand, ValueError) as e:
            return JSONResponse({"error": str(e)}, 400)
        return JSONResponse(out, 200)

    return [Route("/v1/sessions/{id}/commands/{command}", post_command, methods=["POST"])]
