"""Fleet, store, spool and job health: the one place that computes what ``quill status``
shows, what ``quill doctor`` checks and what ``/metrics`` exports, so the CLI, the HTTP API and
Prometheus never disagree: fleet liveness from the run directory (``quill.home.RunDir``: only a
live process's files count), overdue scheduled jobs, the WAL against the store, shared memory.

``collect(cfg)`` returns the status document (``quill status --json``); its ``"metrics"`` key
holds the figures ``quill.ops.service.metrics`` exports, under the same names.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from quill.home import RunDir, WriterStatus
from quill.ops.client.stores import lost_store
from quill.ops.human import ago
from quill.ops.purge.procedure import interrupted as interrupted_purge
from quill.ops.status import guard
from quill.ops.status.history import cursor_mismatch, start_gap
from quill.ops.status.overdue import overdue_jobs, overdue_schedules
from quill.ops.status.schedule import schedule_state
from quill.spool import Position, Quarantine
from quill.spool.integrity import assess
from quill.store.factory import capabilities
from quill.workers.status import COMMIT_BUCKETS_S
from quill.workers.watch_state import WatchState, lag

#: Below this many free bytes producers and the writer are about to stall (a spool segment
#: rotation plus a chunk's WAL growth need a few MiB; 64 MiB leaves margin).
LOW_DISK_BYTES = 64 << 20
ROLES = ("writer", "scheduler", "consumer", "http")


def fleet_state(cfg: Any) -> dict[str, Any]:
    """Whether the fleet is alive (its supervisor's pid + start time), what each process last
    published (``alive``: its publisher still runs, so it is current; otherwise history),
    the halt a run would report, crash loops, restart counts and last exit codes of the live
    run, and how the previous run ended."""
    rd = RunDir(cfg.home)
    holder = rd.lease_holder("fleet")
    out: dict[str, Any] = {
        "running": holder is not None,
        "supervisor_pid": holder["pid"] if holder else None,
    }
    for role in ROLES:
        st = rd.last(role)
        if st is not None or role != "http":
            out[role] = st
    writer = WriterStatus.from_json(out["writer"])
    # A run reports a halt when halt.json applies to the store in place (the writer reads
    # it at start) or when the live writer says it halted.
    halt = rd.halt(cfg.state_db) or (writer.halt if writer.alive and writer.halted else None)
    out["halt"] = halt.to_json() if halt else None
    sup = rd.last("supervisor") or {}
    current = bool(sup.get("alive")) and sup.get("state") == "running"
    out["crash_loops"] = (sup.get("crash_loops") or []) if current else []
    out["crash_loop"] = out["crash_loops"][0] if out["crash_loops"] else None
    out["children"] = sup.get("children") if current else None
    # role → an orphan of a fleet that died, being stopped before its role restarts.
    out["orphans"] = (sup.get("orphans") or {}) if current else {}
    out["restarts"] = sup.get("restarts", {}) if current else {}
    out["last_run"] = (
        {
            "exit_code": sup.get("exit_code"),
            "ended_at": sup.get("updated_at"),
            "crash_loops": sup.get("crash_loops") or [],
        }
        if sup and not current and sup.get("state") == "stopped"
        else None
    )
    return out


def store_missing(cfg: Any) -> dict[str, Any] | None:
    """The one verdict on a lost store, as ``quill status``, ``quill doctor`` and the dashboard
    give it: ``{"state": "missing", "error": why, "next": "quill recover"}`` when the SQLite
    store file is absent and the spool alone no longer holds its history
    (``ops.client.stores.lost_store``: the writer would halt at its start, so this is said
    now, with the command, never as "not created yet"); None when the file is there, the
    spool holds everything (a store not created yet), or the store is PostgreSQL."""
    lost = lost_store(cfg)  # the test the CLI's and the API's reads refuse a lost store by
    return {"state": "missing", "error": lost.message, "next": "quill recover"} if lost else None


def collect(cfg: Any) -> dict[str, Any]:
    """The status document: home, fleet, store figures, recent jobs, spool, disk, metrics.

    Never raises for a damaged, missing or unreachable store: that is when status must still
    answer. Every store read goes through ``guard.read_store``; ``store`` is then None (not
    created yet), ``{"state": "missing", "error": why, "next": "quill recover"}`` (a SQLite
    store file gone whose history the spool alone no longer holds: the writer would halt) or
    ``{"state": "unreadable", "error": ...}``, and the spool figures come from
    the cursor the writer published (``guard.progress``: ``cursor_source``, ``cursor_age_s``;
    ``pending_bytes``/``lag_s`` None when unknown).
    """
    data: dict[str, Any] = {"home": str(cfg.home), "fleet": fleet_state(cfg)}
    local = capabilities(cfg).local_file

    def read(r: Any) -> dict[str, Any]:
        figures = r.figures()
        if not local:
            figures["postgres"] = r.server_figures(time.time())
        return {
            "store": figures,
            "jobs": r.job_runs(limit=10),
            "totals": r.job_run_totals(),
            "overdue": overdue_jobs(cfg, r.conn),
            # A purge is pending only against the applied cursor (ops.purge.pending).
            "purge": interrupted_purge(cfg.spool_dir, reader=r if local else None),
        }

    found = guard.read_store(cfg, read)
    got = found.value or {}
    if found.ok:
        data["store"], data["jobs"], data["overdue"] = got["store"], got["jobs"], got["overdue"]
    elif found.state == "missing":
        data["store"] = store_missing(cfg)  # lost, or (None) not created yet
        data["jobs"], data["overdue"] = [], overdue_jobs(cfg, None)
    else:
        data["store"] = {"state": "unreadable", "error": found.error}
        data["jobs"], data["overdue"] = [], []
    writer = WriterStatus.from_json(data["fleet"]["writer"])
    data["wal"] = wal_state(cfg, writer if writer.alive else None)
    others = {role: data["fleet"].get(role) for role in ("scheduler", "consumer")}
    data["schedule"] = schedule_state(cfg, others["scheduler"])
    data["queue"] = queue_state(cfg, writer if writer.alive else None, others)
    q = Quarantine(cfg.spool_dir)
    figures = got.get("store") or {}
    sp = guard.progress(cfg, found, figures.get("cursor"), figures.get("cursor_problem"))
    # torn_writes: entries that are a torn record (spool.torn.TORN_SUMMARY), counted apart.
    cursor = Position.parse(sp["cursor"]) if sp["cursor"] else None
    data["spool"] = {
        **sp,
        "quarantined": q.count(),
        "torn_writes": q.torn_count(),
        # Segment structure against the cursor (spool.integrity; `spool verify` reads records).
        "integrity": assess(cfg.spool_dir, cursor=cursor).as_dict(),
    }
    # Without the store a pending purge cannot be judged; a plan file left behind can.
    data["spool"]["interrupted_purge"] = (
        got["purge"] if found.ok else interrupted_purge(cfg.spool_dir)
    )
    data["spool"]["purge_check"] = "unknown" if local and found.state == "unreadable" else "done"
    # A store with no cursor for this spool while segment 1 was collected (ops.status.history).
    # Only the store's own cursor counts: a published one may be an earlier store's.
    known = found.ok or (found.state == "missing" and data["store"] is None)
    # Not for a cursor that is another spool's: that is no missing history (guard.progress).
    known = known and not figures.get("cursor_problem")
    gap = start_gap(cfg, figures.get("cursor")) if known else None
    data["spool"]["history_gap"] = gap
    # A cursor the writer would refuse: its refusal is published only while it lives.
    data["spool"]["cursor_mismatch"] = cursor_mismatch(cfg, got["store"]) if found.ok else None
    # Read, never written: on a full disk no process can publish its status, so free space is
    # measured here.
    existing = next(p for p in (cfg.home, *cfg.home.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    data["disk"] = {"free_bytes": free, "low": free < LOW_DISK_BYTES}
    data["watch"] = watch_state(cfg)
    data["metrics"] = _metrics(data, got.get("totals") or [])
    return data


def _metrics(data: dict[str, Any], job_totals: list[dict[str, Any]]) -> dict[str, Any]:
    """The exported figures, derived from the status document (units in the names)."""
    fleet, store = data["fleet"], data["store"] or {}
    writer = WriterStatus.from_json(fleet.get("writer"))
    commit = writer.commit_hist or {}
    return {
        # None (not exported) when the applied cursor is unknown: never the whole spool.
        "spool_pending_bytes": data["spool"]["pending_bytes"],
        "spool_lag_seconds": data["spool"]["lag_s"],
        "spool_cursor_age_seconds": data["spool"]["cursor_age_s"],
        "store_readable": 0 if store.get("state") in ("unreadable", "missing") else 1,
        "quarantined_records": data["spool"]["quarantined"],
        "spool_loss_detected": 1 if data["spool"]["integrity"]["lost"] else 0,
        # Counters of the running writer process (they restart from 0 with it; Prometheus'
        # rate() handles counter resets).
        "ops_applied_total": writer.applied,
        "ops_duplicate_total": writer.duplicates,
        "ops_rejected_total": writer.rejected,
        "rows_applied_total": writer.rows,
        "chunk_commit_seconds": {
            "buckets": dict(
                zip(
                    [str(b) for b in COMMIT_BUCKETS_S],
                    commit.get("counts", [0] * len(COMMIT_BUCKETS_S)),
                )
            ),
            "count": commit.get("count", 0),
            "sum": commit.get("sum", 0.0),
        },
        "fts_pending_rows": store.get("fts_pending", 0),
        "writer_halted": 1 if fleet.get("halt") else 0,
        "queue_unavailable": 1 if data["queue"]["unavailable_since"] else 0,
        # One of schedule.STATES, and how long the live scheduler has waited (None: none runs).
        "schedule_state": data["schedule"]["state"],
        "scheduler_waiting_seconds": data["schedule"]["waiting_s"],
        "worker_restarts": {
            role: fleet["restarts"].get(role, 0)
            for role in ROLES
            if role != "http" or "http" in fleet["restarts"]
        },
        "job_runs": job_totals,
        "jobs_overdue": len(data.get("overdue") or []) + len(overdue_schedules(fleet, time.time())),
        "wal_bytes": data["wal"]["bytes"],
        "disk_free_bytes": data["disk"]["free_bytes"],
        "watch_pending_files": data["watch"].get("pending", 0),
        "watch_bytes_behind": data["watch"].get("bytes_behind", 0),
        "watch_unreadable_files": len(data["watch"].get("unreadable", [])),
    }


def watch_state(cfg: Any) -> dict[str, Any]:
    """What live capture follows and how far behind it is (``workers.watch.lag``: roots,
    files, pending, bytes_behind, unreadable with reasons), plus ``enabled`` and ``watcher``
    (what the watcher last published; ``alive`` says whether it runs). An unreadable state
    file is reported as ``error``, never as "nothing behind"."""
    if not cfg.watch_enabled:
        return {"enabled": False}
    out: dict[str, Any] = {"enabled": True, "watcher": RunDir(cfg.home).last("watch")}
    try:
        return {**out, **lag(cfg, WatchState.load(cfg.watch_state))}
    except OSError as exc:
        return {**out, "error": f"{cfg.watch_state}: {exc.strerror or exc}"}


def queue_state(
    cfg: Any, writer: WriterStatus | None, others: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The job queue: ``where`` (the Redis URL without password, or ``queue.db``),
    ``pending`` (``{"store", "worker"}`` tasks waiting, None when it cannot be counted), and
    while it is unreachable ``unavailable_since`` (epoch s) and ``error`` (else None), with
    ``reported_by`` (the roles whose own calls fail, or None).

    The queue is asked here, by reading: when that fails the queue is unreachable. A read
    that answers does not prove that the workers can write to it (a full disk under
    ``queue.db`` takes reads, not writes), so an outage a live process reports (the writer,
    and ``others``: ``{role: published status}`` of the scheduler and consumer, each with
    ``alive``) stands until that process's own next try succeeds (within 10 s of the queue's
    return). An absent ``queue.db`` is not created (status writes nothing): nothing is queued
    there yet. Never raises for an unreachable queue."""
    from quill.jobs.errors import QueueUnavailableError
    from quill.jobs.queues import build_for, redacted

    reports = {"writer": (writer.queue_down_since, writer.queue_error)} if writer else {}
    for role, st in (others or {}).items():
        if st and st.get("alive"):
            reports[role] = (st.get("queue_down_since"), st.get("queue_error"))
    reports = {role: r for role, r in reports.items() if r[0] is not None}
    first = min(reports.values(), default=(None, None))
    out: dict[str, Any] = {
        "where": redacted(cfg.queue_url) if cfg.queue_url else str(cfg.queue_db),
        "pending": None,
        "unavailable_since": first[0],
        "error": first[1],
        "reported_by": sorted(reports) or None,
    }
    if not cfg.queue_url and not cfg.queue_db.exists():
        out["pending"] = {"store": 0, "worker": 0}
        return out
    try:
        out["pending"] = build_for(cfg).pending()
    except QueueUnavailableError as exc:
        out["unavailable_since"] = out["unavailable_since"] or exc.since
        out["error"] = out["error"] or str(exc)
    return out


#: The WAL is reported as too large above max(WAL_WARN_FLOOR, WAL_WARN_RATIO × store size):
#: relative to the store, because a WAL many times its store's size (a reader held a read
#: transaction for minutes) must not read as "ok"; with a floor, because a small store's WAL
#: legitimately reaches a few MB between checkpoints (SQLite's autocheckpoint: 1000 pages).
WAL_WARN_FLOOR = 8 << 20
WAL_WARN_RATIO = 1.0


def wal_state(cfg: Any, writer: WriterStatus | None) -> dict[str, Any]:
    """The store's WAL: ``bytes``, ``store_bytes``, ``limit_bytes``, ``high`` (above the
    limit), and ``blocked_by_reader_since`` (epoch s) when the live writer's TRUNCATE
    checkpoints have been refused by a reader holding an old snapshot since then — the
    oldest reader Quill knows of (SQLite does not name readers). ``writer``: the live
    writer's status (``WriterStatus``) or None."""

    def size(path: Any) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    wal = size(cfg.state_db.with_name(cfg.state_db.name + "-wal"))
    store = size(cfg.state_db)
    limit = max(WAL_WARN_FLOOR, int(WAL_WARN_RATIO * store))
    since = writer.wal_blocked_since if writer is not None else None
    return {
        "bytes": wal,
        "store_bytes": store,
        "limit_bytes": limit,
        "high": wal > limit,
        "blocked_by_reader_since": since,
    }


def describe_wal(w: dict[str, Any], now: float | None = None) -> str:
    """One line for status/doctor."""
    now = time.time() if now is None else now
    from rich.filesize import decimal

    text = (
        f"{decimal(w['bytes'])} (store {decimal(w['store_bytes'])}; "
        f"flagged when over {decimal(w['limit_bytes'])})"
    )
    if w["blocked_by_reader_since"]:
        text += (
            f"; checkpoints blocked by a reader for {ago(now - w['blocked_by_reader_since'])}: "
            "a read transaction holds an old snapshot (a long `quill search`/export, a backup, "
            "an open sqlite3 shell) — end it and the WAL is truncated within seconds"
        )
    return text
