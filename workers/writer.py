"""The writer: the only process that writes ``state.db``.

Loop (docs/architecture.md, "Processes"): read spool entries from the committed cursor → apply them in
chunks of about ``chunk_rows`` message rows, each chunk one transaction that also moves the
cursor → bring the FTS index up by one bounded slice → run at most one queued store job →
when there is nothing to do, seal torn tails, publish "idle" and sleep ``poll_interval``.

Sticky halt: on structural corruption (``CorruptError``) the writer stops writing, records the
cause in ``run/halt.json`` and stays up doing nothing, so the supervisor does not restart it
into the same damage; producers keep appending to the spool meanwhile.
"""
from __future__ import annotations

import errno
import shutil
import threading
import time
from functools import partial
from typing import Any

import apsw

from quill.home import Halt, Settings
from quill.jobs.queues import build_for
from quill.spool import Position, Spool, START
from quill.spool.segments import list_segments
from quill.store import fts_repair, index_slice, open_writer, read_cursor
from quill.store.apply import apply_chunk
from quill.store.errors import CorruptError, DiskFullError, SharedMemoryError, StoreIOError, TransientError
from quill.store.guard import FileGuard
from quill.store.recovery import swap_in
from quill.store.indexer import indexed_upto

from quill.jobs.store_jobs import close_interrupted, wal_bytes

from . import status
from .drain_base import DrainWriter
from .job_runner import TRUNCATE_RETRY_S, TRUNCATE_WAL_BYTES, StoreJobRunner

