"""The scheduler's answer to a damaged ``schedule.db``: fire nothing, say so, resume by itself.

``schedule.db`` holds the catalog's default schedules *and* the operator's ``quill schedule``
edits (a paused prune, a removed default, an added snapshot): only the file knows the edits.
So while it is damaged (``ScheduleUnreadableError.damaged``: SQLITE_CORRUPT / NOTADB) the
scheduler fires nothing rather than the defaults from memory, which would run jobs an operator
paused and say nothing of the edits lost (docs/operations.md, "A damaged schedule.db or
queue.db"). It stays up, publishes the damage every second, logs it once, and starts again
within a second of the file being replaced, moved aside (a new file gets the defaults) or
rewritten.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from quill.home import RunDir, Settings
from quill.jobs import schedule as schedule_db
from quill.store import factory


def guarded(cfg: Settings) -> Any:
    """``jobs.schedule.guarded`` on this data dir's ``schedule.db`` (its SQLite errors become
    ``ScheduleUnreadableError``); nothing on a shared PostgreSQL job store (its errors are the
    store's)."""
    if factory.capabilities(cfg).cluster:
        return contextlib.nullcontext()
    return schedule_db.guarded(cfg.schedule_db)


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
