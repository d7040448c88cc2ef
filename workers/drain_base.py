"""What the writers of both backends share (``workers.writer`` for SQLite,
``workers.pg_writer`` for PostgreSQL): the lease, the spool reader and quarantine, the
cursor and running totals, the one drain step (``store.apply.drain_chunk`` with the backend's
``apply_chunk``), quarantining refused ops, sealing torn tails, and a throttled status
publication. Each writer adds its backend's opening, halting and idle work."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from quill.home import RunDir, Settings
from quill.spool import Entry, Position, Quarantine, SpoolReader, START
from quill.store.apply import ApplyFn, ChunkResult, drain_chunk
from quill.store.errors import CorruptError, DiskFullError, StoreIOError, TransientError
from quill.store.lease import Lease

#: Entries read per spool scan; bounds memory whatever the spool size.
READ_BYTES = 8 << 20
#: While idle the loop spins every poll_interval; one status write per this many seconds is
#: plenty for `quill status` and the supervisor's idle check.
IDLE_PUBLISH_S = 0.25
#: Failures after which nothing of the chunk was committed: pause, then retry the same chunk.
RETRYABLE = (TransientError, DiskFullError, StoreIOError)
#: The longest pause between retries (seconds); pauses double up to it.
MAX_BACKOFF_S = 5.0


class DrainWriter:
    """The shared state and steps of a writer for the data dir of ``cfg``."""

    def __init__(self, cfg: Settings, log: Any):
        self.cfg = cfg
        self.log = log
        self.run_dir = RunDir(cfg.home)
        self.lease = Lease(self.run_dir.lock("writer"))
        self.reader = SpoolReader(cfg.spool_dir)
        self.quarantine = Quarantine(cfg.spool_dir)
        self.cursor: Position = START
        self.totals = {"applied": 0, "duplicates": 0, "rejected": 0, "rows": 0, "chunks": 0}
        self._last_idle_publish = 0.0

    def drain_step(self, apply: ApplyFn) -> tuple[list[Entry], ChunkResult]:
        """Read and apply one chunk from the cursor (``drain_chunk``); on success move the
        cursor, add the figures to ``totals``, log ``writer.chunk``. Raises the store error
        tree (nothing of the chunk committed, the cursor unmoved)."""
        entries, result = drain_chunk(apply, self.reader, self.cursor, self.cfg.chunk_rows, self.reject,
                                      max_bytes=READ_BYTES)
        if entries:
            self.cursor = entries[-1].next
            self.totals["chunks"] += 1
            for key in ("applied", "duplicates", "rejected", "rows"):
                self.totals[key] += getattr(result, key)
            self.log.info("writer.chunk", entries=len(entries), rows=result.rows, applied=result.applied,
                          duplicates=result.duplicates, rejected=result.rejected, cursor=str(self.cursor))
        return entries, result

    def reject(self, entry: Entry, reason: str, detail: str) -> None:
        """Quarantine a refused op with its reason (called inside the chunk's transaction,
        before its commit, so a refused op is never lost). A record the quarantine's audit
        says an operator already retried or dropped (re-read after a restart) stays resolved."""
        path = self.quarantine.put(entry.position, reason, detail, entry.raw, entry.record)
        if path is None:
            self.log.info("writer.quarantine_resolved", position=str(entry.position), reason=reason)
            return
        self.log.warning("writer.quarantined", position=str(entry.position), reason=reason,
                         detail=detail, path=str(path))

    def seal_torn_tails(self) -> bool:
        """Terminate torn tails (a producer died mid-record) at or after the cursor's segment,
        so the next read quarantines them and the drain moves on. True if any was sealed."""
        sealed = False
        for seg in range(self.cursor.segment, self.reader.end().segment + 1):
            if self.reader.seal_torn_tail(seg):
                self.log.warning("writer.torn_tail_sealed", segment=seg)
                sealed = True
        return sealed

    def publish(self, idle: bool, fields: dict[str, Any]) -> None:
        """Publish the writer's status (``fields`` plus idle, cursor and totals); idle ones at
        most every ``IDLE_PUBLISH_S``."""
        now = time.monotonic()
        if idle and now - self._last_idle_publish < IDLE_PUBLISH_S:
            return
        self._last_idle_publish = now if idle else 0.0
        self.run_dir.publish("writer", {"idle": idle, "halted": False, "cursor": str(self.cursor),
                                        **fields, **self.totals})

    def loop(self, stop: threading.Event, step: Callable[[], bool], *, first_backoff: float,
             on_corrupt: Callable[[threading.Event, CorruptError], bool],
             on_retry: Callable[[], None] = lambda: None,
             describe: Callable[[Exception], str] = lambda exc: f"{type(exc).__name__}: {exc}") -> None:
        """Run ``step`` until ``stop`` (sleeping ``poll_interval`` when it returns False).
        A ``RETRYABLE`` failure committed nothing: ``on_retry`` (e.g. drop the connection),
        publish ``describe(exc)`` as the error, back off (``first_backoff`` doubling up to
        ``MAX_BACKOFF_S``) and retry. ``CorruptError`` goes to ``on_corrupt(stop, exc)``
        (the backend's sticky halt), which returns True to go on draining afterwards."""
        backoff = first_backoff
        while not stop.is_set():
            try:
                busy = step()
                backoff = first_backoff
            except CorruptError as exc:  # includes ReplacedError
                if not on_corrupt(stop, exc):
                    return
                continue
            except RETRYABLE as exc:
                on_retry()
                error = describe(exc)
                self.log.warning("writer.retry", error=error, kind=type(exc).__name__, sleep=backoff)
                self._publish(idle=False, error=error)
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if not busy:
                stop.wait(self.cfg.poll_interval)

    def _publish(self, *, idle: bool, error: str | None = None) -> None:
        """The writer's status publication (each writer adds its backend's fields)."""
        raise NotImplementedError
