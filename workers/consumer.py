"""The job-worker process: a huey consumer (one worker process) for jobs that do not write
the store.

It publishes ``run/consumer.json`` with the number of tasks in flight (through huey's
signals) so "idle" can be decided without guessing.
"""
from __future__ import annotations

from typing import Any

from huey import signals

from jobs.queues import build
from ops.config import Config

from . import status


def run(cfg: Config, log: Any) -> None:
    """Run the consumer until SIGTERM/SIGINT (huey installs its own handlers)."""
    queues = build(cfg.queue_db)
    path = cfg.run_dir / "consumer.json"
    in_flight = {"n": 0}

    @queues.worker.signal(signals.SIGNAL_EXECUTING)
    def _started(signal: str, task: Any, *args: Any) -> None:
        in_flight["n"] += 1
        status.publish(path, {"in_flight": in_flight["n"], "last": task.name})

    @queues.worker.signal(signals.SIGNAL_COMPLETE, signals.SIGNAL_ERROR, signals.SIGNAL_RETRYING)
    def _finished(signal: str, task: Any, *args: Any) -> None:
        if signal != signals.SIGNAL_RETRYING:
            in_flight["n"] = max(0, in_flight["n"] - 1)
        status.publish(path, {"in_flight": in_flight["n"], "last": task.name, "last_signal": signal})

    status.publish(path, {"in_flight": 0})
    log.info("consumer.started")
    # A worker *process*: huey enforces task timeouts there (SIGALRM), so a hung snapshot or
    # check is interrupted instead of blocking every later job.
    consumer = queues.worker.create_consumer(workers=1, worker_type="process", periodic=False,
                                             initial_delay=0.05, max_delay=1.0)
    consumer.run()
    log.info("consumer.stopped")
