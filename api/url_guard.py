"""Refusing URLs that hold a NUL character, before any route reads them.

No session id, agent, status, project, search or filter holds U+0000, and PostgreSQL
text cannot carry it: a ``%00`` that reached a query there raised in the driver and
answered 500 (SQLite just found nothing). :class:`NulInUrl` (pure ASGI, so streamed
responses pass through untouched) answers 400 ``{"error": ...}`` for such a URL, on
every backend alike. Bodies are not its business: a hook body holding NUL is recorded,
and so is one posted to an ingest route (``INGEST_PREFIXES``) whatever its URL, which
answers with its own reason (404 for an agent no one knows) after recording it.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

REASON = (
    "the URL holds a NUL character (%00), which no session id, filter or search "
    "can contain"
)

INGEST_PREFIXES = ("/v1/hooks/", "/v1/journal")


class NulInUrl:
    """400 for an HTTP request whose decoded path or query string holds NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and ("\x00" in scope["path"] or b"%00" in scope.get("query_string", b""))
            and not scope["path"].startswith(INGEST_PREFIXES)
        ):
            await JSONResponse({"error": REASON}, 400)(scope, receive, send)
            return
        await self.app(scope, receive, send)
