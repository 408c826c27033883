"""Access control: loopback by default, a bearer token for anything else.

* :func:`bind_error` — the server refuses a non-loopback bind address without a token
  (``HOOKLEDGER_TOKEN``).
* :class:`TokenMiddleware` (pure ASGI, so streamed responses such as SSE pass through
  untouched) — when a token is configured, every HTTP/WebSocket request except
  ``OPEN_PATHS`` (``/healthz``, the viewer page ``/``) and ``OPEN_PREFIXES`` (static
  viewer assets) must carry it as ``Authorization: Bearer <token>``, a ``?token=<token>``
  query parameter, or a ``hookledger_token`` cookie (an ``EventSource`` cannot send
  headers). Otherwise: 401 ``{"error": ...}`` with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import hmac
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.hot_path.hook_fast import is_loopback_host

OPEN_PATHS = frozenset({"/", "/healthz"})
OPEN_PREFIXES = ("/static/",)
COOKIE = "hookledger_token"
TOKEN_ENV = "HOOKLEDGER_TOKEN"


def bind_error(host: str, token: str | None) -> str | None:
    """Why the server must not start on ``host`` (None when it may)."""
    if token is not None and (not token.strip() or token != token.strip()):
        return (
            f"{TOKEN_ENV} is blank or starts or ends with whitespace: set it to the "
            "token itself (clients send it as 'Authorization: Bearer <token>')."
        )
    if is_loopback_host(host) or token:
        return None
    return (
        f"refusing to bind {host!r}: a non-loopback address needs a token. "
        f"Set {TOKEN_ENV} (clients send it as 'Authorization: Bearer <token>'), "
        "or bind 127.0.0.1."
    )


def presented_token(conn: HTTPConnection) -> str | None:
    """The token a request carries (header, then query parameter, then cookie)."""
    auth = conn.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    query = parse_qs(conn.scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0]
    raw = conn.headers.get("cookie")
    if raw:
        try:
            morsel = SimpleCookie(raw).get(COOKIE)
        except CookieError:
            return None
        return morsel.value if morsel else None
    return None


class TokenMiddleware:
    """Require ``token`` on every request outside the open paths (module docstring)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("TokenMiddleware needs a non-empty token")
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        given = presented_token(HTTPConnection(scope))
        if given is not None and hmac.compare_digest(given.encode(), self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        reason = "missing token" if given is None else "wrong token"
        response = JSONResponse(
            {"error": f"{reason}: send 'Authorization: Bearer <token>', ?token= or the "
                      f"{COOKIE} cookie"},
            401,
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)
