"""The scheduler worker: APScheduler 3 decides *when*; huey queues carry the work.

Exactly one per data dir (the scheduler lease). Schedules persist in ``schedule.db``
(SQLAlchemyJobStore) and hold intent only (job name + trigger, ``jobs.schedule``); the
catalog's defaults are added only when absent, so an operator's changes survive restarts.
Misfire policy: ``coalesce=True`` (runs missed while the fleet was down collapse into one)
and no grace limit (``misfire_grace_time=None``): a missed window, however long ago, runs
once at the next start — a laptop asleep through the nightly ``quick_check`` still gets it
(APScheduler 3 docs: ``None`` means "run no matter how late").

A run that fires while the job queue is unreachable (Redis down) is held, not dropped: the
scheduler keeps it (``unfired`` in its status, one log line per outage through
``jobs.outage.QueueOutage``) and queues it as soon as the queue answers. Held runs live in
the scheduler's memory: a scheduler stopped before the queue is back loses them, and the job
runs at its next scheduled time.

A schedule's next run time that ``schedule.db`` cannot take (a full disk) is held in memory
and written once it can (``jobs.jobstore.HeldJobStore``): the scheduler goes on firing on
time, publishes what is held and why (``schedule_error``, ``schedule_unwritable_since``,
``schedule_held``) and logs it at most every few seconds. Edits from ``quill schedule`` are
never held: they fail with the error.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED
from apscheduler.schedulers.background import BackgroundScheduler

from quill.home import RunDir, Settings
from quill.jobs import schedule as schedule_db
from quill.jobs.errors import QueueUnavailableError
from quill.jobs.outage import QueueOutage
from quill.jobs.queues import fire_scheduled
from quill.store import factory
from quill.store.errors import TransientError
from quill.store.lease import Lease
from quill.workers import schedule_damage
from quill.workers.schedules import (
    describe_jobs,
    install_defaults,
    make_scheduler,
    name_weekdays,
)
from quill.workers.standby import Standby, store_unreachable

#: The settings of the data dir whose schedules this process runs (``serve``). APScheduler
#: calls ``fire`` with the job name only, so it finds them here, not in the persisted row.
_serving: Settings | None = None
#: Runs fired while the queue was unreachable, oldest first, and that outage (``serve``).
_unfired: list[str] = []
_outage: QueueOutage | None = None
_held = threading.Lock()  # ``fire`` runs on APScheduler's threads, ``refire`` on ours


def serve(settings: Settings, log: Any = None) -> None:
    """Make ``fire`` queue on ``settings``' data dir: what ``run`` does before it starts
    the scheduler (one data dir per process). ``log`` gets the queue-outage lines."""
    global _serving, _outage
    _serving = settings
    _outage = QueueOutage("scheduler", log) if log is not None else None
    _unfired.clear()


def refire() -> list[str]:
    """Queue the runs held while the queue was unreachable, oldest first, when the outage's
    backoff allows a try; returns those still held. Never raises for the queue."""
    with _held:
        if not _unfired or (_outage is not None and not _outage.ready()):
            return list(_unfired)
        while _unfired:
            try:
                fire_scheduled(_serving, _unfired[0])
            except QueueUnavailableError as exc:
                if _outage is not None:
                    _outage.failed(exc)
                break
            _unfired.pop(0)
            if _outage is not None:
                _outage.answered()
        return list(_unfired)


def fire(job: str) -> None:
    """What every schedule calls (``FIRE_REF``): queue ``job`` on the queues of the data dir
    this process serves (``serve``) — ``queue.db``, or the shared Redis of ``[queue] url``
    with this host's id (``build_for``). Nothing about paths, queues or parameters is stored
    with the schedule; the job's parameters are resolved from the settings when it runs. A
    per-host job on a cluster goes on every host's store queue (``jobs.queues.fire_scheduled``).
    While the queue (or, for such a fan-out, the store) is unreachable the run is held and
    queued once it answers (``refire``; a store still unreachable then makes the leader
    stand by, and the run stays held); with no scheduler's log to tell (``serve`` without
    one) ``QueueUnavailableError`` or ``TransientError`` is raised instead. Raises
    RuntimeError in a process that serves no data dir."""
    if _serving is None:
        raise RuntimeError(f"no scheduler runs in this process: cannot fire {job!r}")
    with _held:
        if job in _unfired:
            return  # coalesced with the run already held, as APScheduler coalesces
        try:
            fire_scheduled(_serving, job)
            if _outage is not None:
                _outage.answered()
        except QueueUnavailableError as exc:
            if _outage is None:
                raise
            _outage.failed(exc)
            _unfired.append(job)
        except TransientError as exc:  # a per-host job's fan-out reads the shared store
            if _outage is None:
                raise
            _outage.log.error("scheduler.fire_held", job=job, error=str(exc))
            _unfired.append(job)


def _status(
    jobs: list[dict[str, Any]], due: list[Any], held: list[str], sched: Any, leader: Any
) -> dict[str, Any]:
    """The running scheduler's status: ``jobs`` (``_describe``), the runs ``due`` now and
    those ``held`` for the unreachable queue, the held writes of its job store."""
    return {
        "ready": not due and not held,
        # every due run was fired, some are held for the unreachable queue
        "waiting_for_queue": not due and bool(held),
        "unfired": held,
        "jobs": jobs,
        **(_outage.fields() if _outage is not None else {}),
        **sched.job_store.fields(),
        **({"role": "leader"} if leader else {}),
    }


def _lead(leader: Any, log: Any, stop: threading.Event, run_dir: RunDir, standby: Standby) -> bool:
    """Stand by until ``leader`` (a ``Leadership``) takes the cluster's lease; True then,
    False when stopped first. Publishes the standby status with its reason at every try."""
    while not stop.is_set():
        if leader.try_lead():
            standby.reachable(log)
            log.info("scheduler.leading")
            return True
        if leader.unreachable is not None:
            standby.unreachable(leader.unreachable, log)
        else:
            standby.reachable(log)
        run_dir.publish(
            "scheduler", {"ready": True, "role": "standby", "jobs": [], **standby.fields()}
        )
        stop.wait(standby.wait_s)
    return False


def close(sched: BackgroundScheduler) -> None:
    """Shut ``sched`` down if it started. A start that failed (its job store unreachable, a
    PostgreSQL outage) leaves it not running, and APScheduler's ``shutdown`` would then raise
    ``SchedulerNotRunningError`` over the error that ended the run."""
    if sched.running:
        sched.shutdown(wait=True)


def run(cfg: Settings, log: Any, stop: threading.Event) -> None:
    """Run the scheduler until ``stop``. Raises ``LeaseHeldError`` if another runs in this
    data dir. On a shared PostgreSQL store only the elected leader runs schedules; the others
    stand by. A leader that loses its lease (it could not renew it in time: the store was
    unreachable, or the process was stopped) or meets an unreachable store stops leading at
    once: its scheduler fires nothing once ``holds()`` is False and is shut down within a
    second; the process stays up as a standby, says why in its status, tries the lease again
    with backoff while the store is unreachable, and leads again once it wins it. A damaged
    ``schedule.db`` does not end it either: it fires nothing until the file is replaced or
    moved aside, then starts again by itself, and one that is locked by another process (or
    meets an I/O error) is waited out with backoff, said in the status (``schedule_locked``,
    ``schedule_unavailable_since``) and resumed from (``workers.schedule_damage``)."""
    run_dir = RunDir(cfg.home, log)  # a full disk is reported, never fatal
    lease = Lease(run_dir.lock("scheduler")).acquire()
    if lease.unrecorded:
        log.warning("scheduler.lease_unrecorded", file=str(lease.path), error=lease.unrecorded)
    serve(cfg, log)
    try:
        if not factory.capabilities(cfg).cluster:
            outage = schedule_damage.ScheduleOutage(log)
            while not stop.is_set():
                try:
                    with schedule_damage.guarded(cfg):
                        _schedule(cfg, log, stop, run_dir, None, outage)
                    return
                except schedule_db.ScheduleUnreadableError as exc:
                    if exc.damaged:
                        schedule_damage.await_replacement(cfg, log, stop, run_dir, exc)
                        continue
                    outage.failed(exc)  # locked, I/O: it passes by itself
                    outage.wait(stop, run_dir, {"jobs": []})
            return
        from quill.store.postgres.election import Leadership

        leader = Leadership(cfg.store_url, "scheduler")  # one scheduler leads the cluster
        standby = Standby()
        while _lead(leader, log, stop, run_dir, standby):
            try:
                _schedule(cfg, log, stop, run_dir, leader)
                if not stop.is_set():
                    standby.reason = "leadership lost: the lease could not be renewed in time"
            except Exception as exc:
                if not store_unreachable(exc):
                    raise
                standby.unreachable(exc, log)
            finally:
                leader.release()
            if not stop.is_set():
                run_dir.publish(
                    "scheduler", {"ready": True, "role": "standby", "jobs": [], **standby.fields()}
                )
                stop.wait(standby.wait_s)
        leader.release()  # a standby's connection
    finally:
        lease.release()
        log.info("scheduler.stopped")


def _schedule(
    cfg: Settings,
    log: Any,
    stop: threading.Event,
    run_dir: RunDir,
    leader: Any,
    outage: schedule_damage.ScheduleOutage | None = None,
) -> None:
    """Run the schedules until ``stop``, or — with ``leader`` (a ``Leadership``) — until it no
    longer holds the lease (``still_leader``: renewed here, bounded). Raises what the job
    store raises (``store_unreachable`` for an outage). With ``outage`` (a ``schedule.db``)
    a read of the running schedule that meets a lock or an I/O error does not end it: the
    state is published with the schedules last read and the read tried again with backoff;
    a damaged file (``ScheduleUnreadableError.damaged``) is raised."""
    sched = make_scheduler(cfg, leader, log)
    sched.add_listener(
        lambda ev: log.warning(
            "scheduler.missed", job=ev.job_id, scheduled=str(ev.scheduled_run_time)
        ),
        EVENT_JOB_MISSED,
    )
    sched.add_listener(
        lambda ev: log.error("scheduler.fire_failed", job=ev.job_id, error=repr(ev.exception)),
        EVENT_JOB_ERROR,
    )
    try:
        sched.start(paused=True)
        added = install_defaults(sched, cfg)
        named = name_weekdays(sched)
        if named:
            log.warning(
                "scheduler.weekdays_named",
                schedules=named,
                note="day numbers stored by an older Quill meant APScheduler's (0 = Monday): "
                "each is now stored as the name of the day it has always fired on; --cron "
                "numbers are crontab's (0 or 7 = Sunday)",
            )
        sched.resume()  # runs anything due now (coalesced) before we report ready
        jobs = sched.get_jobs()
        if outage is not None:
            outage.answered()
        log.info("scheduler.started", added=added, jobs=describe_jobs(jobs))
        while not stop.is_set():
            if leader is not None and not leader.still_leader():
                log.error("scheduler.leadership_lost")
                return
            try:
                with schedule_damage.guarded(cfg):
                    jobs = sched.get_jobs()
            except schedule_db.ScheduleUnreadableError as exc:
                if outage is None or exc.damaged:
                    raise
                outage.failed(exc)  # the scheduler's thread retries by itself meanwhile
                outage.wait(stop, run_dir, _status(describe_jobs(jobs), [], [], sched, leader))
                sched.wakeup()
                continue
            if outage is not None:
                outage.answered()
            now = dt.datetime.now(dt.UTC)
            due = [j for j in jobs if j.next_run_time and j.next_run_time <= now]
            held = refire()
            run_dir.publish("scheduler", _status(describe_jobs(jobs), due, held, sched, leader))
            stop.wait(0.5 if due else 1.0)
            # Operators change schedules in schedule.db from `quill schedule ...`; waking up
            # re-reads the job store, so a change takes effect within a second.
            sched.wakeup()
    finally:
        close(sched)