class Writer(DrainWriter):
    """One writer for one data dir. ``run(stop)`` blocks until ``stop`` is set."""

    def __init__(self, cfg: Settings, log: Any):
        super().__init__(cfg, log)
        self.conn: apsw.Connection | None = None
        self.guard: FileGuard | None = None
        # Chunk apply+commit latency (seconds), published for /metrics and `quill status`.
        self.commit_hist: dict[str, Any] = {"counts": [0] * len(status.COMMIT_BUCKETS_S), "count": 0, "sum": 0.0}
        self.jobs: StoreJobRunner | None = None
        self._was_busy = False
        self._next_truncate = 0.0                 # monotonic time of the next idle TRUNCATE try
        self._wal_blocked_since: float | None = None  # epoch s: a reader has held the WAL since

    # -- lifecycle -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Take the lease, open the store and drain until ``stop``. Raises ``LeaseHeldError``
        when another writer is alive."""
        self.lease.acquire()
        try:
            halted = self.run_dir.halt(self.cfg.state_db)
            if halted:
                self.log.error("writer.halted", **halted.to_json())
                self._idle_halted(stop, halted)
                return
            missing = self._history_missing()
            if missing:
                cause = Halt("StoreMissing", missing, time.time())
                self.run_dir.record_halt(cause, self.cfg.state_db)
                self.log.critical("writer.halt", **cause.to_json())
                self._idle_halted(stop, cause)
                return
            try:
                opened = self._open(stop)
            except CorruptError as exc:  # damaged before we even started: same sticky halt
                self._halt(stop, exc)
                return
            if not opened:
                return
            self.jobs = StoreJobRunner(build_for(self.cfg), self.log,
                                       Spool(self.cfg.spool_dir, segment_bytes=self.cfg.segment_bytes), self.cfg)
            cur = read_cursor(self.conn)
            self.cursor = Position(*cur) if cur else START
            # Runs the previous writer started and never finished (kill -9 mid-VACUUM …).
            closed = close_interrupted(self.conn, "writer", time.time())["interrupted"]
            self._truncate()  # a killed VACUUM or bulk drain can leave a WAL as big as the store
            # Both are our own commits (the checkpoint writes state.db): the guard must know,
            # or the first step's check reads the new mtime as another process's write.
            self.guard.committed()
            self.log.info("writer.started", cursor=str(self.cursor), interrupted_runs=closed)
            self._loop(stop)
        finally:
            self._close()
            self.lease.release()
            self.log.info("writer.stopped", cursor=str(self.cursor), **self.totals)

    def _halt(self, stop: threading.Event, exc: Exception) -> None:
        """Sticky halt: close without checkpointing (the WAL stays as evidence), record the
        cause and the next command in run/halt.json, then wait for `quill recover`."""
        cause = Halt(type(exc).__name__, str(exc), time.time(), cursor=str(self.cursor))
        self._close(keep_wal=True)
        if not self.run_dir.record_halt(cause, self.cfg.state_db):
            self.log.error("writer.halt_unrecorded", path=str(self.run_dir.halt_file))
        self.log.critical("writer.halt", **cause.to_json())
        self._idle_halted(stop, cause)

    def _open(self, stop: threading.Event) -> bool:
        """Open the store and its guard, waiting out a full disk or a busy file (opening
        creates the -wal and -shm files, which needs space) or an unusable -shm file (reported
        as what it is, not a crash loop). False if stopped meanwhile. A journal mode other
        than WAL, found at open, is corrected and logged."""
        backoff = 0.5
        while not stop.is_set():
            try:
                self.conn = open_writer(
                    self.cfg.state_db, synchronous=self.cfg.synchronous,
                    on_journal_mode=lambda old: self.log.warning(
                        "writer.journal_mode_corrected", was=old, now="wal", path=str(self.cfg.state_db),
                        why="the store was switched to another journal mode while Quill was stopped; "
                            "Quill needs WAL (readers never block the writer)"))
                self.guard = FileGuard(self.conn, self.cfg.state_db)
                return True
            except (TransientError, DiskFullError, StoreIOError) as exc:
                error = self._describe(exc)
                self._close()
                if isinstance(exc, SharedMemoryError):
                    self.log.error("writer.shared_memory_unusable", error=error, sleep=backoff)
                else:
                    self.log.warning("writer.open_retry", error=error, sleep=backoff)
                self.run_dir.publish("writer", {"idle": False, "halted": False, "error": error,
                                                "cursor": str(self.cursor)})
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        return False

    def _loop(self, stop: threading.Event) -> None:
        # Nothing of a failed chunk was committed: pause and retry. A full disk shows up as
        # SQLITE_FULL or as an I/O error whose errno is ENOSPC (tmpfs, shared memory); either
        # way the drain waits for space, losing nothing. Corruption: sticky halt.
        def halt(stop: threading.Event, exc: CorruptError) -> bool:
            self._halt(stop, exc)
            return False
        self.loop(stop, self.step, first_backoff=self.cfg.poll_interval, on_corrupt=halt, describe=self._describe)

    def _describe(self, exc: Exception) -> str:
        """The error for status: disk-full cases say so, with the free bytes."""
        errno_ = self.conn.system_errno if self.conn is not None else 0
        if isinstance(exc, DiskFullError) or errno_ in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(self.cfg.state_db.parent).free
            return f"disk full: {exc} ({free} bytes free on {self.cfg.state_db.parent}); the drain resumes when space returns"
        return f"{type(exc).__name__}: {exc}" + (f" (errno {errno_})" if errno_ else "")

    def _history_missing(self) -> str | None:
        """Why creating a fresh state.db here would silently lose history, or None.

        A new store is built from the spool alone; that is complete only if the spool still
        starts at segment 1 and no snapshot exists (once a snapshot exists, spool GC may have
        removed what it covers)."""
        if self.cfg.state_db.exists():
            return None
        segments = list_segments(self.cfg.spool_dir)
        snapshots = sorted(self.cfg.snapshots_dir.glob("snapshot-*.db"))
        if snapshots or (segments and segments[0] > 1):
            return (f"{self.cfg.state_db} is missing and the spool alone no longer holds the full history "
                    f"(oldest segment {segments[0] if segments else None}, {len(snapshots)} snapshot(s)); "
                    "`quill recover` restores the newest snapshot and replays the spool")
        return None

    def _close(self, *, keep_wal: bool = False) -> None:
        """Close the store. ``keep_wal``: skip the checkpoint-on-close, so after damage the
        WAL stays as evidence and nothing is checkpointed into a file that may be wrong."""
        if self.conn is not None:
            if keep_wal:
                self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            self.conn.close()
            self.conn = None
        if self.guard is not None:
            self.guard.close()  # after the connection: closing an fd drops SQLite's locks
            self.guard = None

    def _idle_halted(self, stop: threading.Event, cause: Halt) -> None:
        """Stay up without writing until ``quill recover`` asks for a swap (run/swap.json),
        do the swap (we hold the lease and no connection), then exit to be restarted."""
        while not stop.is_set():
            request = self.run_dir.swap_request()  # only while its `quill recover` is waiting
            if request:
                evidence = swap_in(request.new, self.cfg.state_db)
                self.run_dir.clear_halt()
                self.run_dir.clear_swap()
                self.log.warning("writer.swapped", new=str(request.new), evidence=str(evidence))
                return
            self.run_dir.publish("writer", {"halted": True, "halt": cause.to_json(), "idle": False})
            stop.wait(0.5)

    # -- one step --------------------------------------------------------------------------

    def step(self) -> bool:
        """Do one unit of work; returns False when there was nothing to do (idle).

        The file guard is checked before any write and told after, so a file or WAL
        replaced in between is caught before the next transaction."""
        self.guard.check()
        try:
            return self._step()
        finally:
            self.guard.committed()

    def _step(self) -> bool:
        began = time.monotonic()
        entries, _ = self.drain_step(partial(apply_chunk, self.conn))
        if entries:
            status.observe(self.commit_hist, time.monotonic() - began)  # read + apply + commit of one chunk
            self._publish(idle=False)
            self._index()
            self.jobs.run_one(self.conn, idle=False, on_start=self._job_started)
            self._was_busy = True
            return True
        if self._index():
            return True
        if self.jobs.run_one(self.conn, idle=True, on_start=self._job_started):
            return True
        if self._was_busy or time.monotonic() >= self._next_truncate:  # idle: the moment to TRUNCATE
            self._was_busy = False
            self._truncate()
        sealed = self.seal_torn_tails()
        self._publish(idle=not sealed)
        return sealed

    def _index(self) -> int:
        """One FTS slice. Damage confined to the search indexes detaches them and queues a
        rebuild (writes go on); damage anywhere else propagates and halts the writer."""
        try:
            return index_slice(self.conn, self.cfg.index_slice_rows)
        except CorruptError as exc:
            damaged = fts_repair.classify(self.conn)
            if damaged["canonical"] or not damaged["fts"]:
                raise
            fts_repair.detach(self.conn, f"{type(exc).__name__}: {exc}; damaged: {damaged['fts']}")
            self.jobs.queues.enqueue("fts_rebuild")
            self.log.error("writer.fts_detached", damaged=damaged["fts"], error=str(exc))
            return 0

    def _truncate(self) -> None:
        figures = self.jobs.truncate_if_idle(self.conn)
        self._next_truncate = time.monotonic() + TRUNCATE_RETRY_S
        if figures and figures["blocked_by_reader"]:
            self._wal_blocked_since = self._wal_blocked_since or time.time()
        elif figures or wal_bytes(self.conn) < TRUNCATE_WAL_BYTES:
            self._wal_blocked_since = None

    def _job_started(self, name: str) -> None:
        self._publish(idle=False, job=name)

    def _publish(self, *, idle: bool, error: str | None = None, job: str | None = None) -> None:
        self.publish(idle, {"job": job, "fts_indexed_upto": indexed_upto(self.conn), "error": error,
                            "wal_blocked_since": self._wal_blocked_since, "commit_hist": self.commit_hist})
