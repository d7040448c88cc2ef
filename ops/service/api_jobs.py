"""The fleet routes of the JSON API: ``/api/v1/status`` (``quill status --json``), the jobs,
their run history (through ``quill.store.read.reader.Reader``, one connection per request)
and queueing a run (``queue_job``, also used by the dashboard).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from quill.jobs import catalog
from quill.jobs.errors import QueueOverloadedError, QueueUnavailableError
from quill.ops.service import views
from quill.ops.service.api_common import ERRORS, MAX_PAGE, NEXT_HEADERS, link_next, reader
from quill.ops.service.auth import require
from quill.ops.service.errors import ApiError, overloaded
from quill.ops.status import health
from quill.store import paging
from quill.store.read.reader import Reader

router = APIRouter()


class JobQueued(BaseModel):
    job: str
    queued_at: float


@router.get("/status", dependencies=[Depends(require("read"))])
def status(request: Request) -> dict[str, Any]:
    """The ``quill status --json`` document (fleet, store, spool, disk, metrics)."""
    return health.collect(request.app.state.cfg)


@router.get("/jobs", dependencies=[Depends(require("read"))], responses=NEXT_HEADERS)
def jobs(
    request: Request,
    response: Response,
    limit: int = Query(100, ge=1, le=MAX_PAGE),
    after: str | None = None,
) -> dict[str, Any]:
    """Every job by name: where it runs, its schedule and next run, its last run, whether
    overdue: ``{"jobs": [...], "next": cursor or null}``. At most ``limit``; ``next`` (also the
    ``X-Next-Cursor`` header) is the ``after`` value of the next page (keyset on the name); a
    cursor of another listing is 422 ``bad-cursor``."""
    start = views.guard(lambda: paging.decode(after, "jobs", (str,))) if after is not None else None
    rows = sorted(views.jobs(request.app.state.cfg), key=lambda r: r["name"])
    page, cursor = paging.page_rows(rows, lambda r: (r["name"],), limit, start, "jobs")
    link_next(request, response, cursor)
    return {"jobs": page, "next": cursor}


@router.get("/jobs/history", dependencies=[Depends(require("read"))], responses=NEXT_HEADERS)
def job_history(
    request: Request,
    response: Response,
    r: Reader | None = Depends(reader),
    job: str | None = None,
    limit: int = Query(20, ge=1, le=MAX_PAGE),
    after: str | None = None,
) -> dict[str, Any]:
    """Past job runs, newest first, as ``quill jobs history --json``: ``{"runs": [...],
    "next": cursor or null}``. At most ``limit``; ``next`` (also the ``X-Next-Cursor``
    header) is the ``after`` value of the next page with the same ``job`` (keyset on the
    run id: runs recorded meanwhile are neither repeated nor skipped); a cursor of another
    listing or job is 422 ``bad-cursor``."""
    if after is not None:  # refused before the store is read (or found missing)
        views.guard(lambda: paging.decode(after, "job_runs", (int,), paging.scope_of(job)))
    if r is None:
        return {"runs": [], "next": None}
    found = views.guard(lambda: r.job_runs_page(job=job, limit=limit, after=after))
    link_next(request, response, found["next"])
    return found


@router.post(
    "/jobs/{name}/run",
    status_code=202,
    response_model=JobQueued,
    dependencies=[Depends(require("admin"))],
    responses={
        404: ERRORS[422] | {"description": "no such job"},
        409: ERRORS[422] | {"description": "the job maintains the other kind of store"},
    },
)
def run_job(name: str, request: Request) -> JobQueued:
    """Queue a job to run now on the running fleet (``GET /api/v1/jobs/history`` shows the run)."""
    return JobQueued(**queue_job(request, name))


def queue_job(request: Request, name: str) -> dict[str, Any]:
    """Enqueue ``name`` with parameters from the current config; raises 404 for an unknown
    or internal job, 409 for a job that maintains the other kind of store (``catalog.runnable``),
    503 when the job queue is unreachable (nothing queued)."""
    cfg = request.app.state.cfg
    try:
        catalog.runnable(name, cfg)
    except KeyError:
        raise ApiError(404, "not-found", f"no job {name!r}; see GET /api/v1/jobs") from None
    except catalog.WrongStoreError as exc:
        raise ApiError(409, "wrong-store", str(exc)) from None
    from quill.jobs.queues import build_for  # huey (and redis) only when a job is queued

    queued_at = time.time()
    try:
        build_for(cfg).enqueue(name, **catalog.BY_NAME[name].params(cfg))
    except QueueOverloadedError:  # no descriptor for queue.db or a socket: come back soon
        raise overloaded("the job queue") from None
    except QueueUnavailableError as exc:  # nothing was queued; the spool needs no queue
        raise ApiError(503, "queue-unavailable", str(exc)) from None
    request.app.state.log.info(
        "http.job_queued", job=name, token_id=request.state.principal.token_id
    )
    return {"job": name, "queued_at": queued_at}
