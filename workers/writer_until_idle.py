"""The writer's drain-to-the-end mode (``until_idle``), for ``quill recover`` and tests: the
running writer's steps and retries, stopping when the spool is drained. Mixed into
``workers.writer.Writer``, whose module doc gives the rules; kept apart so that the writer's
loop reads in one screen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from quill.home import Halt, RunDir, Settings
from quill.store.contract import Store
from quill.store.errors import CorruptError
from quill.store.factory import location
from quill.workers.drain import Drain
from quill.workers.job_runner import StoreJobRunner
from quill.workers.writer_halt import CAUGHT, passing

#: ``until_idle`` gives up after failing this long without one successful step (seconds):
#: long enough to ride out a server restart or a failover, short enough for a command.
UNTIL_IDLE_GIVE_UP_S = 300.0


class UntilIdle:
    """``Writer.until_idle`` and its retry helper; uses the writer's ``initialize``,
    ``step``, ``shutdown``, ``_retry`` and its store, drain and log."""

    store: Store
    drain: Drain
    cfg: Settings
    run_dir: RunDir
    log: Any
    halt_cause: Halt | None
    error: str | None
    _backoff: float | None
    cursor: Any  # ``Writer.cursor``: the drain's committed ``spool.Position``
    totals: Any  # ``Writer.totals`` (read-only): the drain's counts, ``{name: int}``
    initialize: Callable[[], None]
    step: Callable[..., bool]
    shutdown: Callable[[], None]
    _retry: Callable[[float, Exception, str, float | None], float]
    _job_runner: Callable[[], StoreJobRunner]

    def until_idle(
        self, stop: threading.Event | None = None, *, give_up_s: float = UNTIL_IDLE_GIVE_UP_S
    ) -> dict[str, Any]:
        """Drain the spool to its end as the running writer would (chunks, index slices,
        queued store jobs, torn tails sealed), then stop; for ``quill recover`` and tests.
        A retryable failure (``RETRYABLE``: a dropped connection, a server restarting, a
        full disk) is retried as the running writer retries it (the same pause, reconnect
        and cursor re-read, logged ``writer.retry``) until ``give_up_s`` seconds pass
        without a successful step; then the last one is raised. Returns the totals plus
        ``spool_id``, ``from`` and ``to`` cursors. Raises ``LeaseHeldError`` while a writer
        runs, the store error tree, and ``CorruptError`` when the store is halted."""
        self.initialize()
        try:
            if self.halt_cause is not None:
                raise CorruptError(
                    f"the store is halted: {self.halt_cause.cause}: {self.halt_cause.detail}"
                )
            figures = self._retrying(self._open_and_start, stop, give_up_s)
            if figures is None:  # stopped before the store could be opened
                return {"spool_id": self.store.spool_id, "from": None, "to": None, **self.totals}
            start = self.cursor
            self.log.info("writer.started", backend=self.store.kind, cursor=str(start), **figures)
            while self._retrying(lambda: self.step(time.monotonic()), stop, give_up_s):
                pass
            return {
                "spool_id": self.store.spool_id,
                "from": str(start),
                "to": str(self.cursor),
                **self.totals,
            }
        finally:
            self.shutdown()

    def _open_and_start(self) -> dict[str, Any]:
        """Open the store, read (and prove) its cursor, make the job runner; the figures of
        ``store.connect``. Raises the store error tree."""
        figures = self.store.connect()
        try:
            accepted = self.run_dir.accepted_start(location(self.cfg), self.store.spool_id)
            self.drain.start(accepted=accepted)
            self._job_runner()
        except CAUGHT:
            # Open but not started: the next try starts over from ``connect``. A store that
            # stays open across a retry (SQLite's) would otherwise be stepped from the drain's
            # unproved default cursor, with no job runner.
            self.store.disconnect()
            raise
        return figures

    def _retrying(self, step: Any, stop: threading.Event | None, give_up_s: float) -> Any:
        """``step()``'s result, retrying a ``RETRYABLE`` failure after the writer's pause
        (reopening the store and re-reading its cursor when the store drops its connection
        on errors) until ``give_up_s`` s have passed since the first failure; None when
        ``stop`` is set first. Raises the last failure after that, and anything else at once."""
        failing_since: float | None = None
        while stop is None or not stop.is_set():
            now = time.monotonic()
            try:
                if not self.store.connected and step is not self._open_and_start:
                    self._open_and_start()
                result = step()
            except CAUGHT as exc:
                if not passing(exc):
                    raise
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= give_up_s:
                    raise
                pause = self._retry(now, exc, "writer.retry", self.store.retry_first_s)
                if stop is not None:
                    stop.wait(pause)
                else:
                    time.sleep(pause)
                continue
            self._backoff, self.error = None, None
            return result
        return None
