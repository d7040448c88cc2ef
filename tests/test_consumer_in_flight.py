"""The job worker's published task count against the queue it takes tasks from: a task the
consumer took out of ``queue.db`` is counted in flight before huey looks at it (its revocation
flag, a read of ``queue.db`` that can wait out a busy lock, comes first) and until huey's
execute of it returned. The supervisor's until-idle check reads both (no task pending, none
in flight); a moment with neither would let it stop the fleet under a job that then never
records its run. Real ``queue.db``, the real huey consumer hooks, a real job."""

from __future__ import annotations

import threading
import time

from harness import InProcessWriter, job_runs
from test_schedule_locked import held_lock

from quill.jobs.outage import QueueOutage
from quill.jobs.queues import build_for
from quill.workers import consumer


class _Log:
    def __getattr__(self, level: str):
        return lambda event, **fields: None


def test_a_taken_task_is_in_flight_from_its_dequeue_to_the_end_of_its_execute(tmp_path):
    """quick_check queued; the consumer's dequeue takes it: it is then no longer pending and
    already counted in flight, also while huey waits on a locked ``queue.db`` before running
    it; once executed its records are pending in the store queue and nothing is in flight.
    Old code: counted only from huey's ``executing`` signal, after that wait."""
    w = InProcessWriter(tmp_path / "home")
    try:
        w.say("s", "hello")
        w.until_idle()
        queues = build_for(w.cfg)
        published: list[int | None] = []  # the in-flight counts the consumer published
        consumer._tolerate_outages(
            queues,
            QueueOutage("consumer", _Log()),
            threading.Event(),
            lambda in_flight=None, **task: published.append(in_flight),
            time.time(),
            str(w.cfg.snapshots_dir),
        )
        queues.enqueue("quick_check")
        task = queues.worker.dequeue()
        assert task is not None and task.name == "quick_check"
        assert queues.pending()["worker"] == 0  # out of the queue ...
        assert published == [1], published  # ... and in flight
        with held_lock(w.cfg.queue_db, "python"):  # huey's first look waits on the queue
            execute = threading.Thread(target=queues.worker.execute, args=(task,))
            execute.start()
            execute.join(0.5)
            assert execute.is_alive() and published == [1], published
        execute.join(120)
        assert not execute.is_alive()
        assert published == [1, 0], published
        assert queues.pending()["store"] >= 1  # its run records, for the writer to apply
        while w.writer.jobs.run_one(w.writer.store, idle=True):
            pass
        assert ("quick_check", "ok") in job_runs(w)
    finally:
        w.close()
