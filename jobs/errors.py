"""The job queue's one error: the queue cannot be reached right now.

    QueueError
    └── QueueUnavailableError   the Redis server of ``[queue] url`` refused, dropped or timed
        │                       out a connection (redis-py ``ConnectionError`` /
        │                       ``TimeoutError``, which include an authentication failure and
        │                       a server still loading its data), or refused a write as a
        │                       read-only replica; or ``queue.db`` was busy, locked, full,
        │                       unreadable or could not be opened (SQLite primary result codes)
        ├── QueueOverloadedError  no file descriptor was left (EMFILE/ENFILE,
        │                       ``quill.home.descriptors``) to open ``queue.db`` or a socket
        │                       to Redis: retry shortly (HTTP: 503 ``overloaded``)
        └── QueueDamagedError   ``queue.db`` is damaged or not a database (SQLITE_CORRUPT,
                                SQLITE_NOTADB): an outage like the others to every caller (they
                                stay up and try again), which lasts until an operator moves
                                the file aside (a new one is created; what it held is lost,
                                the spool is not)

Classified by exception type (and SQLite result code), never by message text. Every call
into huey's storage goes through ``guarded`` (``jobs.queues`` installs it on both storage
classes), so no caller ever sees a raw redis or sqlite3 error from the queue. Nothing is lost
when it is raised: the spool, not the queue, is the log of every change; a job that could not
be queued was not queued, and says so.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
from collections.abc import Iterator

from quill.home.descriptors import exhausted_now

#: SQLite primary result codes (sqlite3.h) that mean ``queue.db`` cannot be used right now.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 10, 13, 14})  # BUSY, LOCKED, IOERR, FULL, CANTOPEN
#: ... and that mean it is damaged: it will not answer until it is replaced.
_SQLITE_DAMAGED = frozenset({11, 26})  # CORRUPT, NOTADB
#: ... and that mean another connection holds its lock: it answers once that one commits.
_SQLITE_LOCKED = frozenset({5, 6})  # BUSY, LOCKED


class QueueError(Exception):
    """Base of the job queue's errors."""


class QueueUnavailableError(QueueError):
    """The job queue cannot be reached: nothing was queued or taken by the failed call.
    ``where`` names the queue (its URL without password, or the ``queue.db`` path),
    ``cause`` the underlying error (``Type: message``), ``since`` the epoch seconds of the
    failure (the caller that tracks an outage keeps the first one), ``locked`` whether
    ``queue.db`` was locked by another connection past the busy timeout (SQLITE_BUSY or
    SQLITE_LOCKED: a transaction of another process; it answers once that one ends)."""

    def __init__(self, where: str, cause: BaseException):
        self.where = where
        self.cause = f"{type(cause).__name__}: {cause}"
        self.since = time.time()
        code = (
            getattr(cause, "sqlite_errorcode", None) if isinstance(cause, sqlite3.Error) else None
        )
        self.locked = code is not None and code & 0xFF in _SQLITE_LOCKED
        super().__init__(f"the job queue at {where} is unreachable ({self.cause})")


class QueueOverloadedError(QueueUnavailableError):
    """The queue could not be reached because this process (or the system) had no file
    descriptor left to open ``queue.db`` or a socket: the queue itself is fine."""

    descriptors_exhausted = True


class QueueDamagedError(QueueUnavailableError):
    """``queue.db`` is damaged (``where``: its path; ``cause`` as above): nothing was queued
    or taken. It stays so until the file is moved aside; the spool, not the queue, holds
    every change, so only jobs waiting in it are lost (run them again with ``quill jobs
    run``)."""

    def __init__(self, where: str, cause: BaseException):
        super().__init__(where, cause)
        self.args = (
            f"the job queue at {where} is damaged ({self.cause}): move it aside and Quill "
            "creates a new one (jobs waiting in it are lost; the spool is not)",
        )


def damaged(exc: BaseException) -> bool:
    """Whether ``exc`` (raised by huey's storage) means ``queue.db`` is damaged."""
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
    return code is not None and code & 0xFF in _SQLITE_DAMAGED


def _redis_types() -> tuple[type[BaseException], ...]:
    # Only a loaded Redis client can have raised one of its errors: a data dir whose queue is
    # queue.db never loads it (quill.jobs.huey_lazy), and classifying must not either.
    rx = sys.modules.get("redis.exceptions")
    if rx is None:
        return ()
    # ConnectionError covers AuthenticationError and BusyLoadingError; ReadOnlyError is the
    # answer of a replica (a failover left us on one): writes cannot be queued there.
    return (rx.ConnectionError, rx.TimeoutError, rx.ReadOnlyError)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (raised by huey's storage) means the queue is unreachable now."""
    if isinstance(exc, _redis_types()):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_UNAVAILABLE
    return False


@contextlib.contextmanager
def guarded(where: str) -> Iterator[None]:
    """Run a block that calls the queue's storage; re-raise what ``unavailable`` classifies
    as ``QueueUnavailableError`` (the original chained). Anything else propagates as is: a
    bug, or a reply the queue should never give."""
    try:
        yield
    except QueueError:
        raise
    except Exception as exc:
        if damaged(exc):
            raise QueueDamagedError(where, exc) from exc
        if unavailable(exc):
            # sqlite3 and redis-py keep no errno for a failed open: ask the kernel again.
            kind = QueueOverloadedError if exhausted_now() else QueueUnavailableError
            raise kind(where, exc) from exc
        raise
