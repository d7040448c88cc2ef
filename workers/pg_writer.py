"""The writer of a data dir whose store is a shared PostgreSQL server (``[store] url``).

Same contract as the SQLite writer (workers/writer.py): one writer per spool (the lease in
``run/writer.lock``), chunks of about ``chunk_rows`` rows, each one transaction that also
moves this spool's cursor (``store.postgres.apply``). What differs:

* the cursor row is keyed by the data dir's spool id (``spool.identity``), so several hosts'
  writers share one store;
* the server being down, a lost connection, a deadlock or a serialization failure are
  ``TransientError``: the writer closes the connection, backs off (0.5 s doubling to 5 s),
  reconnects and re-reads its cursor from the store — a COMMIT whose answer was lost is then
  seen as applied, never applied twice;
* no FTS slices, guard or WAL checkpoints: PostgreSQL maintains its indexes in the
  transaction and its own storage (autovacuum). Its store queue carries the job-run records
  of this host's consumer (``record_job_run``), written when the spool is drained;
  PostgreSQL's maintenance jobs run in the consumer (``jobs.pg_jobs``).
Producers never wait on any of this: they append to the local spool.

``drain`` is the one drain routine (the loop, ``quill recover`` on a PostgreSQL store).
"""
from __future__ import annotations

import threading
import time
from typing import Any

from quill.home import Settings
from quill.jobs.queues import build_for
from quill.spool import Position, Spool, START
from quill.spool import retention
from quill.spool.identity import load_or_create
from quill.store.errors import CorruptError
from quill.store.postgres import PostgresBackend, halt

from .job_runner import StoreJobRunner
from .drain_base import RETRYABLE, DrainWriter

#: How often an idle writer collects its spool (seconds).
GC_INTERVAL_S = 3600.0


