"""The ASGI app: JSON API, ``/metrics``, the dashboard and the OpenAPI document, one process.

``create_app(cfg, log)`` builds it; ``quill serve`` and the fleet's ``http`` child run it with
uvicorn (``server.py``). Logging: one structlog event per request with the method, the route
*template*, the status, the duration and the token id — never the raw path or query (they
may carry ids or a mistakenly pasted token), a token, or a filesystem path.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quill.home import OTLP_LINKS_DB
from quill.ops.client.client import Client
from quill.ops.service import api, api_common, dashboard, errors, guard, metrics, otlp, otlp_links
from quill.ops.service.auth import require

VERSION = "1"


class _AccessLog:
    def __init__(self, app: ASGIApp, log: Any):
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, status = time.monotonic(), [0]

        async def tap(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tap)
        finally:
            route = scope.get("route")
            principal = (
                getattr(scope.get("state", {}).get("principal"), "token_id", None)
                if isinstance(scope.get("state"), dict)
                else None
            )
            self.log.info(
                "http.request",
                method=scope["method"],
                route=getattr(route, "path", "(unrouted)"),
                status=status[0],
                ms=round((time.monotonic() - began) * 1000, 1),
                token_id=principal,
            )


#: Where the browsable API docs fetch Swagger UI's files: served here from the swagger-ui-bundle
#: package, so /api/docs works offline (FastAPI's default loads them from a CDN).
DOCS_STATIC = "/api/docs/static"


def _install_docs(app: FastAPI) -> None:
    """``/api/docs``: Swagger UI for the OpenAPI document with every file served by this app
    (the document translated to 3.0, ``openapi30``: this Swagger UI cannot read 3.1)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    from quill.ops.service.openapi30 import downgrade

    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/api/docs/openapi.json", include_in_schema=False)
    def api_docs_document() -> dict:
        """The OpenAPI document in version 3.0, which this Swagger UI (4.15) can render."""
        return downgrade(app.openapi())

    @app.get("/api/docs", include_in_schema=False)
    def api_docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/api/docs/openapi.json",
            title="Quill API",
            swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC}/favicon-32x32.png",
        )


def create_app(cfg: Any, log: Any, *, anonymous: str | None = None) -> FastAPI:
    """The Quill service for data dir ``cfg.home``. ``anonymous`` overrides ``[http] anonymous``
    (``loopback`` | ``none`` | ``any``; see ``auth``)."""
    app = FastAPI(
        title="Quill",
        version=VERSION,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        description="Durable store for AI-agent transcripts: append ops (202 once fsync'd), "
        "read transcripts, search, status, jobs. Bearer tokens with scopes "
        "read / write / admin (`quill token create`).",
    )
    app.state.cfg, app.state.log, app.state.anonymous = cfg, log, anonymous or cfg.http_anonymous
    app.state.client = Client(config_=cfg)  # per-thread spool handles inside (thread pool routes)
    errors.install(app, log)
    app.include_router(api.router)
    # Agent spans waiting for their parent span, kept across restarts.
    app.state.otlp_links = otlp_links.DelegateLinks(cfg.home / OTLP_LINKS_DB)
    app.include_router(otlp.router)  # POST /v1/traces (OTLP/HTTP)

    @app.get(
        "/metrics",
        dependencies=[Depends(require("read"))],
        response_class=Response,
        responses={
            200: {"content": {metrics.CONTENT_TYPE: {}}, "description": "Prometheus text format"},
            **{code: api_common.ERRORS[code] for code in (401, 403, 429)},
        },
    )
    def prometheus(request: Request) -> Response:
        """Prometheus metrics (the same figures as ``quill status --json`` → ``metrics``)."""
        return Response(metrics.render(request.app.state.cfg), media_type=metrics.CONTENT_TYPE)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the service answers (no auth; reveals nothing)."""
        return {"status": "ok"}

    _install_docs(app)
    dashboard.install(app)
    app.add_middleware(
        errors.BodyLimit, max_bytes=cfg.http_max_body_bytes, timeout_s=cfg.http_body_timeout_s
    )
    app.add_middleware(_AccessLog, log=log)
    # Outermost: a throttled request costs no body read and no route.
    app.add_middleware(
        guard.RequestBudget, rate=cfg.http_requests_per_s, burst=cfg.http_request_burst
    )
    return app
