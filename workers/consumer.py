"""The job-worker process: a huey consumer (one worker thread) for jobs that do not write
the store.

It publishes its status (``quill.home.RunDir``): the task in flight (from the dequeue that took
it out of the queue until huey's execute of it returned), and for the running one its name,
start time and timeout (from the job catalog), through huey's signals. "Idle" is decided
from it, and the supervisor kills and restarts a consumer whose job outlives its timeout — a
thread cannot be interrupted, a process can, and the consumer has no child processes that could
outlive it (huey's process workers did, after a kill -9).

An unreachable queue (Redis down: ``QueueUnavailableError``) neither ends nor floods the
consumer: it waits with backoff (``jobs.outage.QueueOutage``), logs one line per outage (not a
traceback per poll), publishes the outage in its status and takes jobs again once the queue
answers.
"""

from __future__ import annotations

import time
from typing import Any

from quill.home import RunDir, Settings
from quill.jobs import catalog
from quill.jobs.errors import QueueUnavailableError
from quill.jobs.huey_lazy import signals
from quill.jobs.outage import QueueOutage
from quill.jobs.queues import Queues, build_for
from quill.jobs.run_records import send_owed

#: The longest single wait (s) while the queue is down: a stop is noticed within this.
WAIT_SLICE_S = 1.0


def run(cfg: Settings, log: Any) -> None:
    """Run the consumer until SIGTERM/SIGINT (huey installs its own handlers)."""
    queues = build_for(cfg)  # queue.db, or the shared Redis of [queue] url
    queues.log = log  # a job-run record the queue refuses is logged, and held (owed)
    run_dir = RunDir(cfg.home, log)  # a full disk is reported, never fatal
    outage = QueueOutage("consumer", log)
    # The published status besides the outage: ``in_flight`` is 1 from the dequeue that took a
    # task out of the queue until huey's execute of it returned (one worker thread), so there
    # is no moment at which a taken task is neither pending in the queue nor in flight: the
    # supervisor's until-idle check reads both and would stop the fleet under it.
    state: dict[str, Any] = {"in_flight": 0}

    def publish(in_flight: int | None = None, **task: Any) -> None:
        """Publish the status: ``in_flight`` when given; ``task`` (its name ``last``, its
        ``started_at`` and ``timeout``, its ``last_signal``) replaces the earlier task's."""
        if in_flight is not None:
            state["in_flight"] = in_flight
        if task:
            kept = state["in_flight"]
            state.clear()
            state.update(in_flight=kept, **task)
        run_dir.publish("consumer", {**state, **outage.fields()})

    @queues.worker.signal(signals.SIGNAL_EXECUTING)
    def _started(signal: str, task: Any, *args: Any) -> None:
        spec = catalog.BY_NAME.get(task.name)
        publish(last=task.name, started_at=time.time(), timeout=spec.timeout if spec else None)

    @queues.worker.signal(signals.SIGNAL_COMPLETE, signals.SIGNAL_ERROR, signals.SIGNAL_RETRYING)
    def _finished(signal: str, task: Any, *args: Any) -> None:
        publish(last=task.name, last_signal=signal)

    publish()
    log.info("consumer.started")
    consumer = queues.worker.create_consumer(
        workers=1, worker_type="thread", periodic=False, initial_delay=0.05, max_delay=1.0
    )

    _tolerate_outages(
        queues,
        outage,
        consumer.stop_flag,
        publish,
        time.time(),
        str(cfg.snapshots_dir),
    )
    consumer.run()
    refused = send_owed(queues)  # one last try: what is still owed dies with this process
    if refused is not None:
        log.error(
            "consumer.records_lost",
            runs=[f"{job} started at {started:.3f}" for job, started in queues.owed],
            error=str(refused),
        )
    log.info("consumer.stopped")


def _tolerate_outages(
    queues: Queues,
    outage: QueueOutage,
    stop: Any,
    publish: Any,
    started: float,
    snapshots_dir: str,
) -> None:
    """Route the consumer's two polls of the queue (its worker's ``dequeue``, its scheduler
    thread's ``read_schedule``) through ``outage``: while the queue is down they answer
    "nothing" (the worker after waiting out the backoff on ``stop``, in slices of at most
    ``WAIT_SLICE_S``), so huey neither logs a traceback per poll nor spins. ``publish()``
    writes the consumer's status (with ``outage.fields()``) when the outage starts or ends;
    ``publish(in_flight=1, last=NAME)`` when a dequeue took a task out of the queue, before it
    is returned to huey, and ``publish(in_flight=0)`` once huey's execute of it returned,
    whatever it did (ran it, scheduled it for later, found it revoked, lost its bookkeeping).

    The queue going away while a job runs reaches huey's bookkeeping around the job (the
    revocation flag, the result, the next task of a pipeline), which raises out of
    ``huey.execute``: that is the outage starting, not an error of the job (its own outcome
    is recorded, or owed, by ``jobs.run_records``), so it is reported like any other outage
    (the status, one line per outage) instead of huey's traceback, plus one line naming the
    task (``consumer.task_bookkeeping_lost``: a retry of a failed run may be what was lost).

    Before each dequeue the job-run records owed from earlier runs (``jobs.run_records``:
    the queue refused them) are sent first; a refusal is the outage too, and the dequeue
    waits for them.

    Before the first task is taken, the runs a previous consumer started and never finished
    (kill -9 mid-check) are marked interrupted, or judged from their effect (a snapshot made
    in ``snapshots_dir``) (``CLOSE_INTERRUPTED`` with ``before`` = ``started``, queued after
    that consumer's own records: FIFO); while the queue is down that waits too."""
    huey = queues.worker
    dequeue, read_schedule = huey.dequeue, huey.read_schedule
    closed = {"done": False}

    def guarded_dequeue() -> Any:
        if not outage.ready():
            stop.wait(min(outage.wait_s(), WAIT_SLICE_S))
            return None
        was_down = outage.down is not None
        try:
            refused = send_owed(queues)  # records of earlier runs first (jobs.run_records)
            if refused is not None:
                raise refused
            if not closed["done"]:
                queues.tasks[catalog.CLOSE_INTERRUPTED](
                    runner="consumer", before=started, snapshots_dir=snapshots_dir
                )
                closed["done"] = True
            task = dequeue()
        except QueueUnavailableError as exc:
            outage.failed(exc)
            if not was_down:
                publish()
            return None
        outage.answered()
        if task is not None:  # out of the queue: in flight before huey even looks at it
            publish(in_flight=1, last=task.name)
        elif was_down:
            publish()
        return task

    def guarded_read_schedule(*args: Any, **kwargs: Any) -> list[Any]:
        if outage.down is not None:
            return []  # the worker's polls find out when the queue is back
        try:
            return read_schedule(*args, **kwargs)
        except QueueUnavailableError as exc:
            outage.failed(exc)
            publish()
            return []

    execute = huey.execute

    def guarded_execute(task: Any, timestamp: Any = None) -> Any:
        try:
            return execute(task, timestamp)
        except QueueUnavailableError as exc:
            # The job's own outcome is recorded (or owed) by jobs.run_records; what is lost
            # here is huey's bookkeeping after it: a retry of a failed run among it.
            outage.failed(exc)
            outage.log.error("consumer.task_bookkeeping_lost", job=task.name, error=str(exc))
            return None
        finally:  # run, scheduled for later, revoked, expired or its bookkeeping lost
            publish(in_flight=0)

    huey.dequeue, huey.read_schedule = guarded_dequeue, guarded_read_schedule
    huey.execute = guarded_execute
