"""A worker job's run records (``job_runs`` rows), sent to the writer through the store queue.

A run sends two records: its start (outcome ``running``) before the work, its outcome after.
Neither may be lost unsaid when the queue cannot take it right now (``queue.db`` busy or
locked past its busy timeout under load, Redis down: ``QueueUnavailableError``):

* the outcome is sent whether or not the start was: ``record_job_run`` inserts the row when
  no start row came first, so a run whose start could not be sent is still recorded;
* a record the queue refused is held (``Queues.owed``, in memory, one per run: a later record
  of the same run replaces it, so a late start never reopens a finished row) and is sent
  before anything else the next time this process records a run or polls the queue
  (``send_owed``: the consumer calls it before each dequeue);
* every refusal is said: logged (``job_run.unrecorded``) when the queues carry a log, in the
  figures a run returns (``unrecorded``) and as a note on the error a failed run re-raises.

Records still owed when the process ends are lost with it; the consumer logs them
(``consumer.records_lost``), and a CLI run, which first tries them again for a while
(``settle``: a ``queue.db`` another process keeps locked), says so (``unrecorded``). A start
row that did reach the store is then closed as interrupted by the next start of its runner.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from quill.home import runner_tag
from quill.jobs import catalog
from quill.jobs.errors import QueueUnavailableError
from quill.jobs.outage import persist
from quill.store.sqlite.job_runs import RUNNING


def run_recorded(
    spec: Any, queues: Any, params: dict[str, Any], *, runner: str, one_shot: bool = False
) -> dict[str, Any]:
    """Run worker job ``spec`` (``catalog.JobSpec``) here with ``params``, recording it in
    ``job_runs`` through the store queue of ``queues`` (``jobs.queues.Queues``): a start row
    (outcome ``running``, ``figures.runner``) sent *before* the work, then the outcome. A
    process killed mid-run leaves the start row, which the next start of its ``runner`` marks
    ``interrupted``. Returns the job's figures; re-raises its error.

    The queue is optional to the work: when it is unreachable the job still runs (a snapshot
    taken by ``quill snapshot`` while Redis is down is still taken), its records are owed
    (module docstring) and the figures say why the outcome is not in ``job_runs`` yet
    (``unrecorded``: the ``QueueUnavailableError`` text). A job error is re-raised with a note
    saying so, and one naming each follow-up job that could not be queued. ``one_shot`` (a process
    that ends after the run: the CLI): records still owed after the run are tried again
    while ``queue.db`` stays locked, within a bound (``settle``), before the run says so."""
    started = time.time()
    tag = runner_tag(runner)  # this process: a row it leaves running is proved gone later
    record(queues, job=spec.name, started_at=started, outcome=RUNNING, figures=tag)
    try:
        figures = spec.func(**params)
    except Exception as exc:
        unrecorded = record(
            queues,
            job=spec.name,
            started_at=started,
            ended_at=time.time(),
            outcome="error",
            figures=tag,
            error="".join(traceback.format_exception_only(exc)).strip(),
        )
        if unrecorded is not None and one_shot:
            unrecorded = settle(queues)
        if unrecorded is not None:
            exc.add_note(f"this run is not in `quill jobs history` yet: {said(unrecorded)}")
        for name, followup in getattr(exc, "followups", ()):  # e.g. quick_check → fts_rebuild
            try:
                queues.enqueue(name, **followup)
            except QueueUnavailableError as queue_exc:
                exc.add_note(f"{name} was not queued: {queue_exc}")
        raise  # huey logs it and retries with the spec's delay
    unrecorded = record(
        queues,
        job=spec.name,
        started_at=started,
        ended_at=time.time(),
        outcome="ok",
        figures={**figures, **tag},
    )
    if unrecorded is not None and one_shot:
        unrecorded = settle(queues)
    return figures if unrecorded is None else {**figures, "unrecorded": said(unrecorded)}


def said(exc: BaseException) -> str:
    """``exc``'s message followed by its notes (``add_note``), ``; ``-separated."""
    return "; ".join([str(exc), *getattr(exc, "__notes__", ())])


def record(queues: Any, **run: Any) -> QueueUnavailableError | None:
    """Send one ``job_runs`` record (``record_job_run``'s keyword arguments) through the
    store queue of ``queues``, after the records owed before it. Returns None when it was
    sent; else the queue's error: the record is owed (``send_owed`` sends it later) and, when
    ``queues.log`` is set, the refusal is logged."""
    queues.owed[(run["job"], run["started_at"])] = run  # replaces an earlier record of the run
    refused = send_owed(queues)
    if refused is not None and queues.log is not None:
        queues.log.error(
            "job_run.unrecorded",
            job=run["job"],
            outcome=run["outcome"],
            error=str(refused),
            owed=len(queues.owed),
        )
    return refused


def send_owed(queues: Any) -> QueueUnavailableError | None:
    """Send the records ``queues`` owes the store queue, oldest first. Returns None when none
    is left, else the queue's error (that record and the later ones stay owed)."""
    while queues.owed:
        key, run = next(iter(queues.owed.items()))
        try:
            queues.tasks[catalog.RECORD_RUN](**run)
        except QueueUnavailableError as exc:
            return exc
        del queues.owed[key]
    return None


def settle(queues: Any, within_s: float | None = None) -> QueueUnavailableError | None:
    """Send the records ``queues`` owes before a one-shot process (a CLI command) ends: tried
    again while another process keeps ``queue.db`` locked, for at most ``within_s`` seconds
    (default ``jobs.outage.LOCK_WAIT_S``; ``jobs.outage.persist``). Returns None when
    nothing is owed any more, else the queue's error (its notes say how long it tried); the
    records are then lost with the process."""

    def once() -> None:
        refused = send_owed(queues)
        if refused is not None:
            raise refused

    try:
        persist(once, within_s)
    except QueueUnavailableError as exc:
        return exc
    return None
