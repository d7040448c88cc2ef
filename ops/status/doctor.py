"""``quill doctor``: every check an operator needs before trusting a data dir.

Each check is ``{"check", "status": ok|warn|fail, "detail"}``; any ``fail`` makes the command
exit 1. The SQLite floor is 3.51.3: earlier versions carry the WAL-reset corruption bug
(docs/architecture.md, "The store").
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from typing import Any

import apsw

from quill.home import RunDir, Settings, WriterStatus
from quill.ops import human
from quill.ops.purge.procedure import interrupted as interrupted_purge
from quill.ops.recover import leftovers
from quill.ops.status import guard, health
from quill.ops.status.checks import check, overdue_check, pending_text, version, when
from quill.ops.status.doctor_pg import pg_checks
from quill.ops.status.history import cursor_mismatch, start_gap
from quill.ops.status.overdue import overdue_jobs
from quill.spool import Position, Quarantine
from quill.spool.integrity import assess
from quill.spool.segments import stray_segments
from quill.spool.torn import TORN_SUMMARY
from quill.store.factory import capabilities
from quill.store.sqlite.connection import MIN_SQLITE, shm_problem

FREE_WARN_BYTES = 1 << 30


def run_checks(cfg: Settings) -> list[dict[str, Any]]:
    """All doctor checks for the data dir of ``cfg``."""
    out = []
    lib = apsw.sqlite_lib_version()
    out.append(
        check(
            "sqlite (store)",
            version(lib) >= MIN_SQLITE,
            f"apsw's SQLite {lib}; need ≥ {'.'.join(map(str, MIN_SQLITE))} (WAL-reset bug fix)",
        )
    )
    out.append(
        check(
            "sqlite (queue)",
            True,
            f"system SQLite {sqlite3.sqlite_version} for huey; "
            "queue.db uses journal_mode=TRUNCATE, not WAL",
        )
    )
    if not capabilities(cfg).local_file:
        return out + _common_checks(cfg, pg_checks(cfg, out))
    out.append(_recover_leftovers(cfg))
    shm = shm_problem(cfg.state_db)
    out.append(
        check(
            "shared memory",
            shm is None,
            shm + " — stop Quill, then delete it (SQLite rebuilds it "
            "from the WAL) or restore its owner and mode 600"
            if shm
            else "state.db-shm usable or absent",
        )
    )
    if shm:  # SQLite would read the store through it as if it were empty: don't
        return out + _common_checks(cfg, guard.StoreRead("unreadable", error=shm))
    if cfg.state_db.exists():
        found = guard.read_store(cfg, lambda r: _sqlite_read(cfg, r))
        if found.ok:
            figures, mode, overdue, _ = found.value
            out.append(overdue_check(overdue))
            out.append(
                check(
                    "journal mode",
                    mode == "wal",
                    f"state.db journal_mode={mode}"
                    + (
                        ""
                        if mode == "wal"
                        else "; the writer puts it back into WAL at its next start and logs "
                        "writer.journal_mode_corrected"
                    ),
                    warn_only=True,
                )
            )
            out.append(
                check(
                    "store",
                    True,
                    f"{human.store_counts(figures)}, cursor {figures['cursor']}",
                )
            )
        elif found.state == "missing":
            out.append(check("store", True, "state.db has no schema yet (the writer adds it)"))
        else:
            out.append(check("store", False, f"cannot read state.db: {found.error}"))
        w = health.wal_state(cfg, WriterStatus.from_json(RunDir(cfg.home).live("writer")))
        out.append(
            check(
                "WAL size",
                not w["high"] and not w["blocked_by_reader_since"],
                health.describe_wal(w),
                warn_only=True,
            )
        )
        return out + _common_checks(cfg, found)
    lost = health.store_missing(cfg)
    out.append(
        check("store", False, f"{lost['error']} (next: {lost['next']})")
        if lost
        else check("store", True, "state.db not created yet (the writer creates it)")
    )
    return out + _common_checks(cfg, guard.StoreRead("missing"))


def _recover_leftovers(cfg: Settings) -> dict[str, Any]:
    """Removes the work files of ``quill recover``s killed mid-way (their process is gone) and
    says so; warns of one whose name does not say which recover made it. A running
    recover's files are kept (``ops.recover.leftovers``)."""
    try:
        found = leftovers.sweep(cfg.home)
    except OSError as exc:
        return check("recover leftovers", False, f"cannot remove: {exc}", warn_only=True)
    return check("recover leftovers", not found.unknown, leftovers.describe(found), warn_only=True)


