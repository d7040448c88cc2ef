"""The read routes of the JSON API (``/api/v1/sessions`` …, ``/resume``, ``/search``,
``/usage``): each goes through ``quill.Client``, so it answers what the library and the CLI's
``--json`` answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from quill.ops.client.client import Client
from quill.ops.client.reads import MESSAGES_MAX, MESSAGES_PAGE
from quill.ops.service.api_common import (
    ERRORS,
    MAX_PAGE,
    NEXT_HEADERS,
    EpochSeconds,
    Role,
    client,
    client_errors,
    link_next,
)
from quill.ops.service.auth import require
from quill.ops.service.errors import ApiError
from quill.store.search.group import PER_SESSION

router = APIRouter()


@router.get("/sessions", dependencies=[Depends(require("read"))], responses=NEXT_HEADERS)
def list_sessions(
    request: Request,
    response: Response,
    q: Client = Depends(client),
    source: str | None = None,
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    include_hidden: bool = False,
    title: str | None = None,
    since: EpochSeconds = None,
    until: EpochSeconds = None,
    archived: bool | None = None,
    pinned: bool | None = None,
    hidden: bool | None = None,
    lineage: Literal["tips", "all"] = "tips",
    after: str | None = None,
) -> dict[str, Any]:
    """Sessions, most recently active first (``since``/``until`` in epoch seconds, both bounding
    the session's last activity: its newest message's time, else its start) — the same
    document as ``quill.Client.sessions_page`` and ``quill sessions list --json``:
    ``{"sessions": [...], "next": cursor or null}``. At most ``limit``; ``next`` (also in the
    ``X-Next-Cursor`` header, and ``Link: rel="next"``) is the ``after`` value of the next
    page with the same filters (keyset pagination: stable under concurrent writes); a cursor
    of another listing or filters is 422 ``bad-cursor``."""
    with client_errors():
        found = q.sessions_page(
            after=after,
            source=source,
            limit=limit,
            include_hidden=include_hidden,
            title_contains=title,
            since=since,
            until=until,
            archived=archived,
            pinned=pinned,
            hidden=hidden,
            chains=lineage == "all",
        )
    link_next(request, response, found["next"])
    return found


@router.get(
    "/sessions/{session_id:sid}/messages",
    dependencies=[Depends(require("read"))],
    responses={404: ERRORS[422] | {"description": "no such session"}} | NEXT_HEADERS,
)
def get_messages(
    session_id: str,
    request: Request,
    response: Response,
    q: Client = Depends(client),
    view: Literal["display", "model", "audit"] = "display",
    latest: int | None = Query(None, ge=1, le=1_000_000),
    limit: int | None = Query(None, ge=1, le=MESSAGES_MAX),
    after: str | None = None,
) -> dict[str, Any]:
    """A transcript in one view: ``display`` (what a UI shows), ``model`` (what the model is
    fed), ``audit`` (every row, rewound and superseded included) — the same document as
    ``quill.Client.transcript`` / ``quill sessions show --json``, plus ``view``. Paged from
    the first message: at most ``limit`` messages (default 1,000, at most 10,000), ``next``
    (also the ``X-Next-Cursor`` header) the ``after`` value of the next page of the same
    session and view, null on the last (keyset on the view's positions: messages appended
    meanwhile are neither repeated nor skipped). ``latest``: only the last N instead (not
    paged, ``next`` null; not with ``limit`` or ``after``)."""
    if latest is None:
        limit = MESSAGES_PAGE if limit is None else limit
    with client_errors(f"session {session_id!r}"):
        found = q.transcript(session_id, view, latest=latest, limit=limit, after=after)
    link_next(request, response, found["next"])
    return {**found, "view": view}


@router.get(
    "/sessions/{session_id:sid}/resume",
    dependencies=[Depends(require("read"))],
    responses={404: ERRORS[422] | {"description": "no such session"}},
)
def resume(session_id: str, q: Client = Depends(client)) -> dict[str, Any]:
    """What an agent needs to continue a session: the session, its chain and its model view."""
    with client_errors(f"session {session_id!r}"):
        return q.transcript(session_id, "model")


@router.get(
    "/sessions/{session_id:sid}",
    dependencies=[Depends(require("read"))],
    responses={404: ERRORS[422] | {"description": "no such session"}},
)
def get_session(session_id: str, q: Client = Depends(client)) -> dict[str, Any]:
    """One session with its compression chain (root → tip)."""
    with client_errors(f"session {session_id!r}"):
        found = q.transcript(session_id, latest=1)
    return {"session": found["session"], "chain": found["chain"]}


@router.get(
    "/resume",
    dependencies=[Depends(require("read"))],
    responses={404: ERRORS[422] | {"description": "no session has that key or cwd"}},
)
def resume_by_key(
    q: Client = Depends(client),
    key: str | None = Query(None, description="a conversation key; give exactly one of key, cwd"),
    cwd: str | None = Query(None, description="a working directory; exactly one of key, cwd"),
) -> dict[str, Any]:
    """The session to continue for a conversation ``key`` (or working directory ``cwd``), as
    ``quill.Client.resume``: the tip of the newest compression chain, with its model view
    (``messages``) and the system prompt and tools in force (``context``)."""
    if (key is None) == (cwd is None):
        raise ApiError(422, "invalid-request", "give exactly one of key or cwd")
    with client_errors("session for that key" if key is not None else "session for that cwd"):
        found = q.resume(key=key, cwd=cwd)
        view = q.transcript(found["session_id"], "model")
        found["messages"], found["context"] = view["messages"], view["context"]
    return found


class SessionMatches(BaseModel):
    """One session's share of a search: hits shown on this page and matches counted."""

    session_id: str
    title: str | None
    shown: int
    matches: int


