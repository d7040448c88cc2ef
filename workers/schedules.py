"""Where schedules live and how they are read and edited: the job store (``schedule.db``, or a
cluster's PostgreSQL database), the scheduler over it that fires only while its leader holds
the lease (``make_scheduler``), the catalog's defaults (``install_defaults``), the one-time
naming of numeric weekdays, and the paused scheduler ``quill schedule`` and the dashboard
edit through (``edit_schedules``). Running the schedules is ``workers.scheduler``'s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import URL

from quill.home import Settings
from quill.jobs import catalog, triggers
from quill.jobs import schedule as schedule_db
from quill.jobs.jobstore import HeldJobStore
from quill.store import factory
from quill.workers import FIRE_REF, schedule_damage


def jobstore_url(cfg: Settings) -> Any:
    """Where schedules live: ``schedule.db`` in the data dir, or — on a shared PostgreSQL
    store — the store's database (APScheduler's SQLAlchemy job store through psycopg 3), so
    whichever host leads the cluster sees the same schedules."""
    if factory.capabilities(cfg).cluster:
        return factory.jobstore_url(cfg)
    # A URL object, not an f-string: a data dir with "?", "#" or "%" in its path must not
    # be parsed as URL syntax (it would open a different file).
    return URL.create("sqlite", database=str(cfg.schedule_db))


class _LedScheduler(BackgroundScheduler):
    """A BackgroundScheduler that looks at due jobs only while ``leader.holds()``: its own
    thread fires jobs, so the check sits where it reads them from the shared job store (a
    leader resumed after its lease ran out must neither fire nor advance a schedule)."""

    def __init__(self, leader: Any, **options: Any):
        self._leader = leader
        super().__init__(**options)

    def _process_jobs(self) -> float | None:
        if self._leader is not None and not self._leader.holds():
            return 1.0  # look again in a second; the run loop ends a lost leadership
        return super()._process_jobs()


def _bounded_connect(cfg: Settings) -> Any:
    """SQLAlchemy's ``creator`` for the cluster's job store: a psycopg connection to the
    store's URL as it is (its own options, e.g. search_path) with ``TCP_BOUNDS`` and a bound
    on each round trip (``store.postgres.bounded``, ``[store] answer_timeout_s``), so a
    server or proxy that holds the connection without answering does not hold the
    scheduler's thread either. Raises ``psycopg.OperationalError`` as ``psycopg.connect``."""
    from quill.store.postgres.bounded import BoundedConnection
    from quill.store.postgres.election import TCP_BOUNDS

    url, bound = cfg.store_url, cfg.store_answer_timeout_s

    def connect() -> BoundedConnection:
        conn = BoundedConnection.connect(url, **TCP_BOUNDS)
        conn.answer_timeout = bound
        return conn

    return connect


def make_scheduler(cfg: Settings, leader: Any = None, log: Any = None) -> BackgroundScheduler:
    """A BackgroundScheduler on the job store (``jobstore_url``) with Quill's job defaults
    (not started), which runs jobs only while ``leader`` (a ``Leadership``, or None off a
    cluster) holds its lease. Legacy rows of ``schedule.db`` are migrated first
    (``jobs.schedule.migrate``): APScheduler would drop a job whose callable no longer
    imports, and their frozen paths must not be used. On a cluster the job store's
    connections have bounded network waits (``_bounded_connect``): a query on a dead network
    or to a peer that never answers fails instead of holding the scheduler's thread for
    hours. With ``log`` (the fleet's scheduler) writes the job store cannot take are held and
    retried (``HeldJobStore``, reported to ``log``); without it (edits) they raise."""
    engine_options: dict[str, Any] = {}
    if factory.capabilities(cfg).cluster:
        engine_options = {"creator": _bounded_connect(cfg), "pool_pre_ping": True}
    else:  # schedules in this data dir's schedule.db
        schedule_db.migrate(cfg.schedule_db, FIRE_REF)
        engine_options = {"connect_args": {"timeout": schedule_db.BUSY_S}}
    url = jobstore_url(cfg)
    store = (
        HeldJobStore(url=url, engine_options=engine_options, log=log)
        if log is not None
        else SQLAlchemyJobStore(url=url, engine_options=engine_options)
    )
    sched = _LedScheduler(
        leader,
        jobstores={"default": store},
        job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
        timezone=dt.UTC,
    )
    sched.job_store = store  # the one job store: its held writes go in the status
    return sched