def _sqlite_read(cfg: Settings, r: Any) -> tuple[Any, ...]:
    """Everything doctor reads from a SQLite store, in one guarded read: figures, journal
    mode, overdue jobs, pending purges."""
    mode = r.conn.execute("PRAGMA journal_mode").fetchone()[0]
    figures = r.figures()
    overdue = overdue_jobs(cfg, r.conn)
    return figures, mode, overdue, interrupted_purge(cfg.spool_dir, reader=r)


def _history_check(cfg: Settings, found: guard.StoreRead) -> dict[str, Any]:
    """Fails while the store holds no cursor for this spool and the spool's first segments
    were collected (``ops.status.history``); a lost ``state.db`` is the store check's."""
    lost_file = capabilities(cfg).local_file and not cfg.state_db.exists()
    if found.ok and found.value[0].get("cursor_problem"):
        gap = None  # another spool's cursor (a copy): the spool lag check says so
    elif found.ok:
        gap = start_gap(cfg, found.value[0]["cursor"])
    else:
        gap = start_gap(cfg, None) if found.state == "missing" and not lost_file else None
    return check(
        "spool history",
        gap is None,
        "the store holds a cursor for this spool, or the spool holds its whole history"
        if gap is None
        else f"{gap['error']} (next: {gap['next']})",
    )


def _cursor_check(cfg: Settings, found: guard.StoreRead) -> dict[str, Any]:
    """Fails when the writer would refuse the store's cursor as not this spool's
    (``ops.status.history.cursor_mismatch``); a warning while the store cannot be read (the
    store check says why), ok with no store (no cursor to refuse)."""
    if found.state == "missing":
        return check("spool cursor", True, "no store, so no cursor to check")
    if not found.ok:
        return check("spool cursor", False, "not checked: the store cannot be read", warn_only=True)
    bad = cursor_mismatch(cfg, found.value[0])
    return check(
        "spool cursor",
        bad is None,
        "the store's cursor ends an entry of this spool (or the store has none yet)"
        if bad is None
        else f"{bad['error']} (next: {bad['next']})",
    )