class PgWriter(DrainWriter):
    """Drains this data dir's spool into the PostgreSQL store at ``cfg.store_url``."""

    def __init__(self, cfg: Settings, log: Any):
        super().__init__(cfg, log)
        self.spool_id = load_or_create(cfg.spool_id_path)
        self.backend: PostgresBackend | None = None
        self.jobs: StoreJobRunner | None = None
        self._next_gc = time.monotonic() + 60.0

    def run(self, stop: threading.Event) -> None:
        """Take the lease and drain until ``stop``. Raises ``LeaseHeldError`` when another
        writer of this data dir is alive."""
        self.lease.acquire()
        try:
            def halted(stop: threading.Event, exc: CorruptError) -> bool:
                self._halted(stop, exc)
                return True  # the halt was lifted: drain on
            self.loop(stop, self._connected_step, first_backoff=0.5, on_corrupt=halted, on_retry=self._disconnect)
        finally:
            self._disconnect()
            self.lease.release()
            self.log.info("writer.stopped", cursor=str(self.cursor), spool_id=self.spool_id, **self.totals)

    def _halted(self, stop: threading.Event, exc: CorruptError) -> None:
        """Sticky halt while the store is halted (``store.postgres.halt``: amcheck found
        damage, on any host) or the server reported corruption: apply nothing, publish the
        cause, keep recording job runs (bookkeeping, so the failed check shows in job
        history), and resume once the halt is lifted (``quill recover`` after REINDEX or a
        restore). Corruption the server reported while this writer applied a chunk is made
        the store's halt first, so every host stops and ``quill recover`` decides (without it
        the writer would retry the chunk at once, in a loop). Producers keep appending to the
        spool meanwhile."""
        cause = {"cause": type(exc).__name__, "detail": str(exc), "at": time.time(),
                 "cursor": str(self.cursor), "next": "quill recover (after REINDEX or a restore)"}
        self.log.critical("writer.halt", backend="postgres", **cause)
        recorded = False  # True once the store holds a halt: its absence then means "lifted"
        while not stop.is_set():
            self.run_dir.publish("writer", {"halted": True, "halt": cause, "idle": False, "backend": "postgres",
                                            "spool_id": self.spool_id, "cursor": str(self.cursor)})
            try:
                if self.backend is None:
                    self._connect()
                if halt.read(self.backend.conn) is None:
                    if recorded:
                        self.log.warning("writer.halt_lifted", backend="postgres", cursor=str(self.cursor))
                        return
                    halt.declare(self.backend.conn, cause["cause"], cause["detail"], cause["at"])
                recorded = True
                while self.jobs is not None and self.jobs.run_one(self.backend.conn, idle=True):
                    pass
            except CorruptError:
                pass  # still damaged where a job-run record or the halt row lives: stay halted
            except RETRYABLE as err:
                self._disconnect()
                self.log.warning("writer.retry", error=f"{type(err).__name__}: {err}", kind=type(err).__name__)
            stop.wait(2.0)

    def _connected_step(self) -> bool:
        if self.backend is None:
            self._connect()
        return self.step()

    def _connect(self) -> None:
        self.backend = PostgresBackend(self.cfg.store_url, self.spool_id)
        if self.jobs is None:  # this host's store queue: job-run records from its consumer
            spool = Spool(self.cfg.spool_dir, segment_bytes=self.cfg.segment_bytes)
            self.jobs = StoreJobRunner(build_for(self.cfg), self.log, spool, self.cfg)
        cur = self.backend.read_cursor()
        self.cursor = Position(*cur) if cur else START
        self.log.info("writer.started", backend="postgres", spool_id=self.spool_id, cursor=str(self.cursor))

    def _disconnect(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None

    def step(self) -> bool:
        """Apply one chunk; when there is none, seal torn tails and publish idle. Returns
        False when there was nothing to do."""
        entries, _ = self.drain_step(self.backend.apply_chunk)
        if entries:
            self._publish(idle=False)
            return True
        if self.jobs is not None and self.jobs.run_one(self.backend.conn, idle=True):
            return True
        if time.monotonic() >= self._next_gc:
            self._next_gc = time.monotonic() + GC_INTERVAL_S
            gone = self.gc_spool()
            if gone["deleted"]:
                self.log.info("writer.spool_gc", **gone)
        sealed = self.seal_torn_tails()
        self._publish(idle=not sealed)
        return sealed

    def gc_spool(self, now: float | None = None) -> dict[str, Any]:
        """Delete spool segments this store has applied (the committed cursor is past their
        last byte) that are older than ``spool.retention_s``. On a PostgreSQL store there is
        no local snapshot: the database is backed up by the server (pg_dump, base backups),
        and recovery replays from the restored cursor — so keep ``retention_s`` longer than
        the backup interval. The newest segment is never deleted. Returns ``{"deleted":
        [segment numbers], "bytes_freed"}``."""
        return retention.collect(self.cfg.spool_dir, self.cursor, self.cursor, self.cfg.spool_retention_s, now)

    def _publish(self, *, idle: bool, error: str | None = None) -> None:
        self.publish(idle, {"backend": "postgres", "spool_id": self.spool_id, "fts_indexed_upto": 0,
                            "error": error, "job": None})


def drain(cfg: Settings, log: Any, *, stop: threading.Event | None = None) -> dict[str, Any]:
    """Apply this data dir's spool to the PostgreSQL store from the cursor the store holds to
    the spool's end (``quill recover`` after a restore). Returns the writer's totals plus
    ``spool_id``, ``from`` and ``to`` cursors. Raises the store error tree (a server that
    cannot be reached is ``TransientError``) and ``LeaseHeldError`` while a writer runs."""
    writer = PgWriter(cfg, log)
    writer.lease.acquire()
    try:
        writer._connect()
        start = str(writer.cursor)
        while not (stop and stop.is_set()) and writer.step():
            pass
        return {"spool_id": writer.spool_id, "from": start, "to": str(writer.cursor), **writer.totals}
    finally:
        writer._disconnect()
        writer.lease.release()


__all__ = ["PgWriter", "drain"]
