"""Read-your-writes: wait until the writer has dealt with acknowledged batches, and say how.

The cursor moving past a record means the writer *dealt* with it, not that it applied it: a
record may have been quarantined. So the outcome of each batch is read back: ``applied``
(its batch id is in ``applied_batches``), ``quarantined`` (with the reason from the
quarantine entry at its position, or the store's ``rejected_batches`` record once the entry
was retried or dropped) or ``missing``: the cursor is past the ack's position but the store
holds no trace of the batch — neither applied nor refused — so it was never read (reason
``not-found``). That is never called "quarantined": there is no entry to retry.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from quill.home import doorbell
from quill.ops.client.stores import open_reader
from quill.spool import Ack, NotDrainingError, Position, Quarantine, WaitTimeoutError
from quill.store.errors import CantOpenError, TransientError


def applied_position(cfg: Any) -> Position | None:
    """``cfg``'s store's committed cursor of this data dir's spool (``stores.open_reader``),
    or None when nothing was applied yet."""
    with Looker(cfg) as look:
        return look.cursor()


class Looker:
    """Repeated looks at ``cfg``'s store for one wait: its committed cursor and the outcomes
    of acks past it, on one reader opened at the first look and kept for the rest (a look
    costs one row read, not a connection). A ``state.db`` replaced meanwhile (``quill
    recover`` swaps a rebuilt file in) is noticed by its inode and reopened, so a wait never
    watches a file the writer no longer commits to. Raises the store error tree (an
    unreachable server is ``TransientError``); a store not made yet reads as no cursor.

    ``reused``: the reader was kept from an earlier wait (``Lookers``); its first look then
    opens a fresh reader once if the kept one fails with ``TransientError`` (a PostgreSQL
    connection the server closed while it sat idle)."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.reader: Any = None
        self._inode: int | None = None
        self.reused = False

    def __enter__(self) -> Looker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the reader (idempotent)."""
        if self.reader is not None:
            reader, self.reader = self.reader, None
            reader.close()

    def _state_db_inode(self) -> int | None:
        """``state.db``'s inode now (None: no such file)."""
        try:
            return os.stat(self.cfg.state_db).st_ino
        except FileNotFoundError:
            return None

    def _open(self) -> Any:
        """The reader, (re)opened when there is none or ``state.db`` was replaced since it
        was opened (PostgreSQL readers have ``path`` None: nothing to swap); None when the
        store does not exist yet."""
        if self.reader is not None:
            if self.reader.path is None or self._state_db_inode() == self._inode:
                return self.reader
            self.close()
        # The inode before the open: a swap between the two is seen at the next look.
        inode = self._state_db_inode()
        try:
            self.reader = open_reader(self.cfg)
        except CantOpenError:
            return None
        self._inode = inode
        return self.reader

    def cursor(self) -> Position | None:
        """The committed cursor, or None when nothing was applied yet."""
        reader = self._open()
        try:
            cursor = reader.applied_cursor() if reader is not None else None
        except TransientError:
            if not self.reused:
                raise
            self.close()  # kept across waits and gone stale: one fresh reader
            self.reused = False
            return self.cursor()
        self.reused = False
        return Position.parse(cursor) if cursor else None

    def outcomes(self, acks: list[Ack]) -> list[dict[str, Any]]:
        """``outcomes`` of ``acks`` (all past the cursor) read on this looker's reader.
        Raises ``CantOpenError`` when the store does not exist."""
        reader = self._open()
        if reader is None:
            raise CantOpenError(f"{self.cfg.state_db} does not exist")
        return _outcomes(reader, self.cfg.spool_dir, acks)


