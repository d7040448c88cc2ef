"""Every maintenance job Quill knows: where it runs, its default schedule, its parameters.

``kind="store"`` jobs write ``state.db`` and run on the writer between drain chunks;
``kind="worker"`` jobs run in the huey consumer and never write the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quill.home import RunDir, Settings


@dataclass(frozen=True)
class JobSpec:
    """One job. ``trigger``/``trigger_args`` are APScheduler 3 trigger arguments for the
    default schedule; ``params(cfg)`` gives the job's keyword arguments from ``Settings``.
    ``target`` (``"module:function"``) is the job's code, imported by ``func`` on first use:
    listing, queueing or scheduling a job loads none of them (their stores, psutil …)."""

    name: str
    kind: str  # "store" | "worker"
    target: str
    description: str
    trigger: str | None  # None: run on demand only (never scheduled by default)
    trigger_args: dict[str, Any]
    params: Callable[[Settings], dict[str, Any]] = field(default=lambda cfg: {})
    retries: int = 2
    retry_delay: float = 30.0
    needs_idle: bool = False  # store jobs only: wait until the spool is drained
    timeout: float | None = None  # worker jobs: seconds before the supervisor kills a hung run
    emits_ops: bool = (
        False  # store jobs that change canonical rows: called as func(conn, spool, ...)
    )
    # and append ops instead of writing (the spool logs every change)
    backend: str = "sqlite"  # the store it maintains: "sqlite" | "postgres" | "any"
    internal: bool = False  # queued by Quill itself with arguments; never offered to users
    per_host: bool = False  # store jobs about this host (its processes): on a cluster a scheduled
    # run is queued on every host's store queue (queues.fire_scheduled)

    @property
    def func(self) -> Callable[..., dict[str, Any]]:
        """The job's function (``target`` imported). Raises ``ImportError`` when its module
        cannot be imported."""
        import importlib

        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


JOBS: tuple[JobSpec, ...] = (
    JobSpec(
        "wal_checkpoint",
        "store",
        "quill.jobs.store_jobs:wal_checkpoint",
        "PASSIVE WAL checkpoint: bounds WAL growth "
        "(100k inserts without one left 0.5–1.15 GB of WAL)",
        "interval",
        {"minutes": 5},
    ),
    JobSpec(
        "fts_optimize",
        "store",
        "quill.jobs.store_jobs:fts_optimize",
        "merge the FTS5 index into one b-tree (fewer segments, faster queries)",
        "cron",
        {"hour": 3, "minute": 30},
        needs_idle=True,
    ),
    JobSpec(
        "fts_merge",
        "store",
        "quill.jobs.store_jobs:fts_merge",
        "one bounded incremental FTS5 merge step (segments stay few between optimizes)",
        "interval",
        {"minutes": 30},
    ),
    JobSpec(
        "fts_rebuild",
        "store",
        "quill.jobs.store_jobs:fts_rebuild",
        "rebuild search indexes detached after damage (queued automatically when found)",
        None,
        {},
    ),
    JobSpec(
        "declare_corrupt",
        "store",
        "quill.jobs.store_jobs:declare_corrupt",
        "halt the writer because a check found damage in the store's tables "
        "(queued by quick_check)",
        None,
        {},
        retries=0,
        internal=True,
    ),
    JobSpec(
        "vacuum",
        "store",
        "quill.jobs.store_jobs:vacuum",
        "VACUUM when free pages ≥ 20 % and the disk has room for the copy; then TRUNCATE the WAL",
        "cron",
        {"day_of_week": "sun", "hour": 4, "minute": 30},
        needs_idle=True,
    ),
    JobSpec(
        "scrub",
        "store",
        "quill.jobs.store_jobs:scrub",
        "FTS optimize + VACUUM + TRUNCATE checkpoint: no bytes of deleted rows left in the "
        "live store (queued by `quill spool purge`; cost: one full rewrite of the store, "
        "figures in seconds)",
        None,
        {},
        retries=0,
    ),
    JobSpec(
        "auto_prune",
        "store",
        "quill.jobs.prune:auto_prune",
        "close stale open sessions of automatic sources, then delete ended sessions past retention",
        "cron",
        {"hour": 3, "minute": 0},
        params=lambda cfg: {
            "stale_after_s": cfg.stale_after_s,
            "retention_s": cfg.retention_s,
            "sources": list(cfg.prune_sources),
        },
        emits_ops=True,
        backend="any",
    ),
    JobSpec(
        "delete_empty",
        "store",
        "quill.jobs.prune:delete_empty",
        "delete ended sessions with no message rows in any state, a day after their end",
        "cron",
        {"hour": 3, "minute": 15},
        params=lambda cfg: {"sources": list(cfg.prune_sources)},
        emits_ops=True,
        backend="any",
    ),
    JobSpec(
        "orphan_sweep",
        "store",
        "quill.jobs.prune:orphan_sweep",
        "close open sessions whose owner process on this host is dead (pid + start time)",
        "interval",
        {"minutes": 10},
        params=lambda cfg: {"sources": list(cfg.prune_sources)},
        emits_ops=True,
        backend="any",
        per_host=True,
    ),
    JobSpec(
        "quick_check",
        "worker",
        "quill.jobs.worker_jobs:quick_check",
        "PRAGMA quick_check on a read-only connection in the job worker: damage anywhere in "
        "the file is found within an hour (DAMAGE_BOUND_S), off the drain path",
        "interval",
        {"hours": 1},
        params=lambda cfg: {"db_path": str(cfg.state_db), "queue_db": str(cfg.queue_db)},
        retries=0,
        timeout=3600,
    ),  # a failed check is a finding, not a transient error
    JobSpec(
        "integrity_check",
        "worker",
        "quill.jobs.worker_jobs:integrity_check",
        "full PRAGMA integrity_check (indexes against tables); damage handled as by quick_check",
        "cron",
        {"day_of_week": "sun", "hour": 5, "minute": 0},
        params=lambda cfg: {"db_path": str(cfg.state_db), "queue_db": str(cfg.queue_db)},
        retries=0,
        timeout=3 * 3600,
    ),
    JobSpec(
        "snapshot",
        "worker",
        "quill.jobs.worker_jobs:snapshot",
        "verified backup-API snapshot stamped with its spool position",
        "interval",
        {"hours": 6},
        params=lambda cfg: {
            "db_path": str(cfg.state_db),
            "snapshots_dir": str(cfg.snapshots_dir),
            "keep": cfg.snapshot_keep,
            "halt_file": str(RunDir(cfg.home).halt_file),
        },
        timeout=3600,
    ),
    JobSpec(
        "spool_gc",
        "worker",
        "quill.jobs.worker_jobs:spool_gc",
        "delete spool segments that are applied, snapshot-covered and past retention",
        "interval",
        {"hours": 1},
        params=lambda cfg: {
            "spool_dir": str(cfg.spool_dir),
            "db_path": str(cfg.state_db),
            "snapshots_dir": str(cfg.snapshots_dir),
            "retention_s": cfg.spool_retention_s,
        },
        timeout=600,
    ),
    JobSpec(
        "pg_analyze",
        "worker",
        "quill.jobs.pg_jobs:pg_analyze",
        "PostgreSQL store: ANALYZE (fresh planner statistics after purges); "
        "autovacuum does the rest",
        "cron",
        {"hour": 3, "minute": 45},
        params=lambda cfg: {"store_url": cfg.store_url, "client": cfg.pg_client_params()},
        timeout=3600,
        backend="postgres",
    ),
    JobSpec(
        "pg_integrity_check",
        "worker",
        "quill.jobs.pg_jobs:pg_integrity_check",
        "PostgreSQL store: amcheck (bt_index_check with heapallindexed, verify_heapam)",
        "cron",
        {"day_of_week": "sun", "hour": 5, "minute": 0},
        params=lambda cfg: {"store_url": cfg.store_url, "client": cfg.pg_client_params()},
        retries=0,
        timeout=3 * 3600,
        backend="postgres",
    ),
)

BY_NAME: dict[str, JobSpec] = {j.name: j for j in JOBS}

#: Damage that no write touches is found within this many seconds by default (the period of
#: the default ``quick_check`` schedule; add the check's own run time, which grows with the
#: store). docs/operations.md documents it; bench/damage_check.py measures its cost.
DAMAGE_BOUND_S = 3600

#: Default triggers of earlier versions (``str(trigger)``), upgraded to the current default
#: when a schedule still has exactly that trigger (an operator's own choice is kept).
PREVIOUS_DEFAULTS: dict[str, tuple[str, ...]] = {"quick_check": ("cron[hour='4', minute='0']",)}

#: Internal store task used by the consumer and ``quill snapshot`` to record their runs.
RECORD_RUN = "record_job_run"
#: Internal store task: mark a replaced process's unfinished runs ``interrupted``.
CLOSE_INTERRUPTED = "close_interrupted"


def public(name: str, store: str | None = None) -> JobSpec:
    """The user-runnable job ``name``; raises ``KeyError`` listing the known ones (internal
    jobs such as ``declare_corrupt`` need arguments only Quill supplies). ``store``
    (``"sqlite"`` | ``"postgres"``): list only the jobs that kind of store can run."""
    spec = BY_NAME.get(name)
    if spec is None or spec.internal:
        known = sorted(
            j.name
            for j in JOBS
            if not j.internal and (store is None or j.backend in ("any", store))
        )
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(known)}")
    return spec


class WrongStoreError(ValueError):
    """A job that maintains another kind of store than the data dir's (``JobSpec.backend``)."""


def runnable(name: str, settings: Any) -> JobSpec:
    """The user-runnable job ``name`` for the data dir of ``settings`` (``quill.home.Settings``,
    or its ``[store] url``: None for the SQLite store). Raises ``KeyError`` (unknown or
    internal job, as ``public``) or ``WrongStoreError`` when the job maintains the other kind
    of store: a PostgreSQL job run on the SQLite store fails every time, and a SQLite job has
    no file to work on over PostgreSQL."""
    from quill.store.factory import capabilities

    store = capabilities(settings).kind
    spec = public(name, store)
    if spec.backend not in ("any", store):
        label = {"postgres": "a PostgreSQL store", "sqlite": "the SQLite store"}
        where = "[store] url is set" if store == "postgres" else "no [store] url in config.toml"
        raise WrongStoreError(
            f"{name} maintains {label[spec.backend]}, but this data dir uses "
            f"{label[store]} ({where})"
        )
    return spec


def get(name: str) -> JobSpec:
    """The job called ``name``; raises ``KeyError`` listing the known names."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(sorted(BY_NAME))}") from None
