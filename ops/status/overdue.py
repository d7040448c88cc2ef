"""Overdue work for status, doctor and ``/metrics``: schedules the scheduler did not fire on
time (``overdue_schedules``, from what it published) and jobs whose last success is too old
for their schedule (``overdue_jobs``, from the store's ``job_runs``)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import apsw

from quill.jobs.schedule import ScheduleUnreadableError
from quill.ops.human import ago
from quill.ops.status.schedule import fired_schedules

#: A schedule whose next run time passed this long ago was not fired: no scheduler is running
#: it (the scheduler wakes every second, so two minutes is never normal).
OVERDUE_AFTER_S = 120.0


def overdue_schedules(fleet: dict[str, Any], now: float) -> list[str]:
    """Ids of schedules (as the scheduler last published them) whose next run time is more
    than ``OVERDUE_AFTER_S`` in the past."""
    out = []
    for job in (fleet.get("scheduler") or {}).get("jobs") or []:
        if job.get("next_run") and epoch(job["next_run"]) < now - OVERDUE_AFTER_S:
            out.append(job["id"])
    return out


def epoch(value: Any) -> float:
    """An ISO datetime (UTC when naive) or epoch seconds → epoch seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


#: A job is overdue when its last success is older than this many periods (one period
#: late can be a slow run; two means a run was missed).
OVERDUE_PERIODS = 2


def overdue_jobs(
    cfg: Any, conn: apsw.Connection | None, now: float | None = None
) -> list[dict[str, Any]]:
    """Scheduled (not paused) jobs that are overdue: the last ``ok`` run is older than
    ``OVERDUE_PERIODS`` × the schedule's period, or there never was one although job runs
    have been recorded for longer than that (a brand-new data dir is not overdue).

    ``conn`` is a read connection on the store (None: no store yet, so nothing ran). The
    schedules are those the scheduler fires (``fired_schedules``: on PostgreSQL the store's,
    never a ``schedule.db`` left from SQLite days). Each item: ``job``, ``period_s``,
    ``last_ok`` (epoch s or None), ``late_s``, ``reason``. An unreadable ``schedule.db``
    gives [] here: ``schedule_state`` reports it beside."""
    now = time.time() if now is None else now
    periods: dict[str, float] = {}
    try:
        schedules = fired_schedules(cfg, conn)
    except ScheduleUnreadableError:
        schedules = []  # said by schedule_state, in the same document
    for s in schedules:
        if not s["paused"] and s["period_s"]:
            periods[s["job"]] = min(periods.get(s["job"], s["period_s"]), s["period_s"])
    if not periods:
        return []
    last_ok: dict[str, float] = {}
    since = None
    if conn is not None:
        last_ok = dict(
            conn.execute(
                "SELECT job, max(started_at) FROM job_runs WHERE outcome = 'ok' GROUP BY job"
            )
        )
        since = conn.execute("SELECT min(started_at) FROM job_runs").fetchone()[0]
    out = []
    for job, period in sorted(periods.items()):
        limit = OVERDUE_PERIODS * period
        ok = last_ok.get(job)
        if ok is not None and now - ok > limit:
            out.append(
                {
                    "job": job,
                    "period_s": period,
                    "last_ok": ok,
                    "late_s": round(now - ok - period),
                    "reason": f"last success {ago(now - ok)} ago; runs every {ago(period)}",
                }
            )
        elif ok is None and since is not None and now - since > limit:
            out.append(
                {
                    "job": job,
                    "period_s": period,
                    "last_ok": None,
                    "late_s": round(now - since - period),
                    "reason": f"never succeeded in {ago(now - since)} of recorded runs; "
                    f"runs every {ago(period)}",
                }
            )
    return out
