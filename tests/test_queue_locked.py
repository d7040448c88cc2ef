"""``queue.db`` locked by another process past huey's busy timeout (a ``sqlite3`` shell in a
transaction): every caller gets the queue's one outage error, never a raw driver error; the
writer stays up, reports the outage and applies the spool; status says so; the job queued
before the lock runs once it is released. Real lock holder process, real huey queue.db."""

from __future__ import annotations

import pytest
from harness import InProcessWriter, job_runs
from test_schedule_locked import held_lock

from quill.jobs.errors import QueueUnavailableError
from quill.jobs.queues import build_for
from quill.ops.status import health


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home")
    h.append("session.create", {"session_id": "s1", "source": "cli"})
    h.until_idle()
    build_for(h.cfg).enqueue("auto_prune")
    yield h
    h.close()


def test_a_locked_queue_is_an_outage_the_writer_rides_out(w):
    with held_lock(w.cfg.queue_db, "python"):
        with pytest.raises(QueueUnavailableError) as caught:
            build_for(w.cfg).enqueue("snapshot")
        assert "locked" in str(caught.value)
        w.say("s1", "applied while the queue is locked")
        w.turn()  # the drain: the queue is not needed
        w.turn()  # the job runner meets the lock: an outage, not a crash
        assert w.status()["queue_error"] and "locked" in w.status()["queue_error"]
        assert health.queue_state(w.cfg, None)["unavailable_since"] is not None
    for _ in range(200):
        w.turn(1.0)  # past the outage's backoff
        if ("auto_prune", "ok") in job_runs(w):
            break
    assert ("auto_prune", "ok") in job_runs(w)
    assert w.status()["queue_error"] is None