class SearchResult(BaseModel):
    """A page of search hits (``quill.Client.search_results``) and the bounded count."""

    hits: list[dict[str, Any]]
    total: int
    total_exact: bool
    more: bool
    per_session: int | None
    sessions: list[SessionMatches]
    degraded: bool
    next: str | None


@dataclass
class SearchQuery:
    """The query parameters of ``GET /api/v1/search`` besides ``q``: the search parameters
    (``ops.client.search.SearchParams``, checked against them by tests/test_search_params.py)
    with the HTTP API's bounds; ``kind`` (repeatable) is ``kinds``, and ``context`` is off
    unless asked for."""

    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20
    session_id: str | None = None
    role: Role | None = None
    source: str | None = None
    since: EpochSeconds = None
    until: EpochSeconds = None
    substring: bool = False
    audit: bool = False
    order: Literal["newest", "relevance"] = "newest"
    context: bool = False
    kind: Annotated[list[Literal["text", "tool", "reasoning"]] | None, Query()] = None
    per_session: Annotated[int, Query(ge=0, le=1000)] = PER_SESSION
    after: str | None = None

    def params(self) -> dict[str, Any]:
        """The client's keyword arguments (``SearchParams`` names)."""
        out = asdict(self)
        out["kinds"] = out.pop("kind")
        return out


@router.get(
    "/search",
    dependencies=[Depends(require("read"))],
    response_model=SearchResult,
    responses=NEXT_HEADERS,
)
def search(
    request: Request,
    response: Response,
    q: str = Query(max_length=1000),
    c: Client = Depends(client),
    params: SearchQuery = Depends(),
) -> dict[str, Any]:
    """Full-text search (``quill.Client.search_results``, as ``quill search --json``), most
    recently stored first (``order=newest``: the order messages reached the store, not their
    own timestamps), or with ``order=relevance`` ranked over the 1,000 most recently stored
    matches (BM25 on SQLite,
    ``ts_rank`` on PostgreSQL; a query that is not a word query — substring, CJK — is 422
    ``invalid-request``). Any text is a valid query; ``kind`` (repeatable) limits where to
    look; ``context=true`` adds each hit's neighbouring messages. At most ``per_session``
    hits come from one session (0: no cap; ignored with ``session_id``). The answer:
    ``hits``; ``total`` matching messages counted up to 1,000 (exact when ``total_exact``,
    else a lower bound); ``more`` (matches beyond ``hits``); ``per_session``; ``sessions``
    (``session_id``, ``title``, ``shown``, ``matches`` for every session with a counted
    match, best first); ``degraded`` says results come partly from a bounded scan (index
    rebuilding); ``next`` (also the ``X-Next-Cursor`` header) is the ``after`` value of the
    next page of the same search (same ``q`` and filters; null on the last page): pages are
    slices of the first page's result, the same hits in the same order as one page of
    their size, rows stored meanwhile aside. A cursor of another search is 422
    ``bad-cursor``."""
    with client_errors():
        result = c.search_results(q, **params.params())
        found = {**result, "degraded": c.search_health()["degraded"]}
    link_next(request, response, found["next"])
    return found


UsageGroup = Literal["session", "model", "source", "task", "provider", "day"]


@router.get("/usage", dependencies=[Depends(require("read"))], responses=NEXT_HEADERS)
def usage(
    request: Request,
    response: Response,
    q: Client = Depends(client),
    by: list[UsageGroup] = Query([]),
    limit: int = Query(MAX_PAGE, ge=1, le=MAX_PAGE),
    after: str | None = None,
    since: EpochSeconds = None,
    until: EpochSeconds = None,
    session_id: str | None = None,
    source: str | None = None,
    model: str | None = None,
    task: str | None = None,
) -> dict[str, Any]:
    """Token and cost totals (``quill.Client.usage_page`` / ``quill usage --json``):
    ``{"usage": [...], "next": cursor or null}``, one row per group of ``by`` (repeatable),
    each with ``calls``, the token counts, ``cost_usd`` (None when nothing in the group is
    priced) and ``unpriced``, ordered by the group values (null first); no ``by``: one grand
    total. At most ``limit`` groups; ``next`` (also the ``X-Next-Cursor`` header) is the
    ``after`` value of the next page with the same ``by`` and filters (keyset on the group
    values, a null value carried as null); a cursor of another listing, grouping or filter is
    422 ``bad-cursor``."""
    with client_errors():
        found = q.usage_page(
            tuple(by),
            limit=limit,
            after=after,
            since=since,
            until=until,
            session_id=session_id,
            source=source,
            model=model,
            task=task,
        )
    link_next(request, response, found["next"])
    return found
