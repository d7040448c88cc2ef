"""The writer's two ways of applying nothing: the refusal (this host only) and the sticky halt
(the store). Mixed into ``workers.writer.Writer``, whose module doc gives the rules; kept apart
so that the writer's loop reads in one screen.

* Refusal: ``SpoolMismatchError`` (another live holder claims this spool id, or the store's
  cursor is not this spool's). Applying would skip or double records, so nothing is applied;
  the writer publishes itself halted with the cause and looks again every
  ``REFUSED_RETRY_S``. The store is not halted.
* Halt: ``CorruptError``. The store records the cause (SQLite ``run/halt.json``, PostgreSQL
  the store-wide halt row) and the writer stays up applying nothing until the store says the
  halt ended (``serve_halted``): resume, or exit after a swap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from quill.home import Halt, RunDir, Throttle, WriterStatus, is_exhaustion
from quill.spool.errors import SpoolFullError
from quill.store.contract import Store
from quill.store.errors import (
    CorruptError,
    CursorMismatchError,
    HistoryNotInSpoolError,
    SpoolGapError,
    SpoolMismatchError,
)
from quill.store.sqlite.job_runs import HALTED, record_job_run
from quill.workers.job_runner import RETRYABLE, StoreJobRunner, writer_tag

#: What the writer catches around a step or a start, then asks ``passing`` whether to retry.
CAUGHT = (*RETRYABLE, OSError, SpoolFullError)


def passing(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to pause on and retry: a ``RETRYABLE`` store error, no
    file descriptor left to open a spool file (an ``OSError`` EMFILE/ENFILE,
    ``quill.home.descriptors``; the store's own is a ``TransientError`` already), or no room
    to write a quarantine entry (``SpoolFullError`` from ``Quarantine.put``: nothing of the
    chunk was committed, so it is tried again once space returns, as a full store is)."""
    return isinstance(exc, (*RETRYABLE, SpoolFullError)) or is_exhaustion(exc, chain=False)


#: The longest pause between retries (seconds).
MAX_BACKOFF_S = 5.0
#: While refused (``SpoolMismatchError``) the writer looks again this often (seconds): a claim
#: that expired may be taken over, with the cursor checked first.
REFUSED_RETRY_S = 5.0