def install_defaults(sched: BackgroundScheduler, cfg: Settings) -> list[str]:
    """Add each catalog job of this store's backend (``JobSpec.backend``) that has no
    schedule yet, and bring a schedule that still has an earlier version's default trigger
    (``catalog.PREVIOUS_DEFAULTS``) to today's default; returns the names added or upgraded."""
    added = []
    backend = factory.capabilities(cfg).kind
    for spec in catalog.JOBS:
        if spec.backend not in (backend, "any"):
            continue  # e.g. VACUUM or WAL checkpoints on a PostgreSQL store
        job = sched.get_job(spec.name) if spec.trigger is not None else None
        if job is not None and str(job.trigger) in catalog.PREVIOUS_DEFAULTS.get(spec.name, ()):
            paused = job.next_run_time is None
            sched.reschedule_job(spec.name, trigger=spec.trigger, **spec.trigger_args)
            if paused:
                sched.pause_job(spec.name)
            added.append(spec.name)
            continue
        if spec.trigger is not None and job is None:
            sched.add_job(
                trigger=spec.trigger,
                id=spec.name,
                name=spec.name,
                **schedule_db.fire_args(spec.name, FIRE_REF),
                **spec.trigger_args,
            )
            added.append(spec.name)
    return added


def name_weekdays(sched: BackgroundScheduler) -> list[dict[str, str]]:
    """Store every cron schedule whose day of the week is a number with that day named as it
    has always fired (``triggers.with_day_names``: APScheduler 3's ``0`` is Monday), once:
    a renamed schedule holds no number, so a later start renames nothing. Quill's ``--cron``
    used to store crontab's numbers unchanged (``30 4 * * 0`` fired on Mondays); since it
    means crontab's (``0``: Sunday) a stored number read in either numbering could move the
    schedule a day. The next run time is kept (same fire times). Works through the job store
    itself, so a ``schedule.db`` and a cluster's PostgreSQL schedules migrate alike. Returns
    ``[{id, stored, now}]`` (``stored``: APScheduler's form of the old trigger; ``now``: the
    words of the new one) for the caller to tell the operator."""
    out = []
    for job in sched.get_jobs():
        named = triggers.with_day_names(job.trigger)
        if named is None:
            continue
        sched.modify_job(job.id, trigger=named)
        out.append({"id": job.id, "stored": str(job.trigger), "now": triggers.describe(named)})
    return out


@contextlib.contextmanager
def edit_schedules(cfg: Settings) -> Iterator[BackgroundScheduler]:
    """A paused scheduler on ``schedule.db`` for editing schedules; it never runs a job.
    Numeric days of the week are named first (``name_weekdays``; what was renamed is in
    ``sched.weekdays_named``).

    APScheduler 3 processes due jobs once when a *paused* BackgroundScheduler shuts down (its
    loop sees STOPPED, not PAUSED); removing the job store first makes the shutdown a no-op,
    so an edit can never consume a due run that belongs to the fleet's scheduler. Raises
    ``ScheduleUnreadableError`` when ``schedule.db`` cannot be read or written (damaged,
    locked, full), whether on opening it or within the ``with`` body.
    """
    cfg.ensure_dirs()
    with schedule_damage.guarded(cfg):
        sched = make_scheduler(cfg)
        sched.start(paused=True)
        try:
            install_defaults(sched, cfg)
            sched.weekdays_named = name_weekdays(sched)  # the editor tells the operator
            yield sched
        finally:
            sched.remove_jobstore("default", shutdown=True)
            sched.shutdown(wait=False)


def describe(sched: BackgroundScheduler) -> list[dict[str, Any]]:
    """Each scheduled job: id, job name, trigger text, next run time (ISO, None when paused)."""
    return describe_jobs(sched.get_jobs())


def describe_jobs(jobs: list[Any]) -> list[dict[str, Any]]:
    """``describe`` of ``jobs`` (APScheduler jobs, as ``get_jobs`` returns them)."""
    return [
        {
            "id": j.id,
            "job": j.name,
            "trigger": triggers.describe(j.trigger),
            **triggers.as_json(j.trigger),
            "next_run": j.next_run_time.isoformat() if j.next_run_time else None,
        }
        for j in jobs
    ]
