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

from quill.jobs.queues import build_for
from quill.ops.config import Config
from quill.spool import Entry, Position, Quarantine, Spool, SpoolReader, START
from quill.spool import retention
from quill.spool.identity import load_or_create
from quill.store.apply import take_chunk
from quill.store.errors import CorruptError, DiskFullError, StoreIOError, TransientError
from quill.store.lease import Lease
from quill.store.postgres import PostgresBackend, halt

from .job_runner import StoreJobRunner
from .rundir import RunDir

_READ_BYTES = 8 << 20
#: How often an idle writer collects its spool (seconds).
GC_INTERVAL_S = 3600.0
_RETRYABLE = (TransientError, DiskFullError, StoreIOError)


class PgWriter:
    """Drains this data dir's spool into the PostgreSQL store at ``cfg.store_url``."""

    def __init__(self, cfg: Config, log: Any):
        self.cfg = cfg
        self.log = log
        self.run_dir = RunDir(cfg.home)
        self.lease = Lease(self.run_dir.lock("writer"))
        self.reader = SpoolReader(cfg.spool_dir)
        self.quarantine = Quarantine(cfg.spool_dir)
        self.spool_id = load_or_create(cfg.spool_id_path)
        self.backend: PostgresBackend | None = None
        self.cursor: Position = START
        self.totals = {"applied": 0, "duplicates": 0, "rejected": 0, "rows": 0, "chunks": 0}
        self._last_idle_publish = 0.0
        self.jobs: StoreJobRunner | None = None
        self._next_gc = time.monotonic() + 60.0

    def run(self, stop: threading.Event) -> None:
        """Take the lease and drain until ``stop``. Raises ``LeaseHeldError`` when another
        writer of this data dir is alive."""
        self.lease.acquire()
        try:
            backoff = 0.5
            while not stop.is_set():
                try:
                    if self.backend is None:
                        self._connect()
                    busy = self.step()
                    backoff = 0.5
                except CorruptError as exc:
                    self._halted(stop, exc)
                    continue
                except _RETRYABLE as exc:
                    self._disconnect()
                    error = f"{type(exc).__name__}: {exc}"
                    self.log.warning("writer.retry", error=error, kind=type(exc).__name__, sleep=backoff)
                    self._publish(idle=False, error=error)
                    stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                if not busy:
                    stop.wait(self.cfg.poll_interval)
        finally:
            self._disconnect()
            self.lease.release()
            self.log.info("writer.stopped", cursor=str(self.cursor), spool_id=self.spool_id, **self.totals)

    def _halted(self, stop: threading.Event, exc: CorruptError) -> None:
        """Sticky halt while the store is halted (``store.postgres.halt``: amcheck found
        damage, on any host) or the server reported corruption: apply nothing, publish the
        cause, keep recording job runs (bookkeeping, so the failed check shows in job
        history), and resume once the halt is lifted (``quill recover`` after REINDEX or a
        restore). Producers keep appending to the spool meanwhile."""
        cause = {"cause": type(exc).__name__, "detail": str(exc), "at": time.time(),
                 "cursor": str(self.cursor), "next": "quill recover (after REINDEX or a restore)"}
        self.log.critical("writer.halt", backend="postgres", **cause)
        while not stop.is_set():
            self.run_dir.publish("writer", {"halted": True, "halt": cause, "idle": False, "backend": "postgres",
                                            "spool_id": self.spool_id, "cursor": str(self.cursor)})
            try:
                if self.backend is None:
                    self._connect()
                while self.jobs is not None and self.jobs.run_one(self.backend.conn, idle=True):
                    pass
                if halt.read(self.backend.conn) is None:
                    self.log.warning("writer.halt_lifted", backend="postgres", cursor=str(self.cursor))
                    return
            except CorruptError:
                pass  # still damaged where a job-run record or the halt row lives: stay halted
            except _RETRYABLE as err:
                self._disconnect()
                self.log.warning("writer.retry", error=f"{type(err).__name__}: {err}", kind=type(err).__name__)
            stop.wait(2.0)

    def _connect(self) -> None:
        self.backend = PostgresBackend(self.cfg.store_url, self.spool_id)
        if self.jobs is None:  # this host's store queue: job-run records from its consumer
            self.jobs = StoreJobRunner(build_for(self.cfg), self.log, Spool(self.cfg.spool_dir), self.cfg)
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
        entries = take_chunk(self.reader.read(self.cursor, max_bytes=_READ_BYTES), self.cfg.chunk_rows)
        if entries:
            self._apply(entries)
            return True
        if self.jobs is not None and self.jobs.run_one(self.backend.conn, idle=True):
            return True
        if time.monotonic() >= self._next_gc:
            self._next_gc = time.monotonic() + GC_INTERVAL_S
            gone = self.gc_spool()
            if gone["deleted"]:
                self.log.info("writer.spool_gc", **gone)
        sealed = False
        for seg in range(self.cursor.segment, self.reader.end().segment + 1):
            if self.reader.seal_torn_tail(seg):
                self.log.warning("writer.torn_tail_sealed", segment=seg)
                sealed = True
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

    def _apply(self, entries: list[Entry]) -> None:
        result = self.backend.apply_chunk(entries, self._reject)
        self.cursor = entries[-1].next
        self.totals["chunks"] += 1
        for key in ("applied", "duplicates", "rejected", "rows"):
            self.totals[key] += getattr(result, key)
        self.log.info("writer.chunk", entries=len(entries), rows=result.rows, applied=result.applied,
                      duplicates=result.duplicates, rejected=result.rejected, cursor=str(self.cursor))
        self._publish(idle=False)

    def _reject(self, entry: Entry, reason: str, detail: str) -> None:
        path = self.quarantine.put(entry.position, reason, detail, entry.raw, entry.record)
        self.log.warning("writer.quarantined", position=str(entry.position), reason=reason,
                         detail=detail, path=str(path))

    def _publish(self, *, idle: bool, error: str | None = None) -> None:
        now = time.monotonic()
        if idle and now - self._last_idle_publish < 0.25:
            return
        self._last_idle_publish = now if idle else 0.0
        self.run_dir.publish("writer", {
            "idle": idle, "halted": False, "cursor": str(self.cursor), "backend": "postgres",
            "spool_id": self.spool_id, "fts_indexed_upto": 0, "error": error, "job": None, **self.totals})


def drain(cfg: Config, log: Any, *, stop: threading.Event | None = None) -> dict[str, Any]:
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
