"""The two huey queues, both in ``queue.db`` (never in ``state.db``):

* ``quill-store`` – jobs that write the store. Only the writer dequeues them and runs them on
  its own connection; huey is used as the durable queue, not as the executor.
* ``quill-jobs`` – jobs the huey consumer executes (snapshots, checks). Each run is timed and
  its record is sent to the writer through ``quill-store`` (``record_job_run``).

``queue.db`` uses journal_mode=TRUNCATE, not WAL: huey talks to it through the stdlib
``sqlite3`` and so the *system* SQLite, which may carry the WAL-reset corruption bug fixed in
3.51.3 (DESIGN.md, "Processes"). huey delivers at most once; every job is idempotent.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huey import SqliteHuey

from . import catalog
from .store_jobs import record_job_run

STORE_QUEUE = "quill-store"
WORKER_QUEUE = "quill-jobs"


@dataclass
class Queues:
    """Handles on both queues for one data dir, with every task registered."""

    store: SqliteHuey
    worker: SqliteHuey
    tasks: dict[str, Any] = field(default_factory=dict)

    def enqueue(self, name: str, **params: Any) -> None:
        """Enqueue job ``name`` with keyword ``params`` on the queue its kind uses."""
        if name not in self.tasks:
            catalog.get(name)  # raises KeyError naming the known jobs
        self.tasks[name](**params)

    def pending(self) -> dict[str, int]:
        """Tasks waiting in each queue (not counting one being executed)."""
        return {"store": self.store.pending_count(), "worker": self.worker.pending_count()}


def _huey(name: str, queue_db: Path) -> SqliteHuey:
    return SqliteHuey(name, filename=str(queue_db), journal_mode="truncate", results=False,
                      utc=True, timeout=10)


def build(queue_db: Path) -> Queues:
    """Open (creating) ``queue_db`` and register every job of ``jobs.catalog``."""
    queue_db = Path(queue_db)
    queue_db.parent.mkdir(parents=True, exist_ok=True)
    queues = Queues(_huey(STORE_QUEUE, queue_db), _huey(WORKER_QUEUE, queue_db))
    queues.tasks[catalog.RECORD_RUN] = queues.store.task(name=catalog.RECORD_RUN)(record_job_run)
    for spec in catalog.JOBS:
        if spec.kind == "store":
            queues.tasks[spec.name] = queues.store.task(
                name=spec.name, retries=spec.retries, retry_delay=spec.retry_delay)(spec.func)
        else:
            queues.tasks[spec.name] = queues.worker.task(
                name=spec.name, retries=spec.retries, retry_delay=spec.retry_delay)(
                    _recorded(spec, queues))
    return queues


def _recorded(spec: catalog.JobSpec, queues: Queues):
    """Wrap a worker job so every run (ok or error) is recorded in the store's job_runs."""
    def run(**params: Any) -> dict[str, Any]:
        started = time.time()
        try:
            figures = spec.func(**params)
        except Exception as exc:
            queues.tasks[catalog.RECORD_RUN](job=spec.name, started_at=started, ended_at=time.time(),
                                             outcome="error", error="".join(
                                                 traceback.format_exception_only(exc)).strip())
            for name, followup in getattr(exc, "followups", ()):  # e.g. quick_check → fts_rebuild
                queues.enqueue(name, **followup)
            raise  # huey logs it and retries with the spec's delay
        queues.tasks[catalog.RECORD_RUN](job=spec.name, started_at=started, ended_at=time.time(),
                                         outcome="ok", figures=figures)
        return figures
    run.__name__ = spec.name
    return run
