"""The web dashboard: server-rendered pages (Jinja2) over the same reads as the JSON API.

Pages: ``/sessions`` (filters, search with highlighted snippets), ``/sessions/{id}`` (display /
model / audit views, tool calls folded, compaction and rewind markers, lineage links),
``/fleet`` (workers, restarts, spool lag, halts with the command to run, quarantine), ``/jobs``
(schedules, history, overdue, "run now" with the admin scope), ``/usage`` (charts).
Authentication is the API's (``auth``): the sign-in form stores a token in an HttpOnly,
SameSite=Strict cookie, so a cross-site form cannot trigger "run now".
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from quill.home import WriterStatus
from quill.ops.client.stores import open_reader
from quill.ops.service import api_common, api_jobs, views
from quill.ops.service.auth import COOKIE, principal, require_same_origin
from quill.ops.service.dashboard_templates import HERE, templates
from quill.ops.service.errors import ApiError
from quill.ops.service.formats import day_axis
from quill.ops.service.tokens import TokensCopiedError, TokenStore, TokensUnavailableError
from quill.ops.status import health
from quill.spool import Quarantine
from quill.store.errors import CantOpenError
from quill.store.read.reader import Reader

PAGE_SESSIONS = 50
MAX_PAGE_SESSIONS = 1000  # as the API's ``limit``
PAGE_RUNS = 30  # job runs a page of the jobs page's history
QUARANTINE_SHOWN = 20
#: A transcript page shows the latest ``PAGE_MESSAGES`` messages (older ones a link away),
#: each text read only up to ``TEXT_CLIP`` characters (the template shows at most that).
PAGE_MESSAGES = 200
TEXT_CLIP = 20_000


class _SignIn(Exception):
    pass


def _who(request: Request, scope: str = "read") -> Any:
    try:
        who = principal(request)
    except ApiError:
        raise _SignIn() from None
    if not who.allows(scope):
        raise _SignIn()
    request.state.principal = who
    return who


def _page(request: Request, name: str, **ctx: Any) -> HTMLResponse:
    """Render ``name``; every signed-in page says when the store is lost (``lost``:
    ``health.store_missing``, what status and doctor say), behind the spool or the writer is
    halted (``views.store_behind``), so what it shows is not taken as complete."""
    who = getattr(request.state, "principal", None)
    cfg = request.app.state.cfg
    behind = views.store_behind(cfg) if who is not None else None
    # A lost store: the verdict and command of `quill status`/`doctor`, on every page.
    lost = health.store_missing(cfg) if who is not None else None
    return templates.TemplateResponse(
        request, name, {"who": who, "behind": behind, "lost": lost, **ctx}
    )


def _open(request: Request) -> Reader | None:
    try:
        return open_reader(request.app.state.cfg)
    except CantOpenError:
        return None


def _epoch(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise ApiError(422, "invalid-request", f"{value!r} is not a date (YYYY-MM-DD)") from None


def _flag(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")


def install(app: FastAPI) -> None:
    """Mount the dashboard's pages and static files on ``app`` (kept out of the OpenAPI
    document)."""
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.state.html_error = lambda request, status, reason, detail: templates.TemplateResponse(
        request,
        "error.html",
        {
            "who": None,
            "status": status,
            "reason": reason,
            "detail": detail,
            # A page that could not read a lost store says so as every page does (_page).
            "lost": health.store_missing(app.state.cfg) if reason == "store-missing" else None,
        },
        status_code=status,
    )

    @app.exception_handler(_SignIn)
    async def _sign_in(request: Request, exc: _SignIn) -> Response:
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        return RedirectResponse("/sessions", status_code=303)

    @app.get("/login", include_in_schema=False)
    def login_form(request: Request, next: str = "/sessions", error: str = "") -> HTMLResponse:
        return _page(
            request,
            "login.html",
            next=next if next.startswith("/") and not next.startswith("//") else "/",
            error=error,
        )

    @app.post("/login", include_in_schema=False)
    def login(request: Request, token: str = Form(...), next: str = Form("/sessions")) -> Response:
        require_same_origin(request)  # no page elsewhere signs a browser in as someone else
        try:
            found = TokenStore(request.app.state.cfg.tokens_db).verify(token.strip())
        except (TokensCopiedError, TokensUnavailableError) as exc:
            return _page(request, "login.html", next=next, error=str(exc))
        if found is None:
            return _page(
                request, "login.html", next=next, error="That token is unknown or revoked."
            )
        target = next if next.startswith("/") and not next.startswith("//") else "/sessions"
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            token.strip(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=7 * 86400,
        )
        return response

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        require_same_origin(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    @app.get("/sessions", include_in_schema=False)
    def sessions(
        request: Request,
        q: str = "",
        source: str = "",
        title: str = "",
        since: str = "",
        until: str = "",
        archived: str = "",
        pinned: str = "",
        lineage: str = "tips",
        session: str = "",
        limit: int = PAGE_SESSIONS,
        after: str = "",
    ) -> HTMLResponse:
        _who(request)
        limit = min(max(limit, 1), MAX_PAGE_SESSIONS)
        filters = {
            "q": q,
            "session": session,
            "source": source,
            "title": title,
            "since": since,
            "until": until,
            "archived": archived,
            "pinned": pinned,
            "lineage": lineage,
        }
        rows, hits, sources, degraded, found, cursor = [], [], [], False, None, None
        r = _open(request)
        if r is not None:
            with r:
                sources = [
                    s
                    for (s,) in r.conn.execute(
                        "SELECT DISTINCT source FROM sessions WHERE source IS NOT NULL "
                        "ORDER BY source"
                    )
                ]
        client = request.app.state.client  # the rows and hits of the API and `quill … --json`
        lost = health.store_missing(request.app.state.cfg)  # said by the page's banner (_page)
        with api_common.client_errors():
            if lost:
                pass  # nothing to list or search: the banner names the loss and `quill recover`
            elif q.strip():
                degraded = client.search_health()["degraded"]
                # At most PER_SESSION hits per session (all of one session's with ``session``);
                # a session with more says how many, linking to them.
                found = client.search_results(
                    q,
                    limit=limit,
                    session_id=session or None,
                    source=source or None,
                    since=_epoch(since),
                    until=_epoch(until),
                    context=False,
                    after=after or None,
                )
                hits, cursor = found["hits"], found["next"]
            else:
                listed = client.sessions_page(
                    after=after or None,
                    source=source or None,
                    limit=limit,
                    title_contains=title or None,
                    since=_epoch(since),
                    until=_epoch(until),
                    archived=_flag(archived),
                    pinned=_flag(pinned),
                    chains=lineage == "all",
                )
                rows, cursor = listed["sessions"], listed["next"]
        next_url = None
        if cursor is not None:  # the same listing's next page (search or sessions)
            next_url = str(request.url.include_query_params(after=cursor))
            next_url = next_url[next_url.index("/sessions") :]  # same origin: path and query
        return _page(
            request,
            "sessions.html",
            rows=rows,
            limit=limit,
            next_url=next_url,
            paged=bool(after),
            hits=hits,
            found=found,
            more_after=_more_after(found),
            f=filters,
            sources=sources,
            degraded=degraded,
            has_store=r is not None,
        )

    @app.get("/sessions/{session_id:sid}", include_in_schema=False)
    def transcript(
        request: Request, session_id: str, view: str = "display", before: int | None = None
    ) -> HTMLResponse:
        _who(request)
        if view not in ("display", "model", "audit"):
            view = "display"
        if before is not None and not 1 <= before < 2**63:
            raise ApiError(422, "invalid-request", f"before must be a message id ≥ 1, got {before}")
        with api_common.client_errors(f"session {session_id!r}"):
            # One more than a page: whether older messages exist, without counting them.
            found = request.app.state.client.transcript(
                session_id, view, latest=PAGE_MESSAGES + 1, before_id=before, clip=TEXT_CLIP
            )
        messages, children = found["messages"], []
        older = len(messages) > PAGE_MESSAGES
        if older:
            messages = messages[1:]
        r = _open(request)
        if r is not None:
            with r:
                children = r.conn.execute(
                    "SELECT id, parent_kind, title FROM sessions WHERE parent_id = ? "
                    "ORDER BY started_at, id",
                    (session_id,),
                ).fetchall()
        # Tool results are folded into the call that asked for them (shown on their own when
        # the call is not in this view, and always in the audit view).
        results = {
            m.get("tool_call_id"): m
            for m in messages
            if m.get("role") == "tool" and m.get("tool_call_id")
        }
        called = {
            c.get("id")
            for m in messages
            for c in (m.get("tool_calls") or [])
            if isinstance(c, dict)
        }
        return _page(
            request,
            "transcript.html",
            s=found["session"],
            chain=found["chain"],
            view=view,
            messages=messages,
            results=results,
            called=called,
            children=children,
            older=messages[0]["message_id"] if older else None,
            paged=before is not None,
        )

    @app.get("/fleet", include_in_schema=False)
    def fleet(request: Request) -> HTMLResponse:
        _who(request)
        data = health.collect(request.app.state.cfg)
        quarantine = list(
            itertools.islice(
                Quarantine(request.app.state.cfg.spool_dir).entries(), QUARANTINE_SHOWN
            )
        )
        published = data["fleet"]["writer"]
        writer = WriterStatus.from_json(published) if published else None
        return _page(
            request, "fleet.html", d=data, quarantine=quarantine, roles=health.ROLES, writer=writer
        )

    @app.get("/jobs", include_in_schema=False)
    def jobs(request: Request, queued: str = "", after: str = "") -> HTMLResponse:
        who = _who(request)
        rows = views.jobs(request.app.state.cfg)
        r = _open(request)
        found: dict[str, Any] = {"runs": [], "next": None}
        if r is not None:
            with r:
                found = views.guard(lambda: r.job_runs_page(limit=PAGE_RUNS, after=after or None))
        next_url = None
        if found["next"] is not None:  # the history's next page (same origin: path and query)
            next_url = f"/jobs?{urlencode({'after': found['next']})}"
        return _page(
            request,
            "jobs.html",
            jobs=rows,
            history=found["runs"],
            next_url=next_url,
            paged=bool(after),
            queued=queued,
            admin=who.allows("admin"),
        )

    @app.post("/jobs/{name}/run", include_in_schema=False)
    def run_now(request: Request, name: str) -> Response:
        _who(request, "admin")
        api_jobs.queue_job(request, name)
        return RedirectResponse(f"/jobs?queued={name}", status_code=303)

    @app.get("/usage", include_in_schema=False)
    def usage(request: Request, days: int = 0) -> HTMLResponse:
        _who(request)
        since = time.time() - days * 86400 if days > 0 else None
        client = request.app.state.client
        with api_common.client_errors():
            per_day = client.usage(("day",), since=since)
            per_model = client.usage(("model",), since=since)
            total = client.usage((), since=since)[0]
        for row in per_day + per_model:
            row["tokens"] = row["input_tokens"] + row["output_tokens"]
        axis = day_axis(per_day, since)
        return _page(
            request,
            "usage.html",
            days=days,
            per_day=per_day,
            axis=axis,
            # Label about a dozen days whatever the span, so the labels never overlap.
            label_every=max(1, len(axis) // 12),
            per_model=per_model,
            total=total,
            day_max=max([d["tokens"] for d in per_day] or [1]) or 1,
            cost_max=max([d["cost_usd"] or 0 for d in per_day] or [1]) or 1,
            model_max=max([m["tokens"] for m in per_model] or [1]) or 1,
        )


def _more_after(found: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """``{message id: session entry}``: the last shown hit of each session whose matches are
    not all shown, where the dashboard says how many more it has (``search_results``)."""
    if not found:
        return {}
    last = {h["session_id"]: h["message_id"] for h in found["hits"]}
    return {
        last[s["session_id"]]: s
        for s in found["sessions"]
        if s["matches"] > s["shown"] and s["session_id"] in last
    }
