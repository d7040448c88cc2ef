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
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Callable
from typing import Any

from huey.utils import utcnow

from quill.jobs import catalog
from quill.jobs.queues import Queues, resolve_params
from quill.spool import Spool
from quill.store.errors import CorruptError
from quill.store.sqlite import effects
from quill.store.sqlite.job_runs import RUNNING, close_interrupted, record_job_run


class StoreJobRunner:
    """Executes queued store jobs for one writer."""

    def __init__(self, queues: Queues, log: Any, spool: Spool, cfg: Any = None):
        """``spool``: the producer handle jobs with ``emits_ops`` append their ops to (the
        data dir's own spool, which this writer drains). ``cfg``: the data dir's config, from
        which each job's parameters are resolved when it runs (``resolve_params``)."""
        self.queues = queues
        self.log = log
        self.spool = spool
        self.cfg = cfg
        self.funcs = {
            catalog.RECORD_RUN: record_job_run,
            catalog.CLOSE_INTERRUPTED: close_interrupted,
            **{j.name: j.func for j in catalog.JOBS if j.kind == "store"},
        }
        #: ``(job, started_at)`` of the recorded run in progress; left set when the job raised
        #: ``CorruptError``, so the writer's halt names the run it could not finish.
        self.current: tuple[str, float] | None = None

    def run_one(
        self, store: Any, *, idle: bool, on_start: Callable[[str], None] = lambda name: None
    ) -> bool:
        """Run at most one queued job on ``store`` (``store.contract.Store``); returns True if
        one ran (or failed). ``idle``: the spool is drained (``needs_idle`` jobs may run).
        Raises ``CorruptError`` (the writer halts) and the retryable store errors of the
        job-run records; a job's own other failures are recorded and retried. ``on_start(name)``
        is called before a job runs (the writer publishes it, so a long job is not taken for
        a hung writer)."""
        huey = self.queues.store
        for due in huey.read_schedule():  # retries whose backoff has passed
            huey.enqueue(due)
        task = huey.dequeue()
        if task is None:
            return False
        spec = catalog.BY_NAME.get(task.name)
        if spec is not None and spec.needs_idle and not idle:
            huey.enqueue(task)  # back of the queue; runs once the drain is caught up
            return False
        recorded = task.name not in (catalog.RECORD_RUN, catalog.CLOSE_INTERRUPTED)
        started = time.time()
        self.current = None
        if recorded:  # the start row first: a run killed mid-way (VACUUM …) still shows up
            start = {"runner": "writer"}
            if task.name in effects.JUDGED_JOBS and store.kind == "sqlite":  # judged if killed
                start["before"] = store.run_job(effects.measure)
            store.run_job(record_job_run, task.name, started, None, RUNNING, start)
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
            outcome, error = "error", "".join(traceback.format_exception_only(exc)).strip()
            self.log.error(
                "writer.job_failed", job=task.name, error=error, retries_left=task.retries
            )
            self._retry(task, spec)
        self.current = None
        if recorded:
            store.run_job(
                record_job_run,
                task.name,
                started,
                time.time(),
                outcome,
                {**figures, "runner": "writer"},
                error,
            )
            self.log.info("writer.job", job=task.name, outcome=outcome, **figures)
        return True

    def _retry(self, task: Any, spec: catalog.JobSpec | None) -> None:
        if spec is None:
            return
        attempt = spec.retries - task.retries  # 0 for the first failure
        if task.retries <= 0:
            return
        task.retries -= 1
        delay = spec.retry_delay * (2**attempt)
        task.eta = utcnow() + dt.timedelta(seconds=delay)  # huey's clock: naive UTC (utc=True)
        self.queues.store.add_schedule(task)
