"""The JSON API (``/api/v1``): the same operations as the CLI and ``quill.Client``.

Appends take the CLI's path exactly: ``quill.store.apply.precheck`` on every op first (a batch
the writer would certainly quarantine is refused with 422 and its ``reason``, and nothing of the
request is appended), then ``quill.Client.submit`` per op (the spool append), which returns only
after the record is fsync'd — so a 202 carries the batch id and spool position of a durable
record. Reads go through ``quill.Client`` (the same results as the library and the CLI's
``--json``); the rest (usage, job history) through ``quill.store.read.reader.Reader``, one
connection per request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.convertors import PathConvertor, register_url_convertor

from quill.jobs import catalog
from quill.jobs.queues import build_for
from quill.ops.client.client import Client
from quill.ops.client.errors import (
    InvalidInputError,
    NotFoundError,
    QuillError,
)
from quill.ops.client.errors import (
    SpoolFullError as QuillSpoolFull,
)
from quill.ops.client.stores import open_reader
from quill.ops.service import views
from quill.ops.service.auth import require
from quill.ops.service.errors import ERROR_SCHEMA, ApiError
from quill.ops.status import health
from quill.spool import OP_KINDS
from quill.store.apply.precheck import precheck
from quill.store.errors import CantOpenError, InvalidOpError, StoreError
from quill.store.read.reader import Reader

_ERRORS = {
    code: {"description": desc, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for code, desc in (
        (401, "no or bad token"),
        (403, "token lacks the scope"),
        (422, "invalid request"),
        (503, "store or spool unavailable"),
    )
}


class _SessionIdConvertor(PathConvertor):
    """``{session_id:sid}``: any text, ``/`` and line breaks included. Starlette's ``path``
    convertor is ``.*``, which stops at a newline, so an id holding one would match no route (an
    undocumented 404) or, ending in one, would be cut to the text before
    it; the id rule (``session_id_problem``, 422) then judges the whole id."""

    regex = "(?s:.*)"


register_url_convertor("sid", _SessionIdConvertor())

router = APIRouter(prefix="/api/v1", responses=_ERRORS)
BATCH_ID = r"^[0-9A-Za-z][0-9A-Za-z._:-]{0,127}$"


OpKind = Literal[tuple(sorted(OP_KINDS))]  # type: ignore[valid-type]  # the spool's op kinds


class OpIn(BaseModel):
    """One spool op: ``op`` is an op kind (``messages.append``, ``session.create`` …)."""

    op: OpKind
    data: dict[str, Any]
    batch: str | None = Field(
        default=None,
        pattern=BATCH_ID,
        description="idempotency key: a batch id is applied once (retry with the same one)",
    )


class OpsIn(BaseModel):
    ops: list[OpIn] = Field(min_length=1)


class MessagesIn(BaseModel):
    messages: list[dict[str, Any]] = Field(min_length=1)
    batch: str | None = Field(default=None, pattern=BATCH_ID)


class AckOut(BaseModel):
    op: str
    batch: str
    position: str = Field(description="spool position SEGMENT:OFFSET of the fsync'd record")


class AcksOut(BaseModel):
    acks: list[AckOut]


class JobQueued(BaseModel):
    job: str
    queued_at: float


@contextlib.contextmanager
def client_errors(what: str = "") -> Iterator[None]:
    """``quill.Client``'s public errors as shaped HTTP errors (details name no paths)."""
    try:
        yield
    except InvalidInputError as exc:
        raise ApiError(
            422, exc.reason if exc.reason != "usage" else "invalid-request", str(exc)
        ) from None
    except NotFoundError:
        raise ApiError(404, "not-found", f"no {what}" if what else "not found") from None
    except QuillSpoolFull:
        raise ApiError(
            507, "spool-full", "the spool's disk is full; retry later with the same batch ids"
        ) from None
    except QuillError as exc:  # busy, damaged or unreadable store
        raise ApiError(
            503, "store-unavailable", f"{type(exc).__name__}: {exc.default_hint}"
        ) from None