class Lookers:
    """The ``Looker`` a client keeps between its waits, so a wait does not open a store
    connection (an SQLite file open, a PostgreSQL login) per call: ``take`` gives the kept
    one (``reused``) or a new one, ``give`` keeps it after a wait that ended without an
    error (at most one is kept; another is closed). Thread-safe; ``close`` (or garbage
    collection) closes the kept one."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self._kept: Looker | None = None
        self._lock = threading.Lock()

    def take(self) -> Looker:
        with self._lock:
            look, self._kept = self._kept, None
        if look is None:
            return Looker(self.cfg)
        look.reused = True
        return look

    def give(self, look: Looker) -> None:
        with self._lock:
            if self._kept is None:
                self._kept, look = look, None
        if look is not None:
            look.close()

    def close(self) -> None:
        with self._lock:
            look, self._kept = self._kept, None
        if look is not None:
            look.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to close with
            pass


def wait_applied(
    cfg: Any,
    position: Position,
    timeout: float,
    poll: float = 0.05,
    *,
    without_fleet: float | None = None,
    look: Looker | None = None,
    awaited: set[tuple[str, str]] | None = None,
) -> float:
    """Block until the record at ``position`` is past the cursor; returns the seconds waited.
    The writer rings this wait's doorbell (``quill.home.doorbell``) after each commit; ``poll``
    (seconds) bounds what a lost ring costs. ``awaited``: ``(position, batch id)`` pairs of
    the caller's acks; each one a ring's note names as applied (``doorbell.applied_note``) is
    removed from it, and the wait ends as soon as it is empty (those batches are applied:
    the caller need not read their outcomes).
    Raises ``WaitTimeoutError`` after ``timeout`` seconds, or, when ``without_fleet`` is given,
    ``NotDrainingError`` (a ``WaitTimeoutError``) as soon as nothing has drained the spool for
    that many seconds (``Draining``: no fleet and no writer holds its lease, or the writer
    halted): nothing would apply the record, so a caller that needs it applied says so at
    once instead of waiting out ``timeout``. ``look``: the caller's ``Looker`` (kept open for
    its ``outcomes``), else one of this wait's own. A store that cannot be reached
    (``TransientError``) is looked at again until ``timeout`` (``_look``), then named in the
    ``WaitTimeoutError``."""
    start = time.monotonic()
    draining = Draining(cfg, without_fleet) if without_fleet is not None else None
    unread: list[TransientError] = []  # the last look's store error, if it failed
    with Looker(cfg) if look is None else contextlib.nullcontext(look) as look:
        cursor = _look(look, unread)
        if cursor is not None and cursor > position:  # applied already: no doorbell needed
            return time.monotonic() - start
        # Listen before the next look: a commit after it rings us (module doc of home.doorbell).
        with _ringing(cfg.waiters_dir) as pause:
            while True:
                if awaited is not None and not awaited:
                    return time.monotonic() - start  # every ack named by a ring as applied
                cursor = _look(look, unread)
                if cursor is not None and cursor > position:
                    return time.monotonic() - start
                stopped = draining.stopped() if draining is not None else None
                if stopped is not None:
                    raise NotDrainingError(
                        f"record at {position} not applied: {stopped} (store cursor: {cursor})"
                    )
                if time.monotonic() - start >= timeout:
                    unreadable = f"the store could not be read: {unread[-1]}; " if unread else ""
                    raise WaitTimeoutError(
                        f"record at {position} not applied within {timeout:g} s "
                        f"(store cursor: {cursor}); {unreadable}{why_not_applied(cfg)}"
                    )
                rings = pause(poll)
                if awaited:
                    awaited -= doorbell.applied_in(rings)


def _look(look: Looker, unread: list[TransientError]) -> Position | None:
    """``look.cursor()``, or None while the store cannot be reached (``TransientError``: a
    server down or cut off, a connection dropped), the error then kept in ``unread`` (cleared
    by a look that reads): the records waited on are acknowledged and durable, so an outage
    is "not applied yet" — the wait goes on until ``timeout``, and the next look reconnects —
    never an error that would hide the acks from a caller that might push them again."""
    try:
        cursor = look.cursor()
    except TransientError as exc:
        look.close()
        unread[:] = [exc]
        return None
    unread.clear()
    return cursor


#: How often (s) a wait for a job's run looks without a ring: what a lost ring costs.
JOB_POLL_S = 0.2


def wait_job_run(
    waiters_dir: Path,
    runs: Callable[[], list[dict[str, Any]]],
    queued_at: float,
    timeout: float,
    poll: float = JOB_POLL_S,
) -> dict[str, Any] | None:
    """The newest finished run (``outcome`` not ``running``) that ``runs()`` lists (the job's
    recent ``job_runs`` rows, newest first) started at or after ``queued_at`` (epoch s, less
    a second of clock skew); None when none is recorded within ``timeout`` seconds.

    The writer rings the waiters' doorbells in ``waiters_dir`` after each job it runs or
    records (``quill.home.doorbell``), so the run is read as soon as it is committed; ``poll``
    bounds what a lost ring costs. Raises what ``runs`` raises."""
    from quill.store.sqlite.job_runs import RUNNING

    def finished() -> dict[str, Any] | None:
        done = [r for r in runs() if r["started_at"] >= queued_at - 1 and r["outcome"] != RUNNING]
        return done[0] if done else None

    deadline = time.monotonic() + timeout
    # Listen before the first look: a run recorded after it rings us (home.doorbell).
    with _ringing(waiters_dir) as pause:
        while True:
            run = finished()
            left = deadline - time.monotonic()
            if run is not None or left <= 0:
                return run
            pause(min(poll, left))


@contextlib.contextmanager
def _ringing(waiters_dir: Path) -> Iterator[Callable[[float], bytes]]:
    """A doorbell of this wait's own in ``waiters_dir`` for the ``with`` block, removed after
    it; yields ``pause(seconds)``: returns the rings' bytes at the writer's next ring, or
    ``b""`` after ``seconds`` (what a lost ring costs). Without a doorbell (the FIFO could not
    be made) ``pause`` sleeps."""
    bell = doorbell.listen(doorbell.waiter_path(waiters_dir))

    def sleep(seconds: float) -> bytes:
        time.sleep(seconds)
        return b""

    try:
        yield bell.wait_take if bell is not None else sleep
    finally:
        if bell is not None:
            bell.close(remove=True)


#: How long a wait that fails fast (``Draining``) gives a fleet that is starting, or a writer
#: its supervisor restarts, to take its lease before it says that nothing drains the spool (s).
WRITER_GRACE_S = 2.0


def not_draining(cfg: Any) -> str | None:
    """Why nothing applies this data dir's spool now (a sentence that says what to do), or
    None when something may: the writer's sticky halt applies to the store (it stays until
    ``quill recover``), or neither a fleet nor a writer holds its lease. Only live
    processes' records count (``quill.home.RunDir``), as ``quill status`` reads them."""
    from quill.home import RunDir, WriterStatus

    rd = RunDir(cfg.home)
    writer = WriterStatus.from_json(rd.live("writer"))
    if rd.halt(cfg.state_db) is not None or writer.halted:
        return (
            "the writer has halted, so nothing applies the spool (the record is safe in it; "
            "`quill doctor` says why, `quill recover` rebuilds the store)"
        )
    if rd.fleet_running() or rd.lease_holder("writer") is not None:
        return None
    return (
        "no fleet is running on this data dir, so nothing applies the spool: start `quill run` "
        "(the record is safe in the spool and is applied once a writer runs)"
    )


