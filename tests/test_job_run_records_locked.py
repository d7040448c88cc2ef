"""A worker job's run records while ``queue.db`` is locked by another process's transaction
(a busy queue under load, past its busy timeout): the job worker's start and outcome records
(``jobs.run_records``) are never lost unsaid. A record the queue refuses is held and sent at
the next try (the consumer's next poll), the outcome is sent even when the start was not, and
the refusal is logged and said on the job's error. The lock is real: a second process holding
``BEGIN EXCLUSIVE`` on ``queue.db``; the production writer applies the records."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from harness import InProcessWriter, job_runs
from test_schedule_locked import held_lock

from quill.jobs import catalog
from quill.jobs import queues as job_queues
from quill.jobs.outage import QueueOutage
from quill.jobs.queues import build_for, run_recorded
from quill.workers import consumer


@dataclass(frozen=True)
class _Spec(catalog.JobSpec):
    """A worker job whose code is ``body`` (the test's), recorded like any other."""

    body: Callable[..., dict[str, Any]] = lambda: {}

    @property
    def func(self) -> Callable[..., dict[str, Any]]:
        return self.body


class _Log:
    """A structlog-style logger keeping ``(level, event, fields)``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **fields: self.lines.append((level, event, fields))

    def events(self) -> list[str]:
        return [event for _, event, _ in self.lines]


@pytest.fixture
def w(tmp_path, monkeypatch):
    # Refused after 0.2 s instead of 10 s: the lock is never released while it is held.
    monkeypatch.setattr(job_queues, "QUEUE_BUSY_TIMEOUT_S", 0.2, raising=False)
    h = InProcessWriter(tmp_path / "home")
    h.append("session.create", {"session_id": "s1", "source": "cli"})
    h.until_idle()
    yield h
    h.close()


def _drain(w) -> None:
    """The writer runs what the store queue holds, until it is empty."""
    while w.writer.jobs.run_one(w.writer.store, idle=True):
        pass


def _spec(body: Callable[..., dict[str, Any]]) -> _Spec:
    return _Spec("snapshot", "worker", "", "test job", None, {}, body=body)


def test_a_run_whose_start_record_the_locked_queue_refused_still_records_its_outcome(w):
    queues = build_for(w.cfg)
    queues.log = log = _Log()
    locks = contextlib.ExitStack()
    locks.enter_context(held_lock(w.cfg.queue_db, "python"))

    def body() -> dict[str, Any]:
        locks.close()  # the queue answers again before the run ends
        raise RuntimeError("the snapshot could not be written")

    with pytest.raises(RuntimeError):
        run_recorded(_spec(body), queues, {}, runner="consumer")
    _drain(w)
    assert job_runs(w) == [("snapshot", "error")]
    assert "job_run.unrecorded" in log.events()  # the refused start was said


def test_an_outcome_the_locked_queue_refused_is_sent_at_the_consumers_next_poll(w):
    locks = contextlib.ExitStack()

    def body() -> dict[str, Any]:
        locks.enter_context(held_lock(w.cfg.queue_db, "python"))  # taken as the run ends
        raise RuntimeError("the snapshot could not be written")

    queues = build_for(w.cfg)
    queues.log = log = _Log()
    with pytest.raises(RuntimeError) as raised:
        run_recorded(_spec(body), queues, {}, runner="consumer")
    locks.close()
    _drain(w)
    assert job_runs(w) == [("snapshot", "running")]  # only the start reached the store so far
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "not in `quill jobs history` yet" in notes and "unreachable" in notes
    assert ("error", "job_run.unrecorded") in [(lv, ev) for lv, ev, _ in log.lines]
    # The consumer's next poll of the queue (its dequeue, as huey calls it) sends it first.
    consumer._tolerate_outages(
        queues,
        QueueOutage("consumer", log),
        threading.Event(),
        lambda in_flight=None, **task: None,
        time.time(),
        str(w.cfg.snapshots_dir),
    )
    assert queues.worker.dequeue() is None
    _drain(w)
    assert job_runs(w) == [("snapshot", "error")]


def test_a_run_with_both_records_refused_is_recorded_once_at_the_next_run(w):
    queues = build_for(w.cfg)
    with held_lock(w.cfg.queue_db, "python"):
        figures = run_recorded(_spec(lambda: {"bytes": 1}), queues, {}, runner="consumer")
    assert "unreachable" in figures["unrecorded"]  # taken; its record is owed, and said so
    # The same process's next run sends what it owes first: the finished run, once (its
    # late start never reopens it as running).
    run_recorded(_spec(lambda: {"bytes": 2}), queues, {}, runner="consumer")
    _drain(w)
    assert job_runs(w) == [("snapshot", "ok"), ("snapshot", "ok")]