def _common_checks(cfg: Settings, found: guard.StoreRead) -> list[dict[str, Any]]:
    """The data dir's own checks, whatever the store: file modes, leases, halt, free space,
    spool lag (``guard.progress``: this host's cursor from the store when ``found`` read it,
    else the one the writer published), stray segments, purge, quarantine."""
    out: list[dict[str, Any]] = []
    loose = []
    for path in [
        cfg.home,
        cfg.spool_dir,
        cfg.run_dir,
        *cfg.home.glob("*.db"),
        *cfg.home.glob("*.db-*"),
    ]:
        if path.exists() and stat.S_IMODE(os.stat(path).st_mode) & 0o077:
            loose.append(f"{path.name}={oct(stat.S_IMODE(os.stat(path).st_mode))}")
    out.append(
        check(
            "file modes",
            not loose,
            "owner-only" if not loose else "group/other access: " + ", ".join(loose),
        )
    )
    rd = RunDir(cfg.home)
    for role in ("fleet", "writer", "scheduler"):
        holder = rd.lease_holder(role)
        out.append(
            check(f"{role} lease", True, f"held by pid {holder['pid']}" if holder else "free")
        )
    writer = WriterStatus.from_json(rd.live("writer"))
    halt = rd.halt(cfg.state_db) or (writer.halt if writer.halted else None)
    out.append(
        check(
            "halt",
            not halt,
            "not halted"
            if not halt
            else f"HALTED: {halt.cause}: {halt.detail} — run `{halt.next}`",
        )
    )
    out.append(_history_check(cfg, found))
    out.append(_cursor_check(cfg, found))
    others = {role: rd.last(role) for role in ("scheduler", "consumer")}
    queue = health.queue_state(cfg, writer if writer.alive else None, others)
    out.append(
        check(
            "job queue",
            not queue["unavailable_since"],
            f"{queue['where']}: {pending_text(queue['pending'])}"
            if not queue["unavailable_since"]
            else f"unreachable since {when(queue['unavailable_since'])}: {queue['error']}; "
            "appends are applied, queued and scheduled jobs wait",
            warn_only=True,
        )
    )
    sched = others["scheduler"] or {}
    unwritable = bool(sched.get("alive") and sched.get("schedule_error"))
    readable = health.schedule_state(cfg, sched)
    if readable["state"] in ("locked", "unavailable"):
        waited = (
            f"; the scheduler has waited {readable['waiting_s']:.0f} s and resumes by itself"
            if readable["waiting_s"]
            else ""
        )
        hint = "; end the transaction of the process holding its lock (`fuser schedule.db`)"
        out.append(
            check(
                "schedule store",
                False,
                f"{readable['state']}: {readable['error']}{waited}"
                + (hint if readable["state"] == "locked" else ""),
            )
        )
    elif readable["readable"] is False:
        out.append(check("schedule store", False, f"{readable['error']}; move it aside"))
    else:
        out.append(
            check(
                "schedule store",
                not unwritable,
                "writable"
                if not unwritable
                else f"unwritable since {when(sched['schedule_unwritable_since'])}: "
                f"{sched['schedule_error']}; next run times of "
                f"{', '.join(sched.get('schedule_held') or [])} held in memory, "
                "jobs fire on time",
                warn_only=True,
            )
        )
    free = shutil.disk_usage(next(p for p in (cfg.home, *cfg.home.parents) if p.exists())).free
    out.append(check("free space", free > FREE_WARN_BYTES, f"{free} bytes free", warn_only=True))
    figures = found.value[0] if found.ok else None
    sp = guard.progress(
        cfg,
        found,
        figures["cursor"] if figures else None,
        figures.get("cursor_problem") if figures else None,
    )
    out.append(
        check(
            "spool lag",
            sp["lag_s"] is not None and sp["lag_s"] < 60,
            guard.describe_progress(sp),
            warn_only=True,
        )
    )
    stray = stray_segments(cfg.home, cfg.spool_dir) if cfg.home.exists() else []
    out.append(
        check(
            "stray segments",
            not stray,
            "none: every segment is in the spool the writer drains"
            if not stray
            else f"{len(stray)} segment file(s) outside {cfg.spool_dir} hold acknowledged "
            f"records the writer never reads: {', '.join(str(p) for p in stray[:5])}; "
            "`quill spool adopt PATH` "
            "appends their records to the spool (batch ids kept, so nothing is applied twice)",
        )
    )
    local = capabilities(cfg).local_file
    if local and found.state == "unreadable":
        unfinished = interrupted_purge(cfg.spool_dir)  # the plan file; pending needs the store
    else:
        unfinished = found.value[-1] if found.ok and local else interrupted_purge(cfg.spool_dir)
    why = (
        "spool/.purge-plan.json left, no purge running"
        if unfinished and unfinished["cause"] == "plan-file"
        else "an applied `sessions.delete --purge` whose records are still in the spool, "
        "no purge running"
    )
    out.append(
        check(
            "purge",
            not unfinished,
            "no interrupted purge"
            if not unfinished
            else f"a purge of {', '.join(unfinished['sessions']) or '?'} was interrupted "
            f"({why}): their content may still be in the spool, snapshots and the live store; "
            f"run `{unfinished['next']}` to finish it",
        )
    )
    # Every record read: checksums, segment structure and sequence numbers (spool.integrity,
    # the classification `spool verify` and `status` use).
    cursor = Position.parse(sp["cursor"]) if sp["cursor"] else None
    integrity = assess(cfg.spool_dir, cursor=cursor, scan=True, max_line=cfg.max_record_bytes)
    out.append(check("spool integrity", not integrity.lost, integrity.summary()))
    quarantine = Quarantine(cfg.spool_dir)
    torn = quarantine.torn_count()
    q = quarantine.count() - torn
    out.append(
        check(
            "quarantine",
            q == 0,
            f"{q} record(s) in {cfg.spool_dir / 'quarantine'}"
            + (f"; besides, {torn} {TORN_SUMMARY}" if torn else ""),
            warn_only=True,
        )
    )
    return out
