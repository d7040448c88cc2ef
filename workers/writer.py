"""The writer: the only process that writes the store of a data dir.

Written once against the store contract (``store.contract.Store``, opened by ``store.open``):
it never touches a database handle and never asks which backend it drives. Each turn of the
loop (docs/architecture.md, "Processes"):

1. apply one chunk of about ``chunk_rows`` message rows from the committed cursor
   (``workers.drain.Drain``: one transaction that also moves the cursor), then ring every
   waiting client's doorbell (``run/waiters/``) with a note of the ops it applied, so
   read-your-writes costs about the drain of the op, not a poll interval, and a client
   that finds its op in the note reads nothing from the store;
2. upkeep (``workers.writer_upkeep``): bring search up by one bounded slice
   (``index_step``), run at most one queued store job (``workers.job_runner``;
   ``needs_idle`` ones only when the spool is drained), publish the status. After a full
   chunk it runs at once; after a partial one it waits for a quiet moment (the next op
   first), at most ``UPKEEP_DUE_S``;
3. when there is nothing to do: the store's idle upkeep, seal torn tails, publish "idle",
   and wait for the spool's doorbell (``quill.home.doorbell``: a producer rings it after an
   append is durable) or ``poll_interval``, whichever comes first.

Refusals: ``SpoolMismatchError`` (another live holder claims this spool id; the store's cursor
is not this spool's) means applying would skip or double records. The writer applies nothing,
publishes itself halted with the cause (``quill status``; ``quill run --until-idle`` exits 5),
and looks again every ``REFUSED_RETRY_S``: only this host stops, the store is not halted.

The job queue is optional to the drain: while it is unreachable (Redis down) the job runner
runs no queued job and tries the queue again with backoff, and the writer applies the spool
as ever, publishing the outage (``queue_error``, ``queue_down_since``) in its status.

Failures: a retryable one (``TransientError``, ``DiskFullError``, ``StoreIOError``, or no file
descriptor left, ``quill.home.descriptors``, to open the store or a spool file) committed
nothing, so the writer publishes it, pauses (doubling up to ``MAX_BACKOFF_S``) and retries the
same step. ``CorruptError`` is the sticky halt, the one path for every cause: the store
records the cause (SQLite ``run/halt.json``, PostgreSQL the store-wide halt row) and the
writer stays up applying nothing, so the supervisor does not restart it into the same damage,
until the store says the halt ended (``serve_halted``). Producers keep appending meanwhile.

``run(stop)`` is ``initialize()``, then ``loop_once(now)`` until stopped, then ``shutdown()``;
a test builds a writer in process and steps it with its own clock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from quill.home import Halt, RunDir, Settings, Throttle, doorbell
from quill.jobs.queues import build_for
from quill.spool import Quarantine, Spool, SpoolReader
from quill.spool.segments import DOORBELL
from quill.store.contract import Store
from quill.store.errors import (
    CorruptError,
    SharedMemoryError,
    SpoolMismatchError,
)
from quill.store.factory import open_store
from quill.store.lease import Lease
from quill.workers.drain import Drain
from quill.workers.job_runner import StoreJobRunner
from quill.workers.status import COMMIT_BUCKETS_S
from quill.workers.writer_halt import (
    CAUGHT,
    MAX_BACKOFF_S,
    REFUSED_RETRY_S,
    HaltAndRefusal,
    passing,
)
from quill.workers.writer_until_idle import UntilIdle
from quill.workers.writer_upkeep import LINGER_S, Upkeep

#: The first pause after the store failed to open (seconds).
OPEN_RETRY_FIRST_S = 0.5
#: An idle writer waiting for its doorbell sees a stop within this many seconds.
STOP_LOOK_S = 0.1


class Writer(HaltAndRefusal, UntilIdle, Upkeep):
    """One writer for the data dir of ``cfg`` (``quill.home.Settings``), logging to ``log``.
    ``store``: the store to drive (default: ``store.open`` of the data dir, for its writer)."""

    def __init__(self, cfg: Settings, log: Any, *, store: Any = None):
        self.cfg = cfg
        self.log = log
        self.run_dir = RunDir(cfg.home, log)  # a full disk is reported, never fatal
        self.lease = Lease(self.run_dir.lock("writer"))
        self.store: Store = (
            store
            if store is not None
            else open_store(cfg, log, run_dir=self.run_dir, writer=True, connect=False)
        )
        self.drain = Drain(
            self.store,
            SpoolReader(cfg.spool_dir, max_line=cfg.max_record_bytes),
            Quarantine(cfg.spool_dir),
            cfg.chunk_rows,
            log=log,
        )
        self.jobs: StoreJobRunner | None = None
        self.halt_cause: Halt | None = None  # set while halted
        self.halt_recorded = False  # the store holds the halt record (else: try again)
        self.refusal: Halt | None = None  # set while refused (SpoolMismatchError)
        self._refused_until = 0.0  # monotonic s of the next look while refused
        self.done = False  # the writer must exit (to be restarted)
        self.error: str | None = None  # the retryable failure being waited out, else None
        # Chunk apply+commit latency (seconds), published for /metrics and `quill status`.
        self.commit_hist: dict[str, Any] = {
            "counts": [0] * len(COMMIT_BUCKETS_S),
            "count": 0,
            "sum": 0.0,
        }
        self._init_upkeep()
        self._backoff: float | None = None  # the last retry pause; None after a success
        # While halted the store is looked at every halt_poll_s (0.5 s): a retryable failure
        # there (a PostgreSQL server that went away) is logged once per MAX_BACKOFF_S.
        self._halted_retry = Throttle(MAX_BACKOFF_S)
        self.doorbell: doorbell.Doorbell | None = None  # producers ring it (``initialize``)
        self._idle = False  # the last loop_once found nothing to do
        self._ring_warn = Throttle(MAX_BACKOFF_S)

    @property
    def cursor(self) -> Any:
        """The committed spool cursor (``spool.Position``) as the drain last saw it."""
        return self.drain.cursor

    @property
    def totals(self) -> dict[str, int]:
        return self.drain.totals

    # -- lifecycle -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Initialize and loop until ``stop`` is set (or a swap asks for a restart). Raises
        ``LeaseHeldError`` when another writer of this data dir is alive."""
        self.initialize()
        try:
            while not stop.is_set() and not self.done:
                pause = self.loop_once(time.monotonic(), linger=True)
                if pause <= 0:
                    continue
                if self._idle and self.doorbell is not None:
                    self._idle_wait(self.doorbell, pause, stop)
                else:  # a backoff, a halt, a refusal: rings must not cut these short
                    stop.wait(pause)
        finally:
            self.shutdown()

    def _idle_wait(self, bell: doorbell.Doorbell, pause: float, stop: threading.Event) -> None:
        """Wait until a producer rings ``bell`` or ``pause`` seconds pass (the poll that bounds
        a lost ring); ``stop`` is looked at every ``STOP_LOOK_S`` meanwhile."""
        deadline = time.monotonic() + pause
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or bell.wait(min(left, STOP_LOOK_S)):
                return

    def initialize(self) -> None:
        """Take the writer lease and honour a halt recorded before we started. The store is
        opened by the first ``loop_once``. Raises ``LeaseHeldError``."""
        self.lease.acquire()
        self._listen()
        if self.lease.unrecorded:
            self.log.warning(
                "writer.lease_unrecorded", file=str(self.lease.path), error=self.lease.unrecorded
            )
        try:
            cause = self.store.startup_halt()
        except BaseException:
            self.lease.release()
            raise
        if cause:
            self.log.error("writer.halted", **cause.to_json())
            self.halt_cause, self.halt_recorded = cause, True

    def _listen(self) -> None:
        """Open the spool's doorbell (lease held: we are its one listener). Where none can be
        made the writer polls every ``poll_interval``, as it did before doorbells."""
        path = self.cfg.spool_dir / DOORBELL
        try:
            self.doorbell = doorbell.listen(path)
        except OSError as exc:  # e.g. a folder in its place: reported, and the writer polls
            self.log.error("writer.doorbell_unusable", path=str(path), error=str(exc))
            self.doorbell = None
            return
        if self.doorbell is None:
            self.log.warning("writer.no_doorbell", path=str(path))

    def _job_runner(self) -> StoreJobRunner:
        """The store-job runner, made once the store is open (as late as possible: a new
        store file is created first, before the queue is opened)."""
        if self.jobs is None:
            spool = Spool.for_settings(self.cfg)
            self.jobs = StoreJobRunner(lambda: build_for(self.cfg), self.log, spool, self.cfg)
        return self.jobs

    def shutdown(self) -> None:
        """Close the store and release the lease (idempotent)."""
        try:
            self.store.close()
        finally:
            if self.doorbell is not None:
                self.doorbell.close(remove=True)  # before the lease: the next writer's to make
                self.doorbell = None
            self.lease.release()
            self.log.info(
                "writer.stopped", cursor=str(self.cursor), backend=self.store.kind, **self.totals
            )

    def loop_once(self, now: float, *, linger: bool = False) -> float:
        """One turn: open the store if needed, then one unit of work (or one look while
        halted). ``now``: monotonic seconds. ``linger``: after a partial chunk, wait for the
        next op before the upkeep (``step``; ``run`` lingers, a test stepping turns need not).
        Returns the seconds to wait before the next turn (0: there is more to do). Never
        raises the store's retryable or corruption errors."""
        self._idle = False
        if self.done:
            return 0.0
        if self.halt_cause is not None:
            return self._serve_halt(now)
        if self.refusal is not None and now < self._refused_until:
            self._publish_refusal()
            return min(self._refused_until - now, REFUSED_RETRY_S)
        if not self.store.connected:
            pause = self._connect(now)
            if pause is not None:
                return pause
        try:
            busy = self.step(now, linger=LINGER_S if linger else 0.0)
        except SpoolMismatchError as exc:  # the claim was lost (taken over meanwhile)
            return self._refuse(now, exc)
        except CorruptError as exc:  # includes ReplacedError
            self._halt(exc)
            return 0.0
        except CAUGHT as exc:
            if not passing(exc):
                raise
            return self._retry(now, exc, "writer.retry", self.store.retry_first_s)
        self._backoff, self.error = None, None
        self._idle = not busy
        if busy:
            return 0.0
        return min(self.lingering, self.cfg.poll_interval) or self.cfg.poll_interval

    def _connect(self, now: float) -> float | None:
        """Open the store and read its cursor; None when open, else the pause before the next
        try (a full disk or busy file: opening creates the -wal and -shm files)."""
        try:
            figures = self._open_and_start()
        except SpoolMismatchError as exc:  # this spool id or cursor is not ours: apply nothing
            return self._refuse(now, exc)
        except CorruptError as exc:  # damaged before we even started: the same sticky halt
            self._halt(exc)
            return 0.0
        except CAUGHT as exc:
            if not passing(exc):
                raise
            return self._retry(now, exc, "writer.open_retry", OPEN_RETRY_FIRST_S)
        if self.refusal is not None:
            self.log.warning("writer.refusal_lifted", cause=self.refusal.cause)
            self.refusal = None
        self._backoff = None
        self.log.info("writer.started", backend=self.store.kind, cursor=str(self.cursor), **figures)
        return None

    def _retry(self, now: float, exc: Exception, event: str, first: float | None) -> float:
        """Publish a retryable failure and return the pause before retrying."""
        error = self.error = self.store.describe(exc)
        if self.store.reconnect_on_error:
            self.store.disconnect()
        first = self.cfg.poll_interval if first is None else first
        pause = first if self._backoff is None else min(self._backoff * 2, MAX_BACKOFF_S)
        self._backoff = pause
        if isinstance(exc, SharedMemoryError):  # an unusable -shm file: say what it is
            self.log.error("writer.shared_memory_unusable", error=error, sleep=pause)
        else:
            self.log.warning(event, error=error, kind=type(exc).__name__, sleep=pause)
        self._publish(now, idle=False, error=error, at_once=True)
        return pause

    # -- one unit of work ------------------------------------------------------------------

    def step(self, now: float, *, linger: float = 0.0) -> bool:
        """Do one unit of work; False when there was nothing to do (idle). ``linger``
        (seconds): after a commit, steps that find the spool's end within that time only set
        ``lingering`` (the running loop waits for the next op before its upkeep,
        ``workers.writer_upkeep``); ``until_idle`` never lingers. Raises the store error
        tree. The store is checked before any write and told after, so a file or WAL
        replaced in between is caught before the next transaction."""
        self.store.check()
        try:
            return self._step(now, linger)
        finally:
            if self.store.connected:
                self.store.committed()

    def _step(self, now: float, linger: float) -> bool:
        began = time.monotonic()
        # Waiting clients are rung as soon as the chunk is committed, before its log line.
        done = self.drain.step(on_commit=self._ring_applied)
        if done.entries:
            self.observe_commit(time.monotonic() - began)  # read+apply+commit
            self._committed(now, full=done.result.rows >= self.cfg.chunk_rows)
            return True
        return self._caught_up(now, linger=linger)
