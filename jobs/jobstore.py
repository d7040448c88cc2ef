"""The schedule's job store, kept honest when its file cannot be written.

APScheduler 3 writes a schedule's next run time back to its job store right after firing it,
on the scheduler's own thread. When ``schedule.db`` cannot be written (a full disk, an I/O
error, a lock held too long) that write raises out of APScheduler's loop and ends the thread:
the process stays up and its status says "not ready", but nothing fires again, even once the
disk has room. ``HeldJobStore`` keeps such a write in memory instead, answers every read of
the schedule with it (so the scheduler neither fires the same run again nor spins on a run
time it already passed), and writes it on every later call until the file takes it. What is
held, since when and why is in ``fields()`` for the scheduler's status; ``log`` gets one line
when writes start failing (then at most one per ``REPORT_EVERY_S``, with the count left out)
and one when they succeed again.

Only storage failures are held (``storage_trouble``: SQLite result codes BUSY, LOCKED,
IOERR, FULL, CANTOPEN, READONLY; a PostgreSQL connection failure); anything else propagates.
A held write is lost only if the scheduler stops before the file takes it: the schedule then
runs from the last time written, at most one run early (coalesced), never skipped. A *read*
that meets storage trouble never ends the scheduler's thread either (``get_next_run_time``);
the scheduler's loop reports it (``workers.schedule_damage.ScheduleOutage``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from sqlalchemy import exc as sa_exc

from quill.home.throttle import Throttle

#: SQLite primary result codes (sqlite3.h) that mean the file cannot be written right now.
_SQLITE_STORAGE = frozenset({5, 6, 8, 10, 13, 14})  # BUSY LOCKED READONLY IOERR FULL CANTOPEN
#: At most one "still unwritable" line per this many seconds.
REPORT_EVERY_S = 5.0
#: Seconds until APScheduler's thread reads the schedule again after a read failed.
READ_RETRY_S = 1.0
_REMOVED = object()  # a held removal


def storage_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` (raised by the job store's engine) means the schedule's storage cannot
    be written or reached now, by result code or driver type (never by message text)."""
    if not isinstance(exc, sa_exc.OperationalError):
        return False
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        code = getattr(orig, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_STORAGE
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(orig, psycopg.OperationalError)


class HeldJobStore(SQLAlchemyJobStore):
    """An APScheduler ``SQLAlchemyJobStore`` whose writes that meet ``storage_trouble`` are
    held in memory and retried (module doc). ``log``: a structlog-style logger (None: silent).
    Thread-safe as APScheduler uses it (its own lock around job-store calls, plus ours)."""

    def __init__(self, *args: Any, log: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._log = log
        self._held: dict[str, Any] = {}  # job id -> Job to write, or _REMOVED
        self._lock = threading.RLock()
        self._error: str | None = None
        self._since: float | None = None
        self._throttle = Throttle(REPORT_EVERY_S)

    # -- what the scheduler's status shows -------------------------------------------------

    def fields(self) -> dict[str, Any]:
        """``{"schedule_error", "schedule_unwritable_since", "schedule_held"}``: why the
        schedule's last write failed, since when (epoch s) and the ids of the schedules whose
        state is held in memory; None, None and [] while every write is in the file."""
        with self._lock:
            return {
                "schedule_error": self._error,
                "schedule_unwritable_since": self._since,
                "schedule_held": sorted(self._held),
            }

    # -- writes ----------------------------------------------------------------------------

    def _failed(self, exc: sa_exc.DBAPIError, what: str) -> None:
        if self._since is None:
            self._since = time.time()
        self._error = f"{type(exc.orig).__name__}: {exc.orig}"
        left_out = self._throttle.ready("unwritable")
        if left_out is not None and self._log is not None:
            self._log.error(
                "scheduler.schedule_unwritable",
                error=self._error,
                held=sorted(self._held),
                during=what,
                suppressed=left_out,
                since=self._since,
            )

    def _flush(self) -> None:
        """Write what is held, oldest first; stop at the first failure (still held)."""
        while self._held:
            job_id, job = next(iter(self._held.items()))
            try:
                if job is _REMOVED:
                    try:
                        super().remove_job(job_id)
                    except LookupError:
                        pass  # gone already
                else:
                    try:
                        super().update_job(job)
                    except LookupError:
                        super().add_job(job)
            except sa_exc.OperationalError as exc:
                if not storage_trouble(exc):
                    raise
                self._failed(exc, "retrying held writes")
                return
            del self._held[job_id]
        if self._since is not None:
            if self._log is not None:
                self._log.warning(
                    "scheduler.schedule_writable_again", down_s=round(time.time() - self._since, 1)
                )
            self._since = self._error = None
            self._throttle.clear("unwritable")

    def _write(self, job_id: str, job: Any, write: Any, what: str) -> None:
        with self._lock:
            self._flush()
            if self._held:  # keep the order: later writes wait behind earlier ones
                self._held[job_id] = job
                return
            try:
                write()
            except sa_exc.OperationalError as exc:
                if not storage_trouble(exc):
                    raise
                self._held[job_id] = job
                self._failed(exc, what)

    def add_job(self, job: Any) -> None:
        """``SQLAlchemyJobStore.add_job``, held on a storage failure. Raises
        ``ConflictingIdError`` like it."""
        with self._lock:
            if job.id in self._held and self._held[job.id] is not _REMOVED:
                from apscheduler.jobstores.base import ConflictingIdError

                raise ConflictingIdError(job.id)
        self._write(job.id, job, lambda: super(HeldJobStore, self).add_job(job), "adding")

    def update_job(self, job: Any) -> None:
        """``SQLAlchemyJobStore.update_job``, held on a storage failure."""
        self._write(job.id, job, lambda: super(HeldJobStore, self).update_job(job), "updating")

    def remove_job(self, job_id: str) -> None:
        """``SQLAlchemyJobStore.remove_job``, held on a storage failure."""
        self._write(
            job_id, _REMOVED, lambda: super(HeldJobStore, self).remove_job(job_id), "removing"
        )

    # -- reads: the file, with what is held laid over it -----------------------------------

    def _merged(self, jobs: list[Any]) -> list[Any]:
        out = [self._held.get(j.id, j) for j in jobs]
        known = {j.id for j in jobs}
        out += [j for i, j in self._held.items() if i not in known]
        return [j for j in out if j is not _REMOVED]

    def get_all_jobs(self) -> list[Any]:
        """Every job, held state first, by next run time (paused last), as APScheduler's."""
        with self._lock:
            self._flush()
            jobs = self._merged(super().get_all_jobs())
        jobs.sort(key=lambda j: (j.next_run_time is None, j.next_run_time or 0))
        return jobs

    def get_due_jobs(self, now: Any) -> list[Any]:
        """The jobs due at ``now`` (held state counted)."""
        return [j for j in self.get_all_jobs() if j.next_run_time and j.next_run_time <= now]

    def get_next_run_time(self) -> Any:
        """The earliest next run time (held state counted), None when every job is paused.
        A read that meets ``storage_trouble`` (the file locked by another process past the
        busy timeout) answers ``READ_RETRY_S`` from now: APScheduler calls this outside its
        own error handling, so raising would end the scheduler's thread for good, while a
        wake-up soon makes it read again (its ``get_due_jobs`` failures it retries itself)."""
        try:
            jobs = self.get_all_jobs()
        except sa_exc.OperationalError as exc:
            if not storage_trouble(exc):
                raise
            return datetime.now(UTC) + timedelta(seconds=READ_RETRY_S)
        times = [j.next_run_time for j in jobs if j.next_run_time]
        return min(times) if times else None

    def lookup_job(self, job_id: str) -> Any:
        """The job ``job_id`` (held state first), None when there is none."""
        with self._lock:
            self._flush()
            if job_id in self._held:
                held = self._held[job_id]
                return None if held is _REMOVED else held
            return super().lookup_job(job_id)
