"""Running store jobs on the writer's connection, between drain chunks.

* Jobs come from the ``quill-store`` huey queue; huey is the durable queue, the writer is the
  executor (only it may write the store).
* ``needs_idle`` jobs (VACUUM, FTS optimize: tens of seconds on a large store) run only when
  the spool is drained; otherwise they go back on the queue. Producers never wait either way:
  they only append to the spool.
* A failing job is recorded (``job_runs``) and retried with exponential backoff from its
  spec's ``retry_delay``, up to ``retries`` times, via huey's schedule. A failing job never
  stops the drain; only corruption (``CorruptError``) propagates, to halt the writer.
* The runner never holds a connection: each job runs through the store contract's
  ``run_job``, which hands the store's own connection to the job function.
* The queue is optional to the drain. When it is unreachable (``QueueUnavailableError``:
  Redis down, ``queue.db`` locked) ``run_one`` runs nothing and returns False, so the writer
  goes on applying the spool; the queue is tried again with backoff, the outage (since when,
  why) is in ``queue_fields`` for the writer's status and logged without tracebacks
  (``jobs.outage.QueueOutage``). What the runner
  owes the queue (a task taken but put back, a retry, a job the writer queues) is held in
  memory and handed over first when the queue is back: at most once, as huey delivers.
* The store is optional to the queue too. When a write of the job history meets a store that
  cannot take it now (``RETRYABLE``: ``state.db`` locked by another process past the busy
  timeout, a full disk), nothing taken is dropped: a job whose start row could not be
  written goes back on the queue unrun; a ``record_job_run`` from the job worker goes back
  too; a finished job's outcome row is held in memory and written first at the next try
  (lost only if the writer stops before; its start row is then closed as interrupted). A job
  that itself meets such a failure is retried without using up one of its retries. The
  error is raised to the writer, which backs off and says why in its status.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Callable
from typing import Any

from quill.home import is_exhaustion, runner_tag
from quill.jobs import catalog
from quill.jobs.errors import QueueDamagedError, QueueUnavailableError
from quill.jobs.huey_lazy import utcnow
from quill.jobs.outage import QueueOutage
from quill.jobs.queues import Queues, resolve_params
from quill.spool import Spool
from quill.store.errors import CorruptError, DiskFullError, StoreIOError, TransientError
from quill.store.sqlite import effects
from quill.store.sqlite.job_runs import RUNNING, close_interrupted, record_job_run

#: Store failures after which nothing of the statement was committed and that pass by
#: themselves (a lock held by another process, a full disk, an I/O error): the writer pauses
#: and retries; a job or job-run record they interrupt is kept, never dropped.
RETRYABLE = (TransientError, DiskFullError, StoreIOError)


class StoreJobRunner:
    """Executes queued store jobs for one writer."""

    def __init__(
        self, queues: Queues | Callable[[], Queues], log: Any, spool: Spool, cfg: Any = None
    ):
        """``queues``: the queues, or a function that opens them (called at first use, and
        again after it raised ``QueueUnavailableError``: an unopenable ``queue.db`` is an
        outage like any other). ``spool``: the producer handle jobs with ``emits_ops`` append
        their ops to (the data dir's own spool, which this writer drains). ``cfg``: the data
        dir's config, from which each job's parameters are resolved when it runs
        (``resolve_params``)."""
        self._queues: Queues | None = queues if isinstance(queues, Queues) else None
        self._open_queues: Callable[[], Queues] | None = (
            None if isinstance(queues, Queues) else queues
        )
        self.log = log
        self.spool = spool
        self.cfg = cfg
        self.funcs = {
            catalog.RECORD_RUN: record_job_run,
            catalog.CLOSE_INTERRUPTED: close_interrupted,
            **{j.name: j.func for j in catalog.JOBS if j.kind == "store"},
        }
        self.outage = QueueOutage("writer", log)
        self._owed: list[Callable[[], None]] = []  # puts to make once the queue is back
        #: ``(job, started_at)`` of the recorded run in progress; left set when the job raised
        #: ``CorruptError``, so the writer's halt names the run it could not finish.
        self.current: tuple[str, float] | None = None
        #: Outcome rows of finished jobs the store could not take yet, oldest first.
        self._records: list[tuple[Any, ...]] = []

    @property
    def queues(self) -> Queues:
        """The queues, opened on first use. Raises ``QueueUnavailableError``."""
        if self._queues is None:
            assert self._open_queues is not None  # no queues were given: their opener was
            self._queues = self._open_queues()
        return self._queues

    def queue_fields(self) -> dict[str, Any]:
        """``{"queue_error", "queue_down_since"}`` for the writer's status: the outage's
        message and its start (epoch s), both None while the queue is reachable."""
        return self.outage.fields()

    def enqueue(self, name: str, **params: Any) -> None:
        """Queue job ``name`` (``Queues.enqueue``); while the queue is unreachable it is held
        and queued once the queue is back (the writer never waits for the queue)."""
        if self.outage.down is None:
            try:
                self.queues.enqueue(name, **params)
                return
            except QueueUnavailableError as exc:
                self.outage.failed(exc)
        self._owed.append(lambda: self.queues.enqueue(name, **params))

    def run_one(
        self, store: Any, *, idle: bool, on_start: Callable[[str], None] = lambda name: None
    ) -> bool:
        """Run at most one queued job on ``store`` (``store.contract.Store``); returns True if
        one ran (or failed). ``idle``: the spool is drained (``needs_idle`` jobs may run).
        Raises ``CorruptError`` (the writer halts) and the retryable store errors of the
        job-run records; a job's own other failures are recorded and retried. ``on_start(name)``
        is called before a job runs (the writer publishes it, so a long job is not taken for
        a hung writer)."""
        while self._records:  # outcomes the store could not take: theirs is the first write
            store.run_job(record_job_run, *self._records[0])
            self._records.pop(0)
        if not self.outage.ready():
            return False
        try:
            task = self._take()
        except QueueUnavailableError as exc:
            self.outage.failed(exc)
            if isinstance(exc, QueueDamagedError) and self._open_queues is not None:
                self._queues = None  # opened afresh at the next try: the file moved aside
            return False
        self.outage.answered()
        if task is None:
            return False
        spec = catalog.BY_NAME.get(task.name)
        if spec is not None and spec.needs_idle and not idle:
            self._put(lambda: self.queues.store.enqueue(task))  # back of the queue: runs
            return False  # once the drain is caught up
        recorded = task.name not in (catalog.RECORD_RUN, catalog.CLOSE_INTERRUPTED)
        started = time.time()
        self.current = None
        # Who runs it (host, boot, pid, start ticks; the spool and its claim): whoever finds
        # the row still running after this process died can prove it gone and close it.
        tag = writer_tag(store)
        if recorded:  # the start row first: a run killed mid-way (VACUUM …) still shows up
            start = dict(tag)
            try:
                if task.name in effects.JUDGED_JOBS and store.kind == "sqlite":  # judged if killed
                    start["before"] = store.run_job(effects.measure)
                store.run_job(record_job_run, task.name, started, None, RUNNING, start)
            except RETRYABLE:
                self._put(lambda: self.queues.store.enqueue(task))  # taken, not begun: kept
                raise
            self.current = (task.name, started)
        on_start(task.name)
        outcome, figures, error = "ok", {}, None
        try:
            func = self.funcs.get(task.name)
            if func is None:
                raise KeyError(f"unknown store job {task.name!r}")
            lead = (self.spool,) if spec is not None and spec.emits_ops else ()
            kwargs = resolve_params(spec, self.cfg, task.kwargs) if spec else task.kwargs
            figures = store.run_job(func, *lead, *task.args, **kwargs) or {}
        except CorruptError:
            raise
        except Exception as exc:
            if not recorded and isinstance(exc, RETRYABLE):  # a job-run record: kept
                self._put(lambda: self.queues.store.enqueue(task))
                raise
            outcome, error = "error", "".join(traceback.format_exception_only(exc)).strip()
            self.log.error(
                "writer.job_failed", job=task.name, error=error, retries_left=task.retries
            )
            # Neither a lock nor descriptors running out say anything about the job.
            self._retry(task, spec, overloaded=is_exhaustion(exc) or isinstance(exc, RETRYABLE))
        self.current = None
        if recorded:
            self._records.append(
                (task.name, started, time.time(), outcome, {**figures, **tag}, error)
            )
            store.run_job(record_job_run, *self._records[0])
            self._records.pop(0)
            self.log.info("writer.job", job=task.name, outcome=outcome, **figures)
        return True

    def _take(self) -> Any:
        """Hand over what is owed, move due retries to the queue, take the next task (or
        None). Raises ``QueueUnavailableError``; whatever was taken but not handed back by
        then is owed (kept in order, put first when the queue is back)."""
        huey = self.queues.store
        while self._owed:
            self._owed[0]()
            self._owed.pop(0)
        due = list(huey.read_schedule())  # retries whose backoff has passed: popped now
        while due:
            try:
                huey.enqueue(due[0])
            except QueueUnavailableError:
                self._owed += [lambda t=t: huey.enqueue(t) for t in due]
                raise
            due.pop(0)
        return huey.dequeue()

    def _put(self, put: Callable[[], None]) -> None:
        """Make one put to the queue now, or owe it when the queue is unreachable."""
        try:
            put()
        except QueueUnavailableError as exc:
            self._owed.append(put)
            self.outage.failed(exc)

    def _retry(self, task: Any, spec: catalog.JobSpec | None, *, overloaded: bool) -> None:
        """Queue ``task`` again after a failure, ``spec.retry_delay`` doubling per attempt,
        while it has retries left. A failure for want of a file descriptor
        (``overloaded``) says nothing about the job: it is queued again after the job's
        delay whatever its retries, without using one up."""
        if spec is None:
            return
        attempt = spec.retries - task.retries  # 0 for the first failure
        if task.retries <= 0 and not overloaded:
            return
        if not overloaded:
            task.retries -= 1
        delay = spec.retry_delay * (2**attempt)
        task.eta = utcnow() + dt.timedelta(seconds=delay)  # huey's clock: naive UTC (utc=True)
        self._put(lambda: self.queues.store.add_schedule(task))


def writer_tag(store: Any) -> dict[str, Any]:
    """The ``runner`` figures of a job run by this writer (``home.runner_tag``): its process,
    with the spool id it writes for and, on a shared store, its claim on it."""
    return runner_tag("writer", spool_id=store.spool_id, claim=getattr(store, "holder_token", None))
