"""Running store jobs on the writer's connection, between drain chunks.

* Jobs come from the ``quill-store`` huey queue; huey is the durable queue, the writer is the
  executor (only it may write the store).
* ``needs_idle`` jobs (VACUUM, FTS optimize: tens of seconds on a large store) run only when
  the spool is drained; otherwise they go back on the queue. Producers never wait either way:
  they only append to the spool.
* A failing job is recorded (``job_runs``) and retried with exponential backoff from its
  spec's ``retry_delay``, up to ``retries`` times, via huey's schedule. A failing job never
  stops the drain; only corruption (``CorruptError``) propagates, to halt the writer.
* Idle TRUNCATE: while the writer is idle with a WAL over ``TRUNCATE_WAL_BYTES`` it tries a
  TRUNCATE checkpoint (at most every ``TRUNCATE_RETRY_S``), never waiting for readers: a
  reader on an old snapshot makes it return at once, logged as "blocked by a reader", and it
  is tried again later — so the WAL goes back to 0 bytes soon after the reader lets go
  (docs/architecture.md: TRUNCATE only when idle or after VACUUM).
"""
from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Callable
from typing import Any

import apsw
from huey.utils import utcnow

from quill.jobs import catalog
from quill.jobs.queues import Queues, resolve_params
from quill.jobs.store_jobs import RUNNING, close_interrupted, record_job_run, wal_bytes, wal_checkpoint
from quill.spool import Spool
from quill.store.errors import CorruptError

#: Idle WAL size above which the writer truncates it (bytes). Modest: a 16 MB WAL left after
#: a reader let go was reported as "stays until the next batch" (issue 11.4).
TRUNCATE_WAL_BYTES = 1 << 20
#: Seconds between idle TRUNCATE attempts while the WAL stays above the threshold.
TRUNCATE_RETRY_S = 5.0


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
        self.funcs = {catalog.RECORD_RUN: record_job_run, catalog.CLOSE_INTERRUPTED: close_interrupted,
                      **{j.name: j.func for j in catalog.JOBS if j.kind == "store"}}

    def run_one(self, conn: apsw.Connection, *, idle: bool,
                on_start: Callable[[str], None] = lambda name: None) -> bool:
        """Run at most one queued job; returns True if one ran (or failed). ``on_start(name)``
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
        if recorded:  # the start row first: a run killed mid-way (VACUUM …) still shows up
            record_job_run(conn, task.name, started, None, RUNNING, {"runner": "writer"})
        on_start(task.name)
        outcome, figures, error = "ok", {}, None
        try:
            func = self.funcs.get(task.name)
            if func is None:
                raise KeyError(f"unknown store job {task.name!r}")
            lead = (conn, self.spool) if spec is not None and spec.emits_ops else (conn,)
            kwargs = resolve_params(spec, self.cfg, task.kwargs) if spec else task.kwargs
            figures = func(*lead, *task.args, **kwargs) or {}
        except CorruptError:
            raise
        except Exception as exc:
            outcome, error = "error", "".join(traceback.format_exception_only(exc)).strip()
            self.log.error("writer.job_failed", job=task.name, error=error, retries_left=task.retries)
            self._retry(task, spec)
        if recorded:
            record_job_run(conn, task.name, started, time.time(), outcome, {**figures, "runner": "writer"}, error)
            self.log.info("writer.job", job=task.name, outcome=outcome, **figures)
        return True

    def _retry(self, task: Any, spec: catalog.JobSpec | None) -> None:
        if spec is None:
            return
        attempt = spec.retries - task.retries  # 0 for the first failure
        if task.retries <= 0:
            return
        task.retries -= 1
        delay = spec.retry_delay * (2 ** attempt)
        task.eta = utcnow() + dt.timedelta(seconds=delay)  # huey's clock: naive UTC (utc=True)
        self.queues.store.add_schedule(task)

    def truncate_if_idle(self, conn: apsw.Connection) -> dict[str, Any] | None:
        """TRUNCATE-checkpoint a WAL over ``TRUNCATE_WAL_BYTES`` (the writer is idle, or has
        just started); returns the checkpoint's figures, or None when the WAL is small. Never
        waits: a reader holding an old snapshot shows as ``blocked_by_reader``."""
        if wal_bytes(conn) < TRUNCATE_WAL_BYTES:
            return None
        started = time.time()
        figures = wal_checkpoint(conn, "TRUNCATE")
        if figures["blocked_by_reader"]:
            self.log.warning("writer.checkpoint_blocked", reason="blocked by a reader: a read transaction holds "
                             "an old snapshot, so the WAL cannot be reset yet; retried while idle", **figures)
        else:
            record_job_run(conn, "wal_checkpoint", started, time.time(), "ok", {**figures, "runner": "writer"})
            self.log.info("writer.idle_truncate", **figures)
        return figures