class Draining:
    """Whether a wait should go on: ``stopped()`` is ``not_draining``'s sentence once it has
    held for ``grace`` seconds on end (a fleet starting, a writer restarting, is given that
    long), else None. Looks at the run directory at most every ``every`` seconds, the first
    time ``every`` seconds after it is made (a look reads lease and status files)."""

    def __init__(self, cfg: Any, grace: float, every: float = 0.2):
        self.cfg, self.grace, self.every = cfg, grace, every
        self._since: float | None = None  # when not_draining was first seen, monotonic s
        self._why: str | None = None
        # The first look waits ``every`` s: most waits are answered in milliseconds, and
        # the files it reads would cost each of them (the grace is far longer anyway).
        self._looked = time.monotonic()

    def stopped(self) -> str | None:
        now = time.monotonic()
        if now - self._looked >= self.every:
            self._looked = now
            self._why = not_draining(self.cfg)
            if self._why is None:
                self._since = None
            elif self._since is None:
                self._since = now
        if self._why is None or self._since is None or now - self._since < self.grace:
            return None
        return f"{self._why} (so for {now - self._since:.1f} s)"


def why_not_applied(cfg: Any) -> str:
    """What the data dir's run directory says about why a record is not applied yet, for a
    timeout message: no fleet, a halted writer, a writer retrying an error (``database is
    locked`` held by another process …), or a writer still busy behind a backlog. Only live
    processes' records are trusted (``quill.home.RunDir``)."""
    from quill.home import RunDir, WriterStatus
    from quill.store.sqlite.connection import WRITER_BUSY_MS

    rd = RunDir(cfg.home)
    if not rd.fleet_running():
        return (
            "no fleet is running on this data dir: start `quill run` "
            "(the record is safe in the spool)"
        )
    published = rd.live("writer")
    if published is None:
        return "the fleet runs but its writer is not up (restarting?): see `quill status`"
    writer = WriterStatus.from_json(published)
    if writer.halted:
        return "the writer has halted (see `quill doctor`; `quill recover` rebuilds the store)"
    if writer.error:
        return f"the writer is retrying after an error: {writer.error} (see `quill status`)"
    return (
        "the writer is up but has not got to it yet (a backlog before it, or a lock it waits on "
        f"for up to {WRITER_BUSY_MS // 1000} s before it reports one): see `quill status`"
    )