def _append(request: Request, ops: list[tuple[str, Any, str | None]]) -> AcksOut:
    app = request.app.state
    messages = sum(
        len(d.get("messages") or [])
        for _, d, _ in ops
        if isinstance(d, dict) and isinstance(d.get("messages"), list)
    )
    if messages > app.cfg.http_max_batch_messages:
        raise ApiError(
            413,
            "batch-too-large",
            f"{messages} messages in one request; the limit is "
            f"{app.cfg.http_max_batch_messages} ([http] max_batch_messages)",
        )
    # Every op is checked before any is appended, so a refused request appends nothing.
    for index, (op, data, _) in enumerate(ops):
        try:
            precheck(op, data)
        except InvalidOpError as exc:
            raise ApiError(
                422,
                exc.reason,
                f"op {index}: {exc.detail}; nothing was appended",
                extra={"op_index": index},
            ) from None
    acks: list[AckOut] = []
    try:
        for op, data, batch in ops:
            ack = app.client.submit(op, data, batch_id=batch)  # returns once the record is fsync'd
            acks.append(AckOut(op=op, batch=ack.batch_id, position=str(ack.position)))
    except QuillSpoolFull:
        raise ApiError(
            507,
            "spool-full",
            "the spool's disk is full; retry later with the same batch ids",
            extra={"acks": [a.model_dump() for a in acks]},
        ) from None
    except QuillError as exc:
        app.log.error("http.spool_error", error_type=type(exc).__name__)
        raise ApiError(
            503,
            "spool-unavailable",
            "the spool refused the append; retry with the same batch ids",
            extra={"acks": [a.model_dump() for a in acks]},
        ) from None
    return AcksOut(acks=acks)


@router.post(
    "/ops",
    status_code=202,
    response_model=AcksOut,
    dependencies=[Depends(require("write"))],
    responses={413: _ERRORS[422] | {"description": "body or batch too large"}},
)
def append_ops(body: OpsIn, request: Request) -> AcksOut:
    """Append ops, in order. 202 once every record is fsync'd into the spool; the writer applies
    them shortly after (``GET /api/v1/sessions/{id}`` shows them)."""
    return _append(request, [(o.op, o.data, o.batch) for o in body.ops])


@router.post(
    "/sessions/{session_id:sid}/messages",
    status_code=202,
    response_model=AcksOut,
    dependencies=[Depends(require("write"))],
    responses={413: _ERRORS[422] | {"description": "body or batch too large"}},
)
def append_messages(session_id: str, body: MessagesIn, request: Request) -> AcksOut:
    """Append messages to a session (one ``messages.append`` op; the session is created if new)."""
    return _append(
        request,
        [("messages.append", {"session_id": session_id, "messages": body.messages}, body.batch)],
    )


def reader(request: Request) -> Iterator[Reader | None]:
    """A read-only ``Reader`` for this request, or None before the store exists."""
    try:
        r = open_reader(request.app.state.cfg)
    except CantOpenError:
        yield None
        return
    except StoreError as exc:
        raise ApiError(
            503, "store-unavailable", f"the store cannot be opened ({type(exc).__name__})"
        ) from None
    try:
        yield r
    finally:
        r.close()


def client(request: Request) -> Client:
    return request.app.state.client


