"""Job history while ``state.db`` is locked by another process (a ``sqlite3`` shell or a
backup in a write transaction past the writer's busy timeout): the production ``Writer``
rides it out, and no job and no job-run record it took off the queue is lost. The lock is
real: a Python process holding ``BEGIN EXCLUSIVE`` on the store (WAL: writers wait, readers
read)."""

from __future__ import annotations

import time

import pytest
from harness import InProcessWriter, job_runs
from test_schedule_locked import held_lock

from quill.jobs import catalog
from quill.jobs.queues import build_for
from quill.store.errors import TransientError


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home")
    h.append("session.create", {"session_id": "s1", "source": "cli"})
    h.until_idle()
    yield h
    h.close()


def _run_one(w) -> bool:
    """One ``StoreJobRunner.run_one`` of the writer, as its turn makes it once the drain and
    the search index are done (they write first, so a lock taken before the turn stops them
    first: the job runner meets a lock that came between them and the job)."""
    return w.writer.jobs.run_one(w.writer.store, idle=True)


def _until(w, cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out; job_runs: {job_runs(w)}"
        try:
            _run_one(w)
        except TransientError:
            time.sleep(0.1)


def test_a_store_job_taken_while_the_store_is_locked_is_not_lost(w):
    build_for(w.cfg).enqueue("auto_prune")
    with held_lock(w.cfg.state_db, "python"):
        with pytest.raises(TransientError):  # the writer backs off and says why
            _run_one(w)
    _until(w, lambda: ("auto_prune", "ok") in job_runs(w))
    assert job_runs(w).count(("auto_prune", "ok")) == 1
    assert build_for(w.cfg).pending()["store"] == 0


def test_a_job_run_record_sent_while_the_store_is_locked_is_not_lost(w):
    t = time.time()
    build_for(w.cfg).tasks[catalog.RECORD_RUN](
        job="snapshot", started_at=t, ended_at=t + 1, outcome="ok", figures={"bytes": 1}
    )
    with held_lock(w.cfg.state_db, "python"):
        with pytest.raises(TransientError):
            _run_one(w)
    _until(w, lambda: ("snapshot", "ok") in job_runs(w))
    assert job_runs(w).count(("snapshot", "ok")) == 1


def test_the_writer_rides_out_a_locked_store_and_runs_the_job_after(w):
    build_for(w.cfg).enqueue("auto_prune")
    with held_lock(w.cfg.state_db, "python"):
        w.turn()  # SQLITE_BUSY after the busy timeout: retried, never fatal
        assert "locked" in w.status()["error"]
    for _ in range(50):
        w.turn()
        if ("auto_prune", "ok") in job_runs(w):
            break
    assert ("auto_prune", "ok") in job_runs(w)
