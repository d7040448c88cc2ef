"""The schedule's state as status, doctor and ``/metrics`` report it: what a read of
``schedule.db`` finds now, joined with what the live scheduler published about its own reads
and writes (``workers.scheduler``), so one word says whether schedules fire and one figure
says for how long the scheduler has been waiting."""

from __future__ import annotations

import time
from typing import Any

from quill.jobs.schedule import (
    STATUS_BUSY_S,
    TABLE,
    ScheduleUnreadableError,
    describe_rows,
    read_schedules,
)
from quill.store.factory import capabilities
from quill.workers import FIRE_REF

#: Every value of ``state``, for the ``quill_schedule_state`` gauge (one series each).
STATES = ("ok", "damaged", "locked", "unavailable", "unwritable", "unknown")


def schedule_state(cfg: Any, scheduler: dict[str, Any] | None = None) -> dict[str, Any]:
    """The persisted schedule: ``readable`` (True; False with ``error`` when ``schedule.db``
    is damaged, locked past ``STATUS_BUSY_S`` or unreadable; None for a shared PostgreSQL job
    store, which only the scheduler reads), ``state`` (one of ``STATES``) and
    ``waiting_s``: seconds since the live scheduler (``scheduler``: its published status
    with ``alive``) stopped reading or writing its schedule (damaged, locked, unavailable,
    unwritable), 0 while it is not waiting, None when no scheduler is alive. The scheduler's
    own report wins over this read when the read answers (a lock the read slipped past, a
    full disk that takes reads but not writes). Never raises."""
    live = scheduler if scheduler and scheduler.get("alive") else None
    out: dict[str, Any] = {"readable": None, "state": "unknown", "error": None}
    if capabilities(cfg).local_file:
        try:
            read_schedules(cfg.schedule_db, FIRE_REF, busy_s=STATUS_BUSY_S)
            out.update(readable=True, state="ok")
        except ScheduleUnreadableError as exc:
            out.update(readable=False, state=exc.state, error=str(exc))
    since = None
    if live is not None:
        since = (
            live.get("schedule_damaged_since")
            or live.get("schedule_unavailable_since")
            or live.get("schedule_unwritable_since")
        )
        if out["state"] in ("ok", "unknown"):
            if live.get("schedule_damaged"):
                out["state"], out["error"] = "damaged", live["schedule_damaged"]
            elif live.get("schedule_unavailable"):
                state = "locked" if live.get("schedule_locked") else "unavailable"
                out["state"], out["error"] = state, live["schedule_unavailable"]
            elif live.get("schedule_error"):
                out["state"], out["error"] = "unwritable", live["schedule_error"]
    out["waiting_s"] = (
        None if live is None else round(max(0.0, time.time() - since), 1) if since else 0.0
    )
    return out


def fired_schedules(cfg: Any, conn: Any) -> list[dict[str, Any]]:
    """The schedules the fleet's scheduler fires, as ``read_schedules`` describes them: the
    data dir's ``schedule.db`` on SQLite; on a shared PostgreSQL store its ``TABLE``, read on
    ``conn`` (the store's read connection; [] without one, or before a scheduler created
    the table). A ``schedule.db`` left in a data dir switched to PostgreSQL is never read:
    nothing fires from it. Raises ``ScheduleUnreadableError`` (``schedule.db`` unreadable)
    and the store's error tree."""
    if capabilities(cfg).local_file:
        return read_schedules(cfg.schedule_db, FIRE_REF, busy_s=STATUS_BUSY_S)
    if conn is None or conn.execute("SELECT to_regclass(?)", (TABLE,)).fetchone()[0] is None:
        return []
    return describe_rows(conn.execute(f"SELECT id, job_state FROM {TABLE}").fetchall(), FIRE_REF)