@router.get("/sessions", dependencies=[Depends(require("read"))])
def list_sessions(
    q: Client = Depends(client),
    source: str | None = None,
    limit: int = Query(50, ge=1, le=1000),
    include_hidden: bool = False,
    title: str | None = None,
    since: float | None = None,
    until: float | None = None,
    archived: bool | None = None,
    pinned: bool | None = None,
    hidden: bool | None = None,
    lineage: Literal["tips", "all"] = "tips",
) -> list[dict[str, Any]]:
    """Sessions, most recently active first (``since``/``until`` in epoch seconds) — the same
    rows as ``quill.Client.sessions`` and ``quill sessions list --json``."""
    with client_errors():
        return q.sessions(
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


@router.get(
    "/sessions/{session_id:sid}/messages",
    dependencies=[Depends(require("read"))],
    responses={404: _ERRORS[422] | {"description": "no such session"}},
)
def get_messages(
    session_id: str,
    q: Client = Depends(client),
    view: Literal["display", "model", "audit"] = "display",
    latest: int | None = Query(None, ge=1, le=1_000_000),
) -> dict[str, Any]:
    """A transcript in one view: ``display`` (what a UI shows), ``model`` (what the model is
    fed), ``audit`` (every row, rewound and superseded included); ``latest``: only the last N.
    The same document as ``quill.Client.transcript`` / ``quill sessions show --json``."""
    with client_errors(f"session {session_id!r}"):
        found = q.transcript(session_id, view, latest=latest)
    return {**found, "view": view}


@router.get(
    "/sessions/{session_id:sid}/resume",
    dependencies=[Depends(require("read"))],
    responses={404: _ERRORS[422] | {"description": "no such session"}},
)
def resume(session_id: str, q: Client = Depends(client)) -> dict[str, Any]:
    """What an agent needs to continue a session: the session, its chain and its model view."""
    with client_errors(f"session {session_id!r}"):
        return q.transcript(session_id, "model")


@router.get(
    "/sessions/{session_id:sid}",
    dependencies=[Depends(require("read"))],
    responses={404: _ERRORS[422] | {"description": "no such session"}},
)
def get_session(session_id: str, q: Client = Depends(client)) -> dict[str, Any]:
    """One session with its compression chain (root → tip)."""
    with client_errors(f"session {session_id!r}"):
        found = q.transcript(session_id, latest=1)
    return {"session": found["session"], "chain": found["chain"]}


@router.get(
    "/resume",
    dependencies=[Depends(require("read"))],
    responses={404: _ERRORS[422] | {"description": "no session has that key or cwd"}},
)
def resume_by_key(
    q: Client = Depends(client), key: str | None = None, cwd: str | None = None
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


@router.get("/search", dependencies=[Depends(require("read"))])
def search(
    q: str = Query(max_length=1000),
    c: Client = Depends(client),
    limit: int = Query(20, ge=1, le=1000),
    session_id: str | None = None,
    role: str | None = None,
    source: str | None = None,
    since: float | None = None,
    until: float | None = None,
    substring: bool = False,
    audit: bool = False,
    order: Literal["newest", "relevance"] = "newest",
    context: bool = False,
    kind: list[Literal["text", "tool", "reasoning"]] | None = Query(None),
) -> dict[str, Any]:
    """Full-text search (``quill.Client.search`` hits), newest first, or with
    ``order=relevance`` ranked over the newest 1,000 matches (BM25 on SQLite, ``ts_rank`` on
    PostgreSQL; a query that is not a word query — substring, CJK — is 422 ``invalid-request``).
    Any text is a valid query; ``kind`` (repeatable) limits where to look; ``context=true`` adds
    each hit's neighbouring messages; ``degraded`` says results come partly from a bounded scan
    (index rebuilding)."""
    with client_errors():
        hits = c.search(
            q,
            limit=limit,
            session_id=session_id,
            role=role,
            source=source,
            since=since,
            until=until,
            substring=substring,
            audit=audit,
            context=context,
            kinds=kind,
            order=order,
        )
        return {"hits": hits, "degraded": c.search_health()["degraded"]}


UsageGroup = Literal["session", "model", "source", "task", "provider", "day"]


@router.get("/usage", dependencies=[Depends(require("read"))])
def usage(
    q: Client = Depends(client),
    by: list[UsageGroup] = Query([]),
    since: float | None = None,
    until: float | None = None,
    session_id: str | None = None,
    source: str | None = None,
    model: str | None = None,
    task: str | None = None,
) -> list[dict[str, Any]]:
    """Token and cost totals (``quill.Client.usage`` / ``quill usage --json``): one row per
    group of ``by`` (repeatable), each with ``calls``, the token counts, ``cost_usd`` (None when
    nothing in the group is priced) and ``unpriced``; no ``by``: one grand total."""
    with client_errors():
        return q.usage(
            tuple(by),
            since=since,
            until=until,
            session_id=session_id,
            source=source,
            model=model,
            task=task,
        )


@router.get("/status", dependencies=[Depends(require("read"))])
def status(request: Request) -> dict[str, Any]:
    """The ``quill status --json`` document (fleet, store, spool, disk, metrics)."""
    return health.collect(request.app.state.cfg)


@router.get("/jobs", dependencies=[Depends(require("read"))])
def jobs(request: Request) -> list[dict[str, Any]]:
    """Every job: where it runs, its schedule and next run, its last run, whether overdue."""
    return views.jobs(request.app.state.cfg)


@router.get("/jobs/history", dependencies=[Depends(require("read"))])
def job_history(
    r: Reader | None = Depends(reader),
    job: str | None = None,
    limit: int = Query(20, ge=1, le=1000),
) -> list[dict[str, Any]]:
    """Past job runs, newest first."""
    return [] if r is None else views.guard(lambda: r.job_runs(job=job, limit=limit))


@router.post(
    "/jobs/{name}/run",
    status_code=202,
    response_model=JobQueued,
    dependencies=[Depends(require("admin"))],
    responses={
        404: _ERRORS[422] | {"description": "no such job"},
        409: _ERRORS[422] | {"description": "the job maintains the other kind of store"},
    },
)
def run_job(name: str, request: Request) -> JobQueued:
    """Queue a job to run now on the running fleet (``GET /api/v1/jobs/history`` shows the run)."""
    return JobQueued(**queue_job(request, name))


def queue_job(request: Request, name: str) -> dict[str, Any]:
    """Enqueue ``name`` with parameters from the current config; raises 404 for an unknown
    or internal job, 409 for a job that maintains the other kind of store (``catalog.runnable``)."""
    cfg = request.app.state.cfg
    try:
        catalog.runnable(name, cfg)
    except KeyError:
        raise ApiError(404, "not-found", f"no job {name!r}; see GET /api/v1/jobs") from None
    except catalog.WrongStoreError as exc:
        raise ApiError(409, "wrong-store", str(exc)) from None
    queued_at = time.time()
    build_for(cfg).enqueue(name, **catalog.BY_NAME[name].params(cfg))
    request.app.state.log.info(
        "http.job_queued", job=name, token_id=request.state.principal.token_id
    )
    return {"job": name, "queued_at": queued_at}
