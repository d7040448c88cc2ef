"""One tracker of a job-queue outage, shared by every long-running process that polls the
queue (the writer's job runner, the consumer): when to try the queue again, what to log and
what to publish.

While the queue is unreachable (``QueueUnavailableError``) the process does its other work
and tries the queue again after a pause that doubles from ``RETRY_FIRST_S`` to
``MAX_BACKOFF_S``. It logs one line when the outage starts (``<role>.queue_unavailable``), at
most one per ``LOG_EVERY_S`` while it lasts (``<role>.queue_still_unavailable``), and one when
the queue answers again (``<role>.queue_back``): never a traceback per try.

A one-shot caller (a CLI command) that needs the queue now uses ``persist``: the same backoff,
within a bound, for a ``queue.db`` locked by another process only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from quill.jobs.errors import QueueUnavailableError

T = TypeVar("T")

#: The first pause after the queue was found unreachable (s); it doubles up to the next.
RETRY_FIRST_S = 0.5
MAX_BACKOFF_S = 10.0
#: While the queue stays unreachable, at most one log line per this many seconds.
LOG_EVERY_S = 60.0


class QueueOutage:
    """The queue's state as one process sees it. ``role`` prefixes the log events; ``log``
    is a structlog-style logger (``log.error(event, **fields)``). Times are monotonic s
    unless named ``since`` (epoch s)."""

    def __init__(self, role: str, log: Any):
        self.role = role
        self.log = log
        self.down: QueueUnavailableError | None = None  # the outage's first failure
        self.retry_at = 0.0  # the queue is not tried before this
        self.backoff = 0.0
        self.tries = 0  # failed tries in this outage
        self._logged_at = float("-inf")

    def ready(self, now: float | None = None) -> bool:
        """Whether the queue may be tried now (always while it is not known to be down)."""
        now = time.monotonic() if now is None else now
        return self.down is None or now >= self.retry_at

    def wait_s(self, now: float | None = None) -> float:
        """Seconds until the queue may be tried again (0 when it may be tried now)."""
        now = time.monotonic() if now is None else now
        return 0.0 if self.down is None else max(0.0, self.retry_at - now)

    def failed(self, exc: QueueUnavailableError, now: float | None = None) -> None:
        """Count a failed try: start (or go on with) the outage, and set the next try."""
        now = time.monotonic() if now is None else now
        self.tries += 1
        if self.down is None:
            self.down, self.backoff = exc, RETRY_FIRST_S
            self.log.error(
                f"{self.role}.queue_unavailable", error=str(exc), retry_in_s=self.backoff
            )
            self._logged_at = now
        else:
            self.backoff = min(self.backoff * 2, MAX_BACKOFF_S)
            if now - self._logged_at >= LOG_EVERY_S:
                self.log.warning(
                    f"{self.role}.queue_still_unavailable",
                    error=exc.cause,
                    since=self.down.since,
                    tries=self.tries,
                    retry_in_s=self.backoff,
                )
                self._logged_at = now
        self.retry_at = now + self.backoff

    def answered(self) -> None:
        """The queue answered a call: end the outage, if there was one."""
        if self.down is None:
            return
        self.log.warning(
            f"{self.role}.queue_back",
            down_s=round(time.time() - self.down.since, 1),
            tries=self.tries,
        )
        self.down, self.tries = None, 0

    def fields(self) -> dict[str, Any]:
        """``{"queue_error", "queue_down_since"}`` for a status record: the outage's message
        and its start (epoch s), both None while the queue answers."""
        return {
            "queue_error": str(self.down) if self.down else None,
            "queue_down_since": self.down.since if self.down else None,
        }


#: How long (s) a one-shot caller (a CLI command) goes on trying a ``queue.db`` that another
#: process keeps locked, each try itself waiting up to the busy timeout
#: (``jobs.queues.QUEUE_BUSY_TIMEOUT_S``): a busy fleet holds the lock for milliseconds, so
#: only a stuck holder (a ``sqlite3`` shell left in a transaction) outlasts it.
LOCK_WAIT_S = 30.0


class _Quiet:
    """A logger that drops every line: a one-shot caller says the outcome itself."""

    def __getattr__(self, level: str) -> Any:
        return lambda *args, **fields: None


def persist(call: Callable[[], T], within_s: float | None = None, sleep: Any = time.sleep) -> T:
    """``call()``, tried again while it raises ``QueueUnavailableError`` with ``locked`` set
    (another process holds ``queue.db``'s lock), pausing between tries as ``QueueOutage``
    backs off, for at most ``within_s`` seconds from the first try (default
    ``LOCK_WAIT_S``). Any other outage (Redis
    down, a damaged or unreadable file, no descriptor) is raised at once: waiting would not
    end it. When it gives up, the last error is raised with a note saying how long and how
    often it tried. Returns what ``call`` returns."""
    within_s = LOCK_WAIT_S if within_s is None else within_s
    outage = QueueOutage("queue", _Quiet())
    start = time.monotonic()
    while True:
        try:
            result = call()
        except QueueUnavailableError as exc:
            if not exc.locked:
                raise
            outage.failed(exc)
            if time.monotonic() + outage.wait_s() - start > within_s:
                exc.add_note(
                    f"{exc.where} stayed locked by another process through {outage.tries} "
                    f"tries over {time.monotonic() - start:.1f} s"
                )
                raise
            sleep(outage.wait_s())
            continue
        outage.answered()
        return result