def outcomes(cfg: Any, spool_dir: Path, acks: list[Ack]) -> list[dict[str, Any]]:
    """For acks already past the cursor, per ack in order: ``{"outcome": "applied"}``,
    ``{"outcome": "quarantined", "reason", "detail"}``, or ``{"outcome": "missing", "reason":
    "not-found", "detail"}`` when the store has no record of the batch (module doc)."""
    with open_reader(cfg) as reader:
        return _outcomes(reader, spool_dir, acks)


def _outcomes(reader: Any, spool_dir: Path, acks: list[Ack]) -> list[dict[str, Any]]:
    """``outcomes`` read on an open ``reader``."""
    marks = ", ".join("?" for _ in acks)
    ids = [a.batch_id for a in acks]
    # Positions in this data dir's spool only (None: another host's spool applied the id).
    applied = reader.applied_positions(ids)
    refused = {
        b: reason
        for b, reason in reader.conn.execute(
            f"SELECT batch_id, reason FROM rejected_batches WHERE batch_id IN ({marks})", ids
        )
    }
    own = sum(applied.get(a.batch_id) == str(a.position) for a in acks)
    quarantined = (
        {e["position"]: e for e in Quarantine(spool_dir).entries()} if own < len(acks) else {}
    )
    out = []
    for ack in acks:
        # Applied at this ack's own position: applied, whatever an entry there says (one left
        # by a try whose COMMIT failed, retried once the op was valid). Applied at another
        # position: a retry of the same content (applied), or the batch id reused for other
        # content, which the writer quarantined at this ack's position.
        mine = applied.get(ack.batch_id) == str(ack.position)
        if mine or (ack.batch_id in applied and str(ack.position) not in quarantined):
            out.append({"outcome": "applied"})
        elif str(ack.position) in quarantined or ack.batch_id in refused:
            q = quarantined.get(str(ack.position), {})
            out.append(
                {
                    "outcome": "quarantined",
                    "reason": q.get("reason") or refused[ack.batch_id],
                    "detail": q.get("detail", ""),
                }
            )
        else:
            out.append(
                {
                    "outcome": "missing",
                    "reason": "not-found",
                    "detail": f"the store's cursor is past {ack.position} but batch "
                    f"{ack.batch_id} was neither "
                    "applied nor quarantined: no record of it was read (`quill spool verify`, "
                    "`quill doctor`)",
                }
            )
    return out
