"""The scheduler's answer to a damaged or locked ``schedule.db``: say so, resume by itself.

``schedule.db`` holds the catalog's default schedules *and* the operator's ``quill schedule``
edits (a paused prune, a removed default, an added snapshot): only the file knows the edits.
So while it is damaged (``ScheduleUnreadableError.damaged``: SQLITE_CORRUPT / NOTADB) the
scheduler fires nothing rather than the defaults from memory, which would run jobs an operator
paused and say nothing of the edits lost (docs/operations.md, "A damaged schedule.db or
queue.db"). It stays up, publishes the damage every second, logs it once, and starts again
within a second of the file being replaced, moved aside (a new file gets the defaults) or
rewritten.

A ``schedule.db`` that is sound but cannot be read *now* (another process holds a lock past
the busy timeout: a ``sqlite3`` shell in a transaction, a backup tool; or an I/O error, a
full disk, a file that cannot be opened) passes by itself: ``ScheduleOutage`` tries again
with backoff (``RETRY_FIRST_S`` doubling to ``RETRY_MAX_S``), publishes the state and since
when, and logs it once when it starts (then at most every ``RETRY_MAX_S``) and once when the
file answers again. A scheduler already running goes on running (its job store holds writes
and its thread retries reads, ``jobs.jobstore``), so nothing it fired or owes is lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from quill.home import RunDir, Settings
from quill.home.throttle import Throttle
from quill.jobs import schedule as schedule_db
from quill.store import factory


def guarded(cfg: Settings) -> Any:
    """``jobs.schedule.guarded`` on this data dir's ``schedule.db`` (its SQLite errors become
    ``ScheduleUnreadableError``); nothing on a shared PostgreSQL job store (its errors are the
    store's)."""
    if factory.capabilities(cfg).cluster:
        return contextlib.nullcontext()
    return schedule_db.guarded(cfg.schedule_db)


#: Backoff of a schedule that cannot be read now: the first wait, doubling up to the last (s).
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


class ScheduleOutage:
    """A ``schedule.db`` that cannot be read now (``ScheduleUnreadableError`` not ``damaged``):
    since when, why, and the backoff before the next try. ``log``: a structlog-style logger.
    One per scheduler process; not thread-safe (the scheduler's main loop only)."""

    def __init__(self, log: Any):
        self.log = log
        self.since: float | None = None
        self.error: str | None = None
        self.locked = False
        self.wait_s: float | None = None
        self._throttle = Throttle(RETRY_MAX_S)

    def failed(self, exc: schedule_db.ScheduleUnreadableError) -> float:
        """Count a failed read of the schedule (``exc``); returns the seconds to wait before
        the next try. Logs ``scheduler.schedule_unavailable`` at the first failure, then at
        most every ``RETRY_MAX_S`` with the number left out."""
        if self.since is None:
            self.since = time.time()
        self.error, self.locked = str(exc), exc.locked
        self.wait_s = RETRY_FIRST_S if self.wait_s is None else min(self.wait_s * 2, RETRY_MAX_S)
        left_out = self._throttle.ready("unavailable")
        if left_out is not None:
            self.log.error(
                "scheduler.schedule_unavailable",
                state=exc.state,
                error=self.error,
                since=self.since,
                retry_s=self.wait_s,
                suppressed=left_out,
            )
        return self.wait_s

    def answered(self) -> None:
        """The schedule was read: the outage (if any) is over, logged with its length."""
        if self.since is not None:
            self.log.warning(
                "scheduler.schedule_available_again", down_s=round(time.time() - self.since, 1)
            )
        self.since = self.error = self.wait_s = None
        self.locked = False
        self._throttle.clear("unavailable")

    def fields(self) -> dict[str, Any]:
        """For the scheduler's status: ``schedule_unavailable`` (the error, None while the
        schedule answers), ``schedule_locked`` (a lock held by another process),
        ``schedule_unavailable_since`` (epoch s) and ``schedule_retry_s`` (the wait now)."""
        return {
            "schedule_unavailable": self.error,
            "schedule_locked": self.locked,
            "schedule_unavailable_since": self.since,
            "schedule_retry_s": self.wait_s,
        }

    def wait(self, stop: threading.Event, run_dir: RunDir, status: dict[str, Any]) -> None:
        """Wait out the backoff (``wait_s``) or ``stop``, publishing ``status`` with these
        fields every second (``ready`` False): a status reader sees the wait as it goes."""
        deadline = time.monotonic() + (self.wait_s or RETRY_FIRST_S)
        while not stop.is_set():
            run_dir.publish("scheduler", {**status, "ready": False, **self.fields()})
            left = deadline - time.monotonic()
            if left <= 0:
                return
            stop.wait(min(1.0, left))


def await_replacement(
    cfg: Settings, log: Any, stop: threading.Event, run_dir: RunDir, exc: Any
) -> None:
    """Fire nothing while ``schedule.db`` is the damaged file ``exc`` (a
    ``ScheduleUnreadableError``) met: publish that every second (``ready`` False, ``jobs``
    [], ``schedule_damaged`` = the error, ``schedule_damaged_since`` epoch s), log
    ``scheduler.schedule_damaged`` once, and return once the file's identity
    (``jobs.schedule.fingerprint``: inode, size, mtime) changes (logging
    ``scheduler.schedule_replaced``), or on ``stop``."""
    path = cfg.schedule_db
    before, since = schedule_db.fingerprint(path), time.time()
    log.error(
        "scheduler.schedule_damaged",
        file=str(path),
        error=str(exc),
        action="nothing fires until schedule.db is replaced or moved aside",
    )
    while not stop.is_set():
        run_dir.publish(
            "scheduler",
            {
                "ready": False,
                "jobs": [],
                "schedule_damaged": str(exc),
                "schedule_damaged_since": since,
            },
        )
        stop.wait(1.0)
        if schedule_db.fingerprint(path) != before:
            log.warning("scheduler.schedule_replaced", down_s=round(time.time() - since, 1))
            return
