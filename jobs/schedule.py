"""What a persisted schedule holds, and bringing old ``schedule.db`` files to that form.

A schedule stores *intent* only: the job name and its trigger. Each row of APScheduler's
SQLAlchemy job store (table ``apscheduler_jobs``: ``id``, ``next_run_time``, ``job_state``
= a pickled ``Job.__getstate__()`` dict) references one stable callable with
``args=(job_name,)`` and no keyword arguments. That callable belongs to the scheduler, a layer
above this one, so it is handed in (``fire_ref``, ``module:function``; today
``quill.workers.FIRE_REF``) rather than named here. Parameters and paths (the queue file, the
store, snapshot dir, retention …) are resolved from the data dir's current config when the
job runs, so editing ``config.toml`` or moving/copying the data dir takes effect.

Missed runs are never dropped: every schedule has ``coalesce=True`` and no misfire grace
limit (``misfire_grace_time=None``), so a host that was off or asleep through a window runs
the job once at the next start, however late. Older rows carried a one-hour grace time.

Before this, rows referenced ``jobs.schedule:fire`` (and briefly ``quill.jobs.schedule:fire``)
with frozen kwargs ``{"queue_db": <absolute path>, "job": NAME, "params": {...}}``. APScheduler
drops a job whose callable cannot be imported, so ``migrate`` rewrites those rows *before*
APScheduler opens the file, keeping id, trigger, next run time (None = paused) and options.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: Callables that older Quill versions stored, each with kwargs ``{queue_db, job, params}``.
LEGACY_REFS = ("jobs.schedule:fire", "quill.jobs.schedule:fire")
TABLE = "apscheduler_jobs"
#: Seconds a connection to ``schedule.db`` waits for another process's lock before
#: SQLITE_BUSY (the scheduler's, ``migrate``'s and an edit's; Python's sqlite3 default).
BUSY_S = 5.0
#: ... and a status read's: ``quill status`` must answer while the file is locked.
STATUS_BUSY_S = 1.0


def fire(
    queue_db: str,
    job: str,
    params: dict[str, Any] | None = None,
    queue_url: str | None = None,
    host_id: str = "local",
) -> None:
    """Legacy target of schedules stored by older versions (``LEGACY_REFS``), kept importable
    for rows ``migrate`` has not reached (a PostgreSQL job store is not migrated in place):
    enqueue ``job`` on the recorded queues *without* the frozen ``params`` — the executing
    process resolves parameters from its current config."""
    from quill.jobs.queues import build

    build(Path(queue_db), url=queue_url, host_id=host_id).enqueue(job)


def fire_args(job: str, fire_ref: str) -> dict[str, Any]:
    """Keyword arguments for ``add_job`` that make a schedule of ``job`` store intent only:
    a call of ``fire_ref`` (``module:function``) with the job name."""
    return {
        "func": fire_ref,
        "args": (job,),
        "kwargs": {},
        "coalesce": True,
        "misfire_grace_time": None,
    }


def migrate(schedule_db: Path, fire_ref: str) -> list[str]:
    """Rewrite legacy rows of ``schedule_db`` in place (one transaction) to call ``fire_ref``
    with the job name; returns the ids of the schedules migrated. A missing file or table
    means nothing to do. Rows whose callable is not a legacy Quill reference are left
    untouched. Raises ``sqlite3.Error`` when the file is unreadable (the scheduler would fail on
    it anyway)."""
    path = Path(schedule_db)
    if not path.exists():
        return []
    conn = sqlite3.connect(str(path), timeout=BUSY_S)
    try:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (TABLE,)
        ).fetchone():
            return []
        done = []
        with conn:  # one transaction: all rows migrate or none
            for job_id, blob in conn.execute(f"SELECT id, job_state FROM {TABLE}").fetchall():
                state = pickle.loads(blob)
                if state.get("func") in LEGACY_REFS:
                    kwargs = state.get("kwargs") or {}
                    job = kwargs.get("job") or state.get("name") or job_id
                    state.update(func=fire_ref, args=(job,), kwargs={})
                elif state.get("func") != fire_ref or (
                    state.get("misfire_grace_time") is None and state.get("coalesce")
                ):
                    continue
                state.update(coalesce=True, misfire_grace_time=None)
                conn.execute(
                    f"UPDATE {TABLE} SET job_state = ? WHERE id = ?",
                    (pickle.dumps(state, pickle.HIGHEST_PROTOCOL), job_id),
                )
                done.append(job_id)
        return done
    finally:
        conn.close()


class ScheduleUnreadableError(Exception):
    """``schedule.db`` cannot be read (damaged, not a database, locked, unreadable): classified
    by SQLite result code. ``path`` is the file, ``cause`` the driver's error (``Type: text``),
    ``damaged`` whether the file itself is bad (SQLITE_CORRUPT, SQLITE_NOTADB: it stays so
    until it is replaced or moved aside) rather than busy or out of reach right now;
    ``locked`` whether another connection held a lock past the busy timeout (SQLITE_BUSY,
    SQLITE_LOCKED: it passes when that connection ends its transaction). ``state`` is one
    word for both: ``damaged``, ``locked`` or ``unavailable`` (I/O, full, cannot open)."""

    def __init__(self, path: Path, cause: BaseException):
        self.path = path
        self.cause = f"{type(cause).__name__}: {cause}"
        code = _code(cause)
        self.damaged = code in _SQLITE_DAMAGED
        self.locked = code in _SQLITE_LOCKED
        self.state = "damaged" if self.damaged else "locked" if self.locked else "unavailable"
        super().__init__(f"the schedule at {path} cannot be read ({self.cause})")


#: SQLite's generic result code: here, the job store's table does not exist yet.
_SQLITE_ERROR = 1
#: SQLite primary result codes of a damaged file: CORRUPT, NOTADB.
_SQLITE_DAMAGED = frozenset({11, 26})
#: ... of a lock another connection holds: BUSY, LOCKED.
_SQLITE_LOCKED = frozenset({5, 6})


def _code(exc: BaseException) -> int | None:
    """The SQLite primary result code of ``exc`` (a ``sqlite3.Error``, or SQLAlchemy's
    wrapper of one), None when it carries none."""
    exc = getattr(exc, "orig", None) or exc
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
    return None if code is None else code & 0xFF


@contextlib.contextmanager
def guarded(schedule_db: Path) -> Iterator[None]:
    """Run a block that reads or edits ``schedule_db`` (directly, or through APScheduler's
    SQLAlchemy job store): an SQLite error with a result code other than the generic one
    (damaged, not a database, busy, locked, I/O, full, cannot open) is re-raised as
    ``ScheduleUnreadableError`` (the original chained); anything else propagates as is."""
    try:
        yield
    except ScheduleUnreadableError:
        raise
    except Exception as exc:
        code = _code(exc)
        if code is None or code == _SQLITE_ERROR:
            raise
        raise ScheduleUnreadableError(Path(schedule_db), exc) from exc


def fingerprint(schedule_db: Path) -> tuple[int, int, int, int] | None:
    """``(device, inode, size, mtime ns)`` of ``schedule_db``, None when it does not exist:
    a damaged file is known to be replaced, moved aside or rewritten when this changes."""
    try:
        st = os.stat(schedule_db)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_schedules(
    schedule_db: Path, fire_ref: str, *, busy_s: float = BUSY_S
) -> list[dict[str, Any]]:
    """Every Quill schedule (a call of ``fire_ref`` or of a legacy reference) in
    ``schedule_db``, read-only (no scheduler started): ``id``, ``job``, ``trigger`` (in
    words: ``jobs.triggers.describe``), ``paused``, ``next_run`` (aware datetime or None) and
    ``period_s`` (seconds between two consecutive fire times from now; None when the
    trigger never fires again). Legacy rows are understood too. [] when there is no file or
    no table yet. ``busy_s``: seconds to wait for another process's lock. Raises
    ``ScheduleUnreadableError`` when the file cannot be read (``locked`` after ``busy_s``)."""
    path = Path(schedule_db)
    if not path.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_s)
        try:
            rows = conn.execute(f"SELECT id, job_state FROM {TABLE}").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_ERROR:  # no table yet
            return []
        raise ScheduleUnreadableError(path, exc) from exc
    return describe_rows(rows, fire_ref)


def describe_rows(rows: Iterable[tuple[str, bytes]], fire_ref: str) -> list[dict[str, Any]]:
    """The schedules (as ``read_schedules`` describes them) among ``(id, job_state)`` rows of
    APScheduler's job table, wherever it is: ``schedule.db``, or a shared PostgreSQL store's
    ``apscheduler_jobs`` (``TABLE``), where a cluster keeps its schedules."""
    import datetime as dt

    from quill.jobs.triggers import describe

    out = []
    now = dt.datetime.now(dt.UTC)
    for job_id, blob in rows:
        state = pickle.loads(bytes(blob))
        if state.get("func") == fire_ref:
            job = (state.get("args") or (job_id,))[0]
        elif state.get("func") in LEGACY_REFS:
            job = (state.get("kwargs") or {}).get("job", job_id)
        else:
            continue
        trigger = state["trigger"]
        first = trigger.get_next_fire_time(None, now)
        second = (
            trigger.get_next_fire_time(first, first + dt.timedelta(microseconds=1))
            if first
            else None
        )
        out.append(
            {
                "id": job_id,
                "job": job,
                "trigger": describe(trigger),
                "paused": state.get("next_run_time") is None,
                "next_run": state.get("next_run_time"),
                "period_s": (second - first).total_seconds() if first and second else None,
            }
        )
    return out
