"""Read helpers shared by the JSON API and the dashboard, so both show the same thing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from quill.jobs import catalog
from quill.ops.service.errors import ApiError
from quill.ops.status import health, overdue
from quill.ops.status.guard import read_store
from quill.store.errors import BadCursorError, StoreError
from quill.store.read.reader import Reader

T = TypeVar("T")


def guard(read: Callable[[], T]) -> T:
    """Run a store read; store failures become 503 ``store-unavailable``, bad arguments 422
    (a page cursor of another listing: ``bad-cursor``)."""
    try:
        return read()
    except BadCursorError as exc:
        raise ApiError(422, "bad-cursor", str(exc)) from None
    except StoreError as exc:
        raise ApiError(
            503, "store-unavailable", f"the store cannot answer ({type(exc).__name__})"
        ) from None
    except ValueError as exc:
        raise ApiError(422, "invalid-request", str(exc)) from None


def session_or_404(r: Reader, session_id: str) -> dict[str, Any]:
    """``{"session": row, "chain": root→tip ids}``; 404 ``not-found`` if there is no such
    session."""
    with r.snapshot():
        session = guard(lambda: r.get_session(session_id))
        if session is None:
            raise ApiError(404, "not-found", f"no session {session_id!r}")
        return {"session": session, "chain": guard(lambda: r.compression_chain(session_id))}


def jobs(cfg: Any) -> list[dict[str, Any]]:
    """Every catalog job with its schedule(s), next run, last run and ``overdue`` flag (a
    schedule whose next run time passed ``overdue.OVERDUE_AFTER_S`` ago: no scheduler fired it),
    and whether a user may run it now on this store: ``runnable`` (bool) and, when not,
    ``not_runnable`` (why: an internal job, or one that maintains the other kind of store;
    ``catalog.runnable``, the check ``POST /api/v1/jobs/{name}/run`` makes). When the schedule
    cannot be read (a damaged ``schedule.db``) ``schedules`` is None and ``schedule_error``
    says why; else ``schedule_error`` is None."""
    # No store yet (or unreadable): jobs still list, without history.
    found = read_store(cfg, lambda r: r.last_job_runs([spec.name for spec in catalog.JOBS]))
    last: dict[str, dict[str, Any]] = found.value or {}
    schedules, unreadable = _schedules(cfg)
    by_job: dict[str, list[dict[str, Any]]] = {}
    for s in schedules:
        by_job.setdefault(s.get("job") or s["id"], []).append(s)
    now = time.time()
    rows = []
    for spec in catalog.JOBS:
        scheds = by_job.get(spec.name, [])
        next_runs = [overdue.epoch(s["next_run"]) for s in scheds if s.get("next_run")]
        due = min(next_runs) if next_runs else None
        try:
            catalog.runnable(spec.name, cfg)
            why_not = None
        except KeyError:
            why_not = "internal: run by the fleet itself"
        except catalog.WrongStoreError as exc:
            why_not = str(exc)
        rows.append(
            {
                "name": spec.name,
                "runs_on": "writer" if spec.kind == "store" else "job worker",
                "description": spec.description,
                "schedules": None
                if unreadable
                else [
                    {"id": s["id"], "trigger": s["trigger"], "next_run": s.get("next_run")}
                    for s in scheds
                ],
                "schedule_error": unreadable,
                "next_run": due,
                "overdue": due is not None and due < now - overdue.OVERDUE_AFTER_S,
                "last_run": last.get(spec.name),
                "runnable": why_not is None,
                "not_runnable": why_not,
            }
        )
    return rows


def _schedules(cfg: Any) -> tuple[list[dict[str, Any]], str | None]:
    """``(schedules, None)``: what the running scheduler last published (at most a second
    old), else ``schedule.db`` read through a paused scheduler; ``([], why)`` when the schedule
    cannot be read (a damaged ``schedule.db``, which a running scheduler reports too, or one
    locked since the scheduler started: it has read none yet)."""
    scheduler = health.fleet_state(cfg).get("scheduler") or {}
    if scheduler.get("alive") and scheduler.get("schedule_damaged"):
        return [], scheduler["schedule_damaged"]
    if scheduler.get("alive") and scheduler.get("schedule_unavailable") and not scheduler["jobs"]:
        return [], scheduler["schedule_unavailable"]  # locked since it started: none read yet
    if scheduler.get("alive") and "jobs" in scheduler:
        return scheduler["jobs"], None
    # Imported here: APScheduler and SQLAlchemy cost start-up time and no request needs them
    # while a scheduler runs.
    from quill.jobs.schedule import ScheduleUnreadableError
    from quill.workers.schedules import describe, edit_schedules

    try:
        with edit_schedules(cfg) as sched:
            return describe(sched), None
    except ScheduleUnreadableError as exc:
        return [], str(exc)


def store_behind(cfg: Any) -> dict[str, Any] | None:
    """What a dashboard page must say above its content when the store does not show
    everything accepted: ``{"halted": bool, "running": bool, "pending_bytes": int, "lag_s":
    float, "detail": str}`` when the writer is halted or spool records are not applied yet
    (the figures of ``quill status``: ``spool.pending_bytes``, ``spool.lag_s``, the halt);
    None when the store is current. Never raises for a missing or unreadable store: then the
    store is behind everything in the spool."""
    from quill.spool import Position
    from quill.spool.reader import lag_seconds
    from quill.spool.reader import stats as spool_stats

    fleet = health.fleet_state(cfg)
    # No store (yet) or an unreadable one: everything in the spool is pending.
    found = read_store(cfg, lambda r: r.figures().get("cursor"))
    cursor = Position.parse(found.value) if found.ok and found.value else None
    pending = spool_stats(cfg.spool_dir, cursor)["pending_bytes"]
    halt = fleet.get("halt")
    if not pending and not halt:
        return None
    lag = round(lag_seconds(cfg.spool_dir, cursor, time.time()), 1) if pending else 0.0
    if halt:
        detail = f"The writer is halted ({halt.get('cause')}): run {halt.get('next')}"
    elif not fleet["running"]:
        detail = "The fleet is not running (start it with `quill run`)"
    else:
        detail = "The writer is catching up"
    return {
        "halted": bool(halt),
        "running": fleet["running"],
        "pending_bytes": pending,
        "lag_s": lag,
        "detail": detail,
    }
