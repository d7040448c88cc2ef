"""The job-worker process: a huey consumer (one worker thread) for jobs that do not write
the store.

It publishes its status (``quill.home.RunDir``): tasks in flight, and for the running one its
name, start time and timeout (from the job catalog), through huey's signals. "Idle" is decided
from it, and the supervisor kills and restarts a consumer whose job outlives its timeout — a
thread cannot be interrupted, a process can, and the consumer has no child processes that could
outlive it (huey's process workers did, after a kill -9).
"""

from __future__ import annotations

import time
from typing import Any

from huey import signals

from quill.home import RunDir, Settings
from quill.jobs import catalog
from quill.jobs.queues import build_for


def run(cfg: Settings, log: Any) -> None:
    """Run the consumer until SIGTERM/SIGINT (huey installs its own handlers)."""
    queues = build_for(cfg)  # queue.db, or the shared Redis of [queue] url
    run_dir = RunDir(cfg.home, log)  # a full disk is reported, never fatal
    in_flight = {"n": 0}

    @queues.worker.signal(signals.SIGNAL_EXECUTING)
    def _started(signal: str, task: Any, *args: Any) -> None:
        in_flight["n"] += 1
        spec = catalog.BY_NAME.get(task.name)
        run_dir.publish(
            "consumer",
            {
                "in_flight": in_flight["n"],
                "last": task.name,
                "started_at": time.time(),
                "timeout": spec.timeout if spec else None,
            },
        )

    @queues.worker.signal(signals.SIGNAL_COMPLETE, signals.SIGNAL_ERROR, signals.SIGNAL_RETRYING)
    def _finished(signal: str, task: Any, *args: Any) -> None:
        if signal != signals.SIGNAL_RETRYING:
            in_flight["n"] = max(0, in_flight["n"] - 1)
        run_dir.publish(
            "consumer", {"in_flight": in_flight["n"], "last": task.name, "last_signal": signal}
        )

    run_dir.publish("consumer", {"in_flight": 0})
    # One consumer per fleet: a run a previous consumer started and never finished (kill -9
    # mid-check) is marked interrupted. Queued after that consumer's own records (FIFO).
    queues.tasks[catalog.CLOSE_INTERRUPTED](runner="consumer", before=time.time())
    log.info("consumer.started")
    consumer = queues.worker.create_consumer(
        workers=1, worker_type="thread", periodic=False, initial_delay=0.05, max_delay=1.0
    )
    consumer.run()
    log.info("consumer.stopped")
