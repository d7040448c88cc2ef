"""``quill recover`` on a PostgreSQL store (``[store] url``): replay this host's spool into the
store from the cursor the store holds.

After the database is restored from PostgreSQL's own backup (``pg_dump``/``pg_restore`` or a
base backup; README "Running on several machines"), the store's ``spool_cursor`` row for each
host is where that host's spool must resume: every batch after it is replayed, every batch
before it is already in the restored rows (and batch ids make any overlap a no-op). Each host
runs ``quill recover`` (or simply keeps its writer running: a writer that loses its
connection reconnects and re-reads its cursor, which is the same replay). There is no file to
swap and no snapshot: the database is the server's to back up.
"""

from __future__ import annotations

import time
from typing import Any

from quill.spool import SpoolReader
from quill.store.errors import LeaseHeldError
from quill.store.factory import open_reader, open_store
from quill.store.sqlite.job_runs import HALT_JOB, HALTED, RECOVER_JOB, record_job_run
from quill.workers.writer import Writer

#: How long ``recover`` waits for a running writer to replay the spool (seconds).
WAIT_FOR_WRITER_S = 600.0


def recover(cfg: Any, log: Any, *, accept_loss: bool = False) -> dict[str, Any]:
    """Replay the spool into the PostgreSQL store; returns ``{"backend": "postgres",
    "spool_id", "from", "to", "applied", "duplicates", "rejected", "rows", "replayed_by"}``
    (``replayed_by``: ``recover``, or ``writer`` when this host's writer is running and did the
    replay while we waited) and ``halt_lifted`` (see ``lift_halt``). Raises the store error tree
    (``TransientError``: the server is unreachable) and ``TimeoutError`` when a running writer
    does not catch up in time.

    ``accept_loss``: a store holding no cursor for this spool may start at the spool's oldest
    segment although segments before it were collected (``RunDir.accept_start``; without it
    the drain raises ``HistoryNotInSpoolError``); ``accepted_start`` is then that segment."""
    lifted = lift_halt(cfg, log)
    accepted = _accept_start(cfg, log) if accept_loss else None
    try:
        result = drain(cfg, log)
        return {
            "backend": "postgres",
            **result,
            "replayed_by": "recover",
            "halt_lifted": lifted,
            "accepted_start": accepted,
        }
    except LeaseHeldError:
        pass
    from quill.spool.identity import load_or_create

    spool_id = load_or_create(cfg.spool_id_path)
    deadline = time.monotonic() + WAIT_FOR_WRITER_S
    while True:
        end = SpoolReader(cfg.spool_dir).end()
        with open_reader(cfg, spool_id=spool_id) as reader:
            cursor = reader.figures()["cursor"]
        if cursor == f"{end.segment}:{end.offset}":
            return {
                "backend": "postgres",
                "spool_id": spool_id,
                "from": None,
                "to": cursor,
                "applied": None,
                "duplicates": None,
                "rejected": None,
                "rows": None,
                "replayed_by": "writer",
                "halt_lifted": lifted,
                "accepted_start": accepted,
            }
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the running writer has not replayed the spool to {end} (store cursor {cursor})"
            )
        time.sleep(0.5)


def _accept_start(cfg: Any, log: Any) -> int | None:
    """Record the segment after the spool's last gap as where this store may go on: the
    oldest segment when segment 1 was collected (a store with no cursor starts there), or one
    after segments deleted before they were applied (``SpoolGapError``). Returns it, or None
    when the spool has no gap."""
    from quill.home import RunDir
    from quill.spool.identity import load_or_create
    from quill.spool.segments import list_segments
    from quill.store.factory import location

    segments = list_segments(cfg.spool_dir)
    after_gap = [n for i, n in enumerate(segments) if n > (segments[i - 1] + 1 if i else 1)]
    first = after_gap[-1] if after_gap else None
    if first is not None:
        spool_id = load_or_create(cfg.spool_id_path)
        RunDir(cfg.home).accept_start(location(cfg), spool_id, first)
        log.warning("recover.start_accepted", first_segment=first, store=location(cfg))
    return first


def drain(cfg: Any, log: Any, *, stop: Any = None) -> dict[str, Any]:
    """Apply this data dir's spool to its PostgreSQL store from the cursor the store holds to
    the spool's end, as its writer does (``Writer.until_idle``: queued store jobs run, torn
    tails are sealed). ``stop``: a ``threading.Event`` that ends it early. Returns the drain's
    totals plus ``spool_id``, ``from`` and ``to`` cursors. Raises the store error tree (a
    server that cannot be reached is ``TransientError``) and ``LeaseHeldError`` while this
    data dir's writer runs."""
    return Writer(cfg, log).until_idle(stop)


def lift_halt(cfg: Any, log: Any) -> dict[str, Any] | None:
    """When the store is halted (``store.postgres.halt``: amcheck found damage), check it again
    with amcheck and lift the halt if it passes — after ``REINDEX INDEX …`` or a restore from
    backup — so every host's writer resumes, and record the halt and this recovery in the job
    history (``writer_halt``, ``recover``). Returns the lifted cause (None: not halted).
    Raises ``CorruptError`` naming the problems while the damage is still there."""
    from quill.store.errors import CorruptError
    from quill.store.postgres import halt

    began = time.time()
    backend = open_store(cfg, log, spool_id="maintenance")
    try:
        cause = backend.run_job(halt.read)
        if cause is None:
            return None
        check = backend.maintenance("integrity_check")
        if not check["ok"]:
            raise CorruptError(
                f"the store is still damaged: {check['problems'][:5]}; REINDEX the damaged "
                "indexes (or restore from backup), then run quill recover again"
            )
        backend.run_job(halt.clear)
        log.warning("recover.halt_lifted", **cause)
        # The halt row is gone with the halt: the job history keeps the incident.
        now = time.time()
        backend.run_job(
            record_job_run,
            HALT_JOB,
            float(cause.get("at") or began),
            now,
            HALTED,
            {"runner": "writer", **cause},
            f"{cause.get('cause')}: {cause.get('detail')}",
        )
        backend.run_job(
            record_job_run, RECOVER_JOB, began, now, "ok", {"runner": "cli", "halt_lifted": cause}
        )
        return cause
    finally:
        backend.close()
