"""``SqliteStore``: the embedded store ``state.db`` behind the store contract.

It owns what writing one SQLite file needs, so the writer above it holds no apsw handle:

* the apsw connection (``store.sqlite.connection.open_writer``: WAL, schema, a journal mode found
  switched while Quill was stopped put back and logged) and, for the writer, the
  ``FileGuard`` that makes a replaced file or WAL a sticky halt before the next write;
* FTS indexing in slices, and damage confined to the search indexes detached (writes go on)
  while damage anywhere else halts;
* the sticky halt record ``run/halt.json`` (through the data dir's run dir), the swap a
  halted writer performs for ``quill recover``, and the "store missing" halt when a fresh
  file would silently lose history;
* idle upkeep: a TRUNCATE checkpoint when the WAL has grown (never waiting for readers).

One writer per store, so the cursor is the single ``spool_cursor`` row.
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apsw

from quill.home import DEFAULTS, Halt, Throttle
from quill.store.apply.chunk import apply_chunk, read_cursor, read_cursor_proof
from quill.store.apply.chunking import ChunkResult
from quill.store.capabilities import SqliteCapabilities
from quill.store.contract import HaltAction, NullLog
from quill.store.errors import DiskFullError, mapped
from quill.store.sqlite import fts_repair
from quill.store.sqlite.connection import open_reader, open_writer
from quill.store.sqlite.guard import FileGuard
from quill.store.sqlite.indexer import index_slice, indexed_upto
from quill.store.sqlite.job_runs import close_interrupted, record_job_run
from quill.store.sqlite.wal import wal_bytes, wal_checkpoint

#: Idle WAL size above which the writer truncates it (bytes). Modest: a 16 MB WAL left after
#: a reader let go would otherwise stay until the next batch.
TRUNCATE_WAL_BYTES = 1 << 20
#: Seconds between idle TRUNCATE attempts while the WAL stays above the threshold.
TRUNCATE_RETRY_S = 5.0


class SqliteStore(SqliteCapabilities):
    """The SQLite file ``path`` (see the module doc). ``writer``: opened by the writer (it
    holds the lease): keeps a file guard and runs start-up upkeep; ``run_dir`` (the data
    dir's ``RunDir``) records and reads its halt; ``spool_dir``/``snapshots_dir`` tell
    whether a missing file may be rebuilt from the spool alone."""

    jobs_while_halted = False
    reconnect_on_error = False
    retry_first_s: float | None = None
    halt_poll_s = 0.5
    recover_hint = "quill recover"
    OPTIONS = (
        "synchronous",
        "pack_min_bytes",
        "writer",
        "run_dir",
        "log",
        "spool_dir",
        "snapshots_dir",
    )

    def __init__(
        self,
        path: Path,
        spool_id: str = "local",
        *,
        synchronous: str = "NORMAL",
        pack_min_bytes: int | None = None,
        writer: bool = False,
        run_dir: Any = None,
        log: Any = None,
        spool_dir: Path | None = None,
        snapshots_dir: Path | None = None,
    ):
        self.path = Path(path)
        self.spool_id = spool_id
        self.synchronous = synchronous
        self.pack_min_bytes = pack_min_bytes
        self.writer = writer
        self.run_dir = run_dir
        self.log = log if log is not None else NullLog()
        self.spool_dir = spool_dir
        self.snapshots_dir = snapshots_dir
        self.conn: apsw.Connection | None = None
        self.guard: FileGuard | None = None
        self._next_truncate = 0.0  # monotonic s of the next idle TRUNCATE
        # An attempt follows every busy spell, so under load a blocked TRUNCATE repeats many
        # times a second: its warning is logged once per TRUNCATE_RETRY_S, with the count.
        self._blocked_warning = Throttle(TRUNCATE_RETRY_S)
        self._wal_blocked_since: float | None = None  # epoch s: a reader has held the WAL since

    # -- connection ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.conn is not None

    def connect(self) -> dict[str, Any]:
        """Open the file (and the guard, for the writer); for the writer also close the job
        runs its predecessor left running and TRUNCATE a WAL a killed VACUUM left. Figures:
        ``interrupted_runs``. Raises the store error tree (the connection is then closed)."""
        try:
            self.conn = open_writer(
                self.path,
                synchronous=self.synchronous,
                pack_min_bytes=self.pack_min_bytes,
                on_journal_mode=self._journal_mode_corrected,
            )
            if not self.writer:
                return {}
            self.guard = FileGuard(self.conn, self.path)
            with mapped():
                closed = close_interrupted(self.conn, "writer", time.time(), exclusive=True)
                closed = closed["interrupted"]
                self._truncate(time.monotonic())
            # Both are our own commits (the checkpoint writes state.db): the guard must know,
            # or the first check reads the new mtime as another process's write.
            self.guard.committed()
            return {"interrupted_runs": closed}
        except BaseException:
            self.disconnect()
            raise

    def _journal_mode_corrected(self, old: str) -> None:
        self.log.warning(
            "writer.journal_mode_corrected",
            was=old,
            now="wal",
            path=str(self.path),
            why="the store was switched to another journal mode while Quill was "
            "stopped; Quill needs WAL (readers never block the writer)",
        )

    def disconnect(self, *, keep_wal: bool = False) -> None:
        """Close the file. ``keep_wal``: skip the checkpoint-on-close, so after damage the WAL
        stays as evidence and nothing is checkpointed into a file that may be wrong."""
        if self.conn is not None:
            if keep_wal:
                self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            self.conn.close()
            self.conn = None
        if self.guard is not None:
            self.guard.close()  # after the connection: closing an fd drops SQLite's locks
            self.guard = None

    def close(self) -> None:
        self.disconnect()

    # -- the drain -------------------------------------------------------------------------

    # Every statement the writer runs goes through ``mapped()`` here, at the one door between
    # the writer and the connection: an apsw error raised by any of them (a SELECT of a store
    # job outside a transaction included) reaches the writer classified by result code, so
    # SQLITE_CORRUPT/SQLITE_NOTADB is a ``CorruptError`` and halts at once, whoever met it.

    def read_cursor(self) -> tuple[int, int] | None:
        with mapped():
            return read_cursor(self.conn)

    def read_cursor_proof(self) -> tuple[int, int, int | None, str | None] | None:
        return read_cursor_proof(self.conn)

    def refused(self, batches: dict[str, str]) -> set[str]:
        from quill.store.apply.ledger import refused_here

        with mapped():
            return refused_here(self.conn, batches) if batches else set()

    def apply_chunk(
        self, entries: Sequence[Any], on_reject: Callable[[Any, str, str], None]
    ) -> ChunkResult:
        with mapped():
            return apply_chunk(self.conn, entries, on_reject)

    def check(self) -> None:
        if self.guard is not None:
            self.guard.check()

    def committed(self) -> None:
        if self.guard is not None:
            self.guard.committed()

    def index(self, max_rows: int = DEFAULTS.index_slice_rows) -> int:
        with mapped():
            return index_slice(self.conn, max_rows)

    def index_step(self, max_rows: int) -> tuple[int, dict[str, Any] | None]:
        from quill.store.errors import CorruptError

        try:
            with mapped():
                return index_slice(self.conn, max_rows), None
        except CorruptError as exc:
            with mapped():
                damaged = fts_repair.classify(self.conn)
                if damaged["canonical"] or not damaged["fts"]:
                    raise
                error = f"{type(exc).__name__}: {exc}"
                fts_repair.detach(self.conn, f"{error}; damaged: {damaged['fts']}")
            return 0, {"damaged": damaged["fts"], "error": str(exc)}

    def idle_work(self, now: float, cursor: Any, was_busy: bool) -> dict[str, Any]:
        if was_busy or now >= self._next_truncate:  # idle: the moment to TRUNCATE
            with mapped():
                self._truncate(now)
        return {"wal_blocked_since": self._wal_blocked_since}

    def _truncate(self, now: float) -> None:
        """TRUNCATE-checkpoint a WAL over ``TRUNCATE_WAL_BYTES``, never waiting: a reader on an
        old snapshot shows as blocked, and it is tried again ``TRUNCATE_RETRY_S`` later."""
        self._next_truncate = now + TRUNCATE_RETRY_S
        if wal_bytes(self.conn) < TRUNCATE_WAL_BYTES:
            self._wal_blocked_since = None
            return
        started = time.time()
        figures = wal_checkpoint(self.conn, "TRUNCATE")
        if figures["blocked_by_reader"]:
            self._wal_blocked_since = self._wal_blocked_since or time.time()
            suppressed = self._blocked_warning.ready("checkpoint_blocked", now)
            if suppressed is not None:
                self.log.warning(
                    "writer.checkpoint_blocked",
                    reason="blocked by a reader: a read transaction holds an old "
                    "snapshot, so the WAL cannot be reset yet; retried while idle",
                    suppressed=suppressed,
                    **figures,
                )
            return
        self._wal_blocked_since = None
        self._blocked_warning.clear("checkpoint_blocked")
        record_job_run(
            self.conn, "wal_checkpoint", started, time.time(), "ok", {**figures, "runner": "writer"}
        )
        self.log.info("writer.idle_truncate", **figures)

    def status_fields(self) -> dict[str, Any]:
        with mapped():
            upto = indexed_upto(self.conn) if self.conn is not None else None
        return {"fts_indexed_upto": upto, "wal_blocked_since": self._wal_blocked_since}

    def describe(self, exc: Exception) -> str:
        errno_ = self.conn.system_errno if self.conn is not None else 0
        if isinstance(exc, DiskFullError) or errno_ in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(self.path.parent).free
            return (
                f"disk full: {exc} ({free} bytes free on {self.path.parent}); "
                "the drain resumes when space returns"
            )
        return f"{type(exc).__name__}: {exc}" + (f" (errno {errno_})" if errno_ else "")

    def run_job(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``func(conn, *args, **kwargs)`` on the writer's connection. Raises the store
        error tree for any apsw error the job lets out (``mapped``): a job that meets
        SQLITE_CORRUPT raises ``CorruptError`` and the writer halts, as the drain would."""
        with mapped():
            return func(self.conn, *args, **kwargs)

    # -- the sticky halt -------------------------------------------------------------------

    def startup_halt(self) -> Halt | None:
        """The recorded halt that still applies to this file, else a new ``StoreMissing`` halt
        (recorded) when creating the file would lose history, else None."""
        halted = self.run_dir.halt(self.path)
        if halted:
            return halted
        missing = self._history_missing()
        if missing is None:
            return None
        cause = Halt("StoreMissing", missing, time.time(), next=self.recover_hint)
        self.run_dir.record_halt(cause, self.path)
        return cause

    def _history_missing(self) -> str | None:
        """``history_missing`` of this store's file, spool and snapshots."""
        return history_missing(self.path, self.spool_dir, self.snapshots_dir)

    def halt(self, cause: Halt) -> bool:
        """Close without checkpointing (the WAL stays as evidence) and record ``cause`` in
        ``run/halt.json``; False when the disk refused the record."""
        self.disconnect(keep_wal=True)
        return self.run_dir.record_halt(cause, self.path)

    def serve_halted(self) -> HaltAction:
        """Honour a swap request of a waiting ``quill recover`` (we hold the lease and no
        connection): swap the rebuilt file in, clear the halt, and exit to be restarted."""
        from quill.store.sqlite.swap import swap_in

        request = self.run_dir.swap_request()  # only while its `quill recover` is waiting
        if not request:
            return "halted"
        evidence = swap_in(request.new, self.path)
        self.run_dir.clear_halt()
        self.run_dir.clear_swap()
        self.log.warning("writer.swapped", new=str(request.new), evidence=str(evidence))
        return "exit"

    # -- reads and maintenance -------------------------------------------------------------

    def reader(self) -> Any:
        from quill.store.read.reader import Reader

        return Reader(self.path)

    def maintenance(self, job: str) -> dict[str, Any]:
        """``integrity_check``: ``PRAGMA quick_check``, on the writer's connection when the
        store is connected and on a read-only one of its own otherwise (as the PostgreSQL
        store's needs no connected writer); the other SQLite jobs run as scheduled store jobs
        (``jobs.store_jobs``). Raises ``ValueError`` for those and unknown jobs, and the store
        error tree (``CantOpenError`` before the store file exists)."""
        if job not in self.maintenance_jobs:
            raise ValueError(f"{job!r} is not a maintenance job of the {self.kind} store")
        if job == "integrity_check":
            conn = self.conn if self.conn is not None else open_reader(self.path)
            try:
                with mapped():
                    problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
            finally:
                if conn is not self.conn:
                    conn.close()
            return {"ok": problems == ["ok"], "problems": [p for p in problems if p != "ok"]}
        raise ValueError(f"{job!r} runs as a scheduled store job (jobs.store_jobs) on SQLite")


def history_missing(path: Path, spool_dir: Path | None, snapshots_dir: Path | None) -> str | None:
    """Why creating a fresh store file at ``path`` would silently lose history, or None (the
    file exists, or the spool in ``spool_dir`` holds all of it). A new store is built from the
    spool alone; that is complete only if the spool still starts at segment 1 and no snapshot
    exists in ``snapshots_dir`` (spool GC removes what a snapshot covers). The text names
    ``quill recover``, which restores the newest snapshot and replays the spool."""
    from quill.spool.segments import list_segments

    if path.exists() or spool_dir is None:
        return None
    segments = list_segments(spool_dir)
    snapshots = sorted(snapshots_dir.glob("snapshot-*.db")) if snapshots_dir else []
    recover = "`quill recover` restores the newest snapshot and replays the spool"
    if segments and segments[0] > 1:
        return (
            f"{path} is missing and the spool alone no longer holds the full history (its "
            f"oldest segment is {segments[0]}; {len(snapshots)} snapshot(s)); {recover}"
        )
    if snapshots:  # segment 1 is still here, but a snapshot is the recovery's starting point
        return f"{path} is missing and {len(snapshots)} snapshot(s) exist; {recover}"
    return None
