"""One error shape for every HTTP failure, and the request-body size limit.

Every error response is JSON ``{"error": {"status": int, "reason": str, "detail": str}}``.
``reason`` is a short stable tag a client branches on: the spool precheck's own codes for a
refused op (``unknown-op``, ``invalid-data``, ``invalid-field``, ``invalid-role`` …, from
``quill.store.apply.precheck``), and for the service itself: ``body-too-large``,
``batch-too-large``, ``invalid-json``, ``invalid-request``, ``bad-cursor`` (422: an ``after``
that is not a page cursor of that listing, query or filters), ``unauthorized``, ``forbidden``,
``not-found``, ``method-not-allowed``, ``body-timeout`` (408), ``too-many-requests`` (429),
``spool-full``, ``spool-unavailable``, ``store-unavailable``, ``overloaded`` (503 with
``Retry-After``: no file descriptor was left, EMFILE/ENFILE, to open the store, a file or a
socket), ``tokens-copied`` and ``tokens-unavailable`` (503: ``tokens.db`` bound to another
data dir, or locked by another process now, with ``Retry-After``), ``internal``. Details
never carry a filesystem path or a token.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quill.home.descriptors import is_exhaustion

#: Seconds an ``overloaded`` answer asks the client to wait (descriptors free as the
#: requests in progress finish, within a second or so).
OVERLOADED_RETRY_S = 1


def overloaded(what: str = "the request") -> ApiError:
    """The 503 ``overloaded`` answer (with ``Retry-After``) for descriptor exhaustion."""
    return ApiError(
        503,
        "overloaded",
        f"no file descriptor was left for {what}; retry shortly",
        {"Retry-After": str(OVERLOADED_RETRY_S)},
    )


_STATUS_REASONS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "body-too-large",
    422: "invalid-request",
}


class ApiError(Exception):
    """Raise from a route to answer ``status`` with the shaped error body."""

    def __init__(
        self,
        status: int,
        reason: str,
        detail: str,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(f"{reason}: {detail}")
        self.status, self.reason, self.detail = status, reason, detail
        self.headers, self.extra = headers, extra or {}


def error_response(
    status: int,
    reason: str,
    detail: str,
    headers: dict[str, str] | None = None,
    request: Request | None = None,
    **extra: Any,
) -> Response:
    """The shaped error body as a response (an HTML page for a browser on a dashboard page)."""
    if request is not None and _wants_page(request):
        return request.app.state.html_error(request, status, reason, detail)
    return JSONResponse(
        {"error": {"status": status, "reason": reason, "detail": detail, **extra}},
        status_code=status,
        headers=headers,
    )


#: OpenAPI schema of the error body (documented on every route).
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["status", "reason", "detail"],
            "properties": {
                "status": {"type": "integer"},
                "reason": {"type": "string"},
                "detail": {"type": "string"},
            },
        }
    },
}


def install(app: FastAPI, log: Any) -> None:
    """Route every failure (ours, Starlette's, validation, unexpected) to the shaped body."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.reason, exc.detail, exc.headers, request, **exc.extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = _STATUS_REASONS.get(exc.status_code, "error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed(request)}
        return error_response(exc.status_code, reason, str(exc.detail), headers, request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if any(e.get("type") == "json_invalid" for e in errors):
            reason = "invalid-json"
        elif first.get("type") == "literal_error" and tuple(first.get("loc", ()))[-1:] == ("op",):
            reason = "unknown-op"  # the spool precheck's code for the same fault
        else:
            reason = "invalid-request"
        where = ".".join(str(p) for p in first.get("loc", ()))
        loc = list(first.get("loc", ()))
        extra = (
            {"op_index": loc[loc.index("ops") + 1]}
            if "ops" in loc[:-1] and isinstance(loc[loc.index("ops") + 1], int)
            else {}
        )
        return error_response(
            422,
            reason,
            f"{where}: {first.get('msg', 'invalid request')}".strip(": "),
            None,
            request,
            **extra,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if is_exhaustion(exc):  # overload, not a bug: the client should come back
            log.warning("http.overloaded", error_type=type(exc).__name__, route=_route(request))
            busy = overloaded()
            return error_response(busy.status, busy.reason, busy.detail, busy.headers, request)
        # Logged by type and route only: an exception message may carry a path or a token.
        log.error("http.unexpected", error_type=type(exc).__name__, route=_route(request))
        return error_response(
            500, "internal", f"unexpected {type(exc).__name__}; see the service log", None, request
        )


def _allowed(request: Request) -> str:
    """The methods some route of the app answers at this request's path (Starlette's 405 names
    only the first route whose path matched, e.g. ``POST`` where a ``GET`` route shares it)."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.router.routes:
        # PARTIAL: the path matches, the method does not; FULL cannot happen here.
        match, _ = route.matches(request.scope)
        if match != Match.NONE and getattr(route, "methods", None):
            methods |= set(route.methods)
    return ", ".join(sorted(methods))


def _wants_page(request: Request) -> bool:
    path = request.url.path
    return (
        getattr(request.app.state, "html_error", None) is not None
        and "text/html" in request.headers.get("accept", "")
        and not path.startswith("/api/")
        and path not in ("/metrics", "/openapi.json", "/healthz")
    )


def _route(request: Request) -> str:
    route = request.scope.get("route")
    return getattr(route, "path", "?")


class BodyLimit:
    """ASGI middleware: refuse a request body over ``max_bytes`` with 413 ``body-too-large``
    before the route runs (Content-Length checked first, the streamed size always), so an
    oversized push never reaches the spool and never sits in memory past the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 60.0):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                if not await self._read(receive, chunks):
                    return
        except TimeoutError:
            await _send_error(
                scope,
                receive,
                send,
                408,
                "body-timeout",
                f"request body not received within {self.timeout_s:g} s",
            )
            return
        except _TooLarge:
            await self._refuse(scope, receive, send)
            return
        whole = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": whole, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, chunks: list[bytes]) -> bool:
        """Collect the body into ``chunks``; False when the client went away. Raises
        ``_TooLarge`` past ``max_bytes``."""
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(body)
            more = message.get("more_body", False)
        return True

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _send_error(
            scope,
            receive,
            send,
            413,
            "body-too-large",
            f"request body over {self.max_bytes} bytes; split the batch into smaller requests",
        )


class _TooLarge(Exception):
    pass


async def _send_error(
    scope: Scope, receive: Receive, send: Send, status: int, reason: str, detail: str
) -> None:
    # The same body and rendering as every other error (error_response's JSONResponse); the
    # connection closes since the rest of the body is not read.
    response = JSONResponse(
        {"error": {"status": status, "reason": reason, "detail": detail}},
        status_code=status,
        headers={"connection": "close"},
    )
    await response(scope, receive, send)
