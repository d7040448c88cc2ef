"""The purge's scrub of the live store: run the ``scrub`` store job through the writer.

A deleted session's words stay in FTS5 index segments until they are merged, and its rows'
bytes in ``state.db``'s free space and freed pages (``store.apply.deletes``'s secure
deletion of a ``purge: true`` delete zeroes only the cells that delete frees), and every
later snapshot copies them. Only the writer writes ``state.db``
(docs/architecture.md, "Processes"), so ``quill spool purge`` has the writer run the
``scrub`` job (``jobs.store_jobs.scrub``) and waits for its ``job_runs`` record:

* a writer is running (its lease is held): the job goes on the store queue; the writer runs
  it between drain chunks and records it (``workers.job_runner``);
* no writer (fleet stopped, or no fleet ever started): this process takes the writer lease,
  as ``quill spool replay`` into the live store does, and runs the job the way the writer
  does: start row, the job on a writer connection, outcome row.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quill.jobs import catalog
from quill.ops.client.errors import StorageError, WaitTimeoutError
from quill.store.errors import CantOpenError, LeaseHeldError
from quill.store.lease import Lease
from quill.store.read.reader import Reader
from quill.store.sqlite.connection import open_writer
from quill.store.sqlite.job_runs import RUNNING, record_job_run

JOB = "scrub"
#: Seconds ``scrub_live_store`` waits for a running writer to record the job (a VACUUM of a
#: large store takes tens of seconds, and the writer may be finishing a drain chunk first).
WAIT_S = 600.0


def _offline(db_path: Path) -> dict[str, Any]:
    """Run the job here, as the writer would (the caller holds the writer lease)."""
    conn = open_writer(db_path)
    try:
        started = time.time()
        record_job_run(conn, JOB, started, None, RUNNING, {"runner": "cli"})
        try:
            figures = catalog.get(JOB).func(conn)
        except Exception as exc:
            record_job_run(
                conn,
                JOB,
                started,
                time.time(),
                "error",
                {"runner": "cli"},
                "".join(traceback.format_exception_only(exc)).strip(),
            )
            raise
        figures = {**figures, "runner": "cli"}
        record_job_run(conn, JOB, started, time.time(), "ok", figures)
        return figures
    finally:
        conn.close()


def _through_writer(db_path: Path, enqueue: Callable[..., None], wait_s: float) -> dict[str, Any]:
    """Queue the job for the running writer and wait for its outcome in ``job_runs``."""
    from quill.home import RUN_DIR, WAITERS_DIR
    from quill.ops.client.wait import wait_job_run

    def runs() -> list[dict[str, Any]]:
        try:
            with Reader(db_path) as r:
                return r.job_runs(job=JOB, limit=5)
        except CantOpenError:
            return []

    queued_at = time.time()
    enqueue()
    waiters = db_path.parent / RUN_DIR / WAITERS_DIR  # the data dir's (Settings.waiters_dir)
    run = wait_job_run(waiters, runs, queued_at, wait_s)
    if run is not None:
        if run["outcome"] != "ok":
            raise StorageError(
                f"the writer's {JOB} job ended {run['outcome']}: {run['error']}",
                hint=f"`quill jobs history --job {JOB}`; then re-run the purge",
            )
        return dict(run["figures"] or {})
    raise WaitTimeoutError(
        f"{JOB} is queued but the writer recorded no run within {wait_s:g} s",
        hint=f"is the writer halted? `quill status`; `quill jobs history --job {JOB}` "
        "shows the outcome later; then re-run the purge",
    )


def scrub_live_store(
    db_path: Path, enqueue: Callable[..., None] | None = None, wait_s: float = WAIT_S
) -> dict[str, Any]:
    """Scrub ``db_path`` (a data dir's ``state.db``: its run dir is ``db_path.parent/run``,
    ``quill.home.Settings``) through the writer (module doc). ``enqueue``: puts the ``scrub``
    job on this data dir's store queue (no parameters); without it a
    running writer cannot be reached and ``WaitTimeoutError`` says so. Returns the job's
    figures (``jobs.store_jobs.scrub``, plus ``runner``). Raises ``WaitTimeoutError`` (the
    writer recorded no run in ``wait_s`` seconds), ``StorageError`` (its run failed) and the
    store error tree (a run here)."""
    from quill.home import RunDir

    db_path = Path(db_path)
    try:
        lease = Lease(RunDir(db_path.parent).lock("writer")).acquire()
    except LeaseHeldError:
        lease = None
    if lease is not None:
        try:
            return _offline(db_path)
        finally:
            lease.release()
    if enqueue is None:
        raise WaitTimeoutError(
            "a writer is running and no store queue was given to reach it",
            hint="run `quill spool purge ID…` (it queues the scrub job for the writer)",
        )
    return _through_writer(db_path, enqueue, wait_s)
