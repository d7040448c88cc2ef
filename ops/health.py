"""Fleet, store, spool and job health: the one place that computes what ``quill status``
shows and what ``/metrics`` exports, so the CLI, the HTTP API and Prometheus never disagree.

``collect(cfg)`` returns the status document (``quill status --json``); its ``"metrics"`` key
holds the figures ``quill.ops.service.metrics`` exports, under the same names.
"""
from __future__ import annotations

import datetime as dt
import shutil
import time
from typing import Any

import psutil

from quill.spool import Position, Quarantine
from quill.spool.reader import lag_seconds, stats as spool_stats
from quill.store.errors import CantOpenError, StoreError
from quill.store.lease import holder_alive, read_holder
from quill.store.reads import Reader
from quill.workers import status as wstatus
from quill.workers.status import COMMIT_BUCKETS_S

#: Below this many free bytes producers and the writer are about to stall (a spool segment
#: rotation plus a chunk's WAL growth need a few MiB; 64 MiB leaves margin).
LOW_DISK_BYTES = 64 << 20
ROLES = ("writer", "scheduler", "consumer", "http")
#: A schedule whose next run time passed this long ago was not fired: no scheduler is running
#: it (the scheduler wakes every second, so two minutes is never normal).
OVERDUE_AFTER_S = 120.0


def fleet_state(cfg: Any) -> dict[str, Any]:
    """What each process last published (``run/<role>.json``), and whether the fleet is alive."""
    run = cfg.run_dir
    holder = read_holder(run / "fleet.lock")
    running = bool(holder) and holder_alive(holder)
    out: dict[str, Any] = {"running": running, "supervisor_pid": holder.get("pid")}
    for role in ROLES:
        st = wstatus.read(run / f"{role}.json")
        if st is not None:  # a status file outlives its process: say whether it is current
            st["alive"] = running and psutil.pid_exists(st.get("pid", -1))
            st["age_s"] = round(time.time() - st.get("updated_at", 0), 1)
        if st is not None or role != "http":
            out[role] = st
    out["halt"] = wstatus.read(run / "halt.json")
    sup = wstatus.read(run / "supervisor.json") or {}
    out["crash_loop"] = sup.get("crash_loop") if running or sup.get("state") == "stopped" else None
    out["restarts"] = sup.get("restarts", {}) if running else {}
    return out


def collect(cfg: Any) -> dict[str, Any]:
    """The status document: home, fleet, store figures, recent jobs, spool, disk, metrics.

    Never raises for a damaged or missing store: that is when status must still answer
    (``store`` is then None or ``{"error": ...}``).
    """
    data: dict[str, Any] = {"home": str(cfg.home), "fleet": fleet_state(cfg)}
    totals: list[dict[str, Any]] = []
    try:
        with Reader(cfg.state_db) as r:
            data["store"] = r.figures()
            data["jobs"] = r.job_runs(limit=10)
            totals = r.job_run_totals()
    except CantOpenError:
        data["store"], data["jobs"] = None, []
    except StoreError as exc:
        data["store"], data["jobs"] = {"error": f"{type(exc).__name__}: {exc}"}, []
    store = data["store"] or {}
    cursor = Position.parse(store["cursor"]) if store.get("cursor") else None
    data["spool"] = {**spool_stats(cfg.spool_dir, cursor), "quarantined": Quarantine(cfg.spool_dir).count()}
    data["spool"]["lag_s"] = (round(lag_seconds(cfg.spool_dir, cursor, time.time()), 1)
                              if data["spool"]["pending_bytes"] else 0.0)
    # Read, never written: on a full disk no process can publish its status, so free space is
    # measured here.
    existing = next(p for p in (cfg.home, *cfg.home.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    data["disk"] = {"free_bytes": free, "low": free < LOW_DISK_BYTES}
    data["metrics"] = _metrics(data, totals)
    return data


def _metrics(data: dict[str, Any], job_totals: list[dict[str, Any]]) -> dict[str, Any]:
    """The exported figures, derived from the status document (units in the names)."""
    fleet, store = data["fleet"], data["store"] or {}
    writer = fleet.get("writer") or {}
    commit = writer.get("commit_hist") or {}
    return {
        "spool_pending_bytes": data["spool"]["pending_bytes"],
        "spool_lag_seconds": data["spool"]["lag_s"],
        "quarantined_records": data["spool"]["quarantined"],
        # Counters of the running writer process (they restart from 0 with it; Prometheus'
        # rate() handles counter resets).
        "ops_applied_total": writer.get("applied", 0),
        "ops_duplicate_total": writer.get("duplicates", 0),
        "ops_rejected_total": writer.get("rejected", 0),
        "rows_applied_total": writer.get("rows", 0),
        "chunk_commit_seconds": {"buckets": dict(zip([str(b) for b in COMMIT_BUCKETS_S],
                                                     commit.get("counts", [0] * len(COMMIT_BUCKETS_S)))),
                                 "count": commit.get("count", 0), "sum": commit.get("sum", 0.0)},
        "fts_pending_rows": store.get("fts_pending", 0),
        "writer_halted": 1 if fleet.get("halt") else 0,
        "worker_restarts": {role: fleet["restarts"].get(role, 0) for role in ROLES
                            if role != "http" or "http" in fleet["restarts"]},
        "job_runs": job_totals,
        "jobs_overdue": len(overdue_schedules(fleet, time.time())),
        "disk_free_bytes": data["disk"]["free_bytes"],
    }


def overdue_schedules(fleet: dict[str, Any], now: float) -> list[str]:
    """Ids of schedules (as the scheduler last published them) whose next run time is more
    than ``OVERDUE_AFTER_S`` in the past."""
    out = []
    for job in (fleet.get("scheduler") or {}).get("jobs") or []:
        if job.get("next_run") and epoch(job["next_run"]) < now - OVERDUE_AFTER_S:
            out.append(job["id"])
    return out


def epoch(value: Any) -> float:
    """An ISO datetime (UTC when naive) or epoch seconds → epoch seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()