class HaltAndRefusal:
    """The refusal and halt half of ``Writer`` (which provides ``cfg``, ``log``, ``store``,
    ``run_dir``, ``jobs``, ``cursor`` and ``_job_runner``)."""

    store: Store
    log: Any
    run_dir: RunDir
    jobs: StoreJobRunner | None
    halt_cause: Halt | None
    halt_recorded: bool
    refusal: Halt | None
    done: bool
    _refused_until: float
    _halted_retry: Throttle
    _published: tuple[Any, ...] | None
    cursor: Any  # ``Writer.cursor``: the drain's committed ``spool.Position``
    _job_runner: Callable[[], StoreJobRunner]  # ``Writer._job_runner``

    def _refuse(self, now: float, exc: SpoolMismatchError) -> float:
        """Apply nothing: close the store, publish the refusal as this writer's halt (not the
        store's) and return the pause before the next look (``REFUSED_RETRY_S``)."""
        if isinstance(exc, CursorMismatchError):
            next_step = CursorMismatchError.next_for(self.store.cluster)
        elif isinstance(exc, (HistoryNotInSpoolError, SpoolGapError)):
            next_step = exc.next_step
        else:
            next_step = "quill spool reidentify"
        cause = Halt(type(exc).__name__, str(exc), time.time(), next=next_step)
        if self.refusal is None or self.refusal[:2] != cause[:2]:
            self.log.critical("writer.refused", hint=exc.hint, **cause.to_json())
        self.refusal = cause
        self.store.disconnect()
        self._refused_until = now + REFUSED_RETRY_S
        self._publish_refusal()
        return REFUSED_RETRY_S

    def _publish_refusal(self) -> None:
        self._published = None  # the next running status is published at once
        self.run_dir.publish(
            "writer",
            WriterStatus(
                halted=True,
                halt=self.refusal,
                cursor=str(self.cursor),
                backend=self.store.kind,
                spool_id=self.store.spool_id,
            ).to_json(),
        )

    # -- the sticky halt -------------------------------------------------------------------

    def _halt(self, exc: Exception) -> None:
        """Enter the sticky halt for ``exc`` and have the store record it (with the store job
        whose run met it, if one did: its ``job_runs`` row stays ``running`` in the damaged
        store, and whoever ends the halt finishes it from this record)."""
        job = self.jobs.current if self.jobs is not None else None
        if self.jobs is not None:
            self.jobs.current = None
        self.halt_cause = Halt(
            type(exc).__name__,
            str(exc),
            time.time(),
            next=self.store.recover_hint,
            cursor=str(self.cursor),
            job=job[0] if job else None,
            job_started=job[1] if job else None,
        )
        self.halt_recorded = False
        self.log.critical("writer.halt", backend=self.store.kind, **self.halt_cause.to_json())
        self._record_halt()

    def _record_halt(self) -> None:
        cause = self.halt_cause
        assert cause is not None  # called only while halted
        try:
            # False: the disk refused run/halt.json (reported by RunDir, throttled); retried
            # at every look while halted, which waits for it (``_serve_halt``).
            self.halt_recorded = self.store.halt(cause)
        except CorruptError:
            pass  # still damaged where the halt record lives: stay halted, try again
        except RETRYABLE as exc:
            self.store.disconnect()
            self._halted_warning(exc)

    def _halted_warning(self, exc: Exception) -> None:
        suppressed = self._halted_retry.ready("writer.retry")
        if suppressed is not None:
            self.log.warning(
                "writer.retry",
                error=f"{type(exc).__name__}: {exc}",
                kind=type(exc).__name__,
                suppressed=suppressed,
            )

    def _finish_halted_job(self) -> None:
        """The halt was lifted in place (the store was repaired, not replaced): finish the run
        of the store job that met the damage, still ``running``, as ``halted`` with the cause.
        Raises the store error tree (the caller stays halted and looks again)."""
        cause = self.halt_cause
        if cause is None or cause.job is None or cause.job_started is None:
            return
        self.store.run_job(
            record_job_run,
            cause.job,
            cause.job_started,
            time.time(),
            HALTED,
            {**writer_tag(self.store), "halt_at": cause.at},
            f"the writer halted on what this run met: {cause.cause}: {cause.detail}",
        )

    def _serve_halt(self, now: float) -> float:
        """One look while halted: publish the halt, let the store say whether it ended
        (resume, or exit after a swap), and run bookkeeping jobs where the store allows."""
        self._published = None  # the next running status is published at once
        self.run_dir.publish(
            "writer",
            WriterStatus(
                halted=True,
                halt=self.halt_cause,
                cursor=str(self.cursor) if self.cursor is not None else None,
                backend=self.store.kind,
                spool_id=self.store.spool_id,
            ).to_json(),
        )
        try:
            if not self.halt_recorded:
                self._record_halt()
                if not self.halt_recorded:
                    return self.store.halt_poll_s
            action = self.store.serve_halted()
            if action == "exit":
                self.done = True
                return 0.0
            if action == "resume":
                self.log.warning(
                    "writer.halt_lifted", backend=self.store.kind, cursor=str(self.cursor)
                )
                self._finish_halted_job()
                self.halt_cause = None
                return 0.0
            if self.store.jobs_while_halted:
                while self._job_runner().run_one(self.store, idle=True):
                    pass
        except CorruptError:
            pass  # still damaged where a job-run record or the halt lives: stay halted
        except RETRYABLE as exc:
            self.store.disconnect()
            self._halted_warning(exc)
        return self.store.halt_poll_s
