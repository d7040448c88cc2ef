"""The two huey queues, both in ``queue.db`` (never in ``state.db``):

* ``quill-store`` – jobs that write the store. Only the writer dequeues them and runs them on
  its own connection; huey is used as the durable queue, not as the executor.
* ``quill-jobs`` – jobs the huey consumer executes (snapshots, checks). Each run is timed and
  its record is sent to the writer through ``quill-store`` (``record_job_run``;
  ``jobs.run_records``: a record the queue refuses is held and sent later, never dropped).

``queue.db`` uses journal_mode=TRUNCATE, not WAL: huey talks to it through the stdlib
``sqlite3`` and so the *system* SQLite, which may carry the WAL-reset corruption bug fixed in
3.51.3 (docs/architecture.md, "Processes"). huey delivers at most once; every job is idempotent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quill.home import Settings
from quill.home.doorbell import ring
from quill.home.layout import private_dirs
from quill.jobs import catalog
from quill.jobs.errors import damaged, guarded
from quill.jobs.huey_lazy import (
    BaseStorage,
    RedisHuey,
    RedisStorage,
    SqliteHuey,
    SqliteStorage,
    redis_storage,
)
from quill.jobs.run_records import run_recorded
from quill.spool.segments import DOORBELL
from quill.store.sqlite.job_runs import close_interrupted, record_job_run

STORE_QUEUE = "quill-store"
WORKER_QUEUE = "quill-jobs"


@dataclass
class Queues:
    """Handles on both queues for one data dir, with every task registered."""

    store: SqliteHuey
    worker: SqliteHuey
    tasks: dict[str, Any] = field(default_factory=dict)
    #: The doorbell of the writer that takes this store queue (``spool.segments.DOORBELL``
    #: of the data dir), rung after a store job is queued; None: nobody is woken.
    writer_doorbell: Path | None = None
    #: ``job_runs`` records of worker runs the store queue refused, held for the next try,
    #: oldest first, one per run (``job``, ``started_at``): ``jobs.run_records``.
    owed: dict[tuple[str, float], dict[str, Any]] = field(default_factory=dict)
    #: Where ``jobs.run_records`` logs a record it could not send (a structlog-style logger
    #: of the long-running process that owns these queues); None: the caller reports it.
    log: Any = None

    def enqueue(self, name: str, **params: Any) -> None:
        """Enqueue job ``name`` with keyword ``params`` on the queue its kind uses; a store
        job wakes the idle writer (``writer_doorbell``) so it runs now, not at the next poll."""
        if name not in self.tasks:
            catalog.get(name)  # raises KeyError naming the known jobs
        self.tasks[name](**params)
        spec = catalog.BY_NAME.get(name)  # None: an internal task, which the writer runs
        if (spec is None or spec.kind == "store") and self.writer_doorbell is not None:
            try:
                ring(self.writer_doorbell)
            except OSError:
                pass  # latency only: the writer polls too, and reports its own doorbell

    def pending(self) -> dict[str, int]:
        """Tasks waiting in each queue (not counting one being executed). Raises
        ``QueueUnavailableError``, as every call into either queue does."""
        return {"store": self.store.pending_count(), "worker": self.worker.pending_count()}


#: The storage methods huey's ``Huey`` and consumer call (every public one of its base).
STORAGE_METHODS = tuple(
    n for n, v in vars(BaseStorage).items() if callable(v) and not n.startswith("_")
)


def _guard(base: type[BaseStorage]) -> type[BaseStorage]:
    """``base`` with every storage method (and the constructor: ``queue.db`` is opened
    there) run under ``jobs.errors.guarded``: an unreachable queue raises
    ``QueueUnavailableError`` from whichever call met it, never a raw driver error. Before
    each call ``quill_fresh`` may open the storage afresh (``_Reopening``); a call that finds
    it damaged marks it ``quill_stale`` so the next one does."""

    def wrap(name: str) -> Any:
        method = getattr(base, name)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            with guarded(self.quill_where):
                try:
                    self.quill_fresh()
                    return method(self, *args, **kwargs)
                except Exception as exc:
                    if damaged(exc):
                        self.quill_stale = True
                    raise

        call.__name__ = name
        return call

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        self.quill_where = kwargs.pop("quill_where")
        with guarded(self.quill_where):
            base.__init__(self, *args, **kwargs)

    methods = {n: wrap(n) for n in STORAGE_METHODS if hasattr(base, n)}
    return type(
        f"Guarded{base.__name__}",
        (base,),
        {"__init__": init, "quill_stale": False, "quill_fresh": lambda self: None, **methods},
    )


def _identity(path: str) -> tuple[int, int] | None:
    """``(device, inode)`` of ``path``; None when there is no such file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


class _Reopening(_guard(SqliteStorage)):  # type: ignore[misc]
    """huey's ``SqliteStorage`` (guarded) that follows ``queue.db`` by its path: a connection
    stays on the inode it opened, so once a damaged file is moved aside (or the file is
    replaced or deleted) every later call would still meet the old one, until a restart.
    Before each call the connection is closed and the schema created afresh (a new file has
    no tables) when the path names another file than the connection's (one ``stat``) or the
    previous call found the file damaged; the old connection's file is never written again.

    Constructing it touches no file: the schema is created by the first call (``quill_stale``
    starts true), so building the queues never fails. A ``queue.db`` locked by another process
    past the busy timeout, or unreachable, is met by the call that needs it, as
    ``QueueUnavailableError`` — which every caller handles as an outage (a CLI run of a job
    still runs it and owes its records, ``jobs.run_records``) — and the schema is tried again
    by the next call until it was created once."""

    quill_opened: tuple[int, int] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, create_tables=False, **kwargs)
        self.quill_stale = True

    def _create_connection(self) -> Any:
        conn = super()._create_connection()
        self.quill_opened = _identity(self.filename)  # sqlite3.connect created the file
        return conn

    def quill_fresh(self) -> None:
        moved = self._conn is not None and _identity(self.filename) != self.quill_opened
        if not (self.quill_stale or moved):
            return
        SqliteStorage.close(self)
        self.initialize_schema()  # opens, creates the tables if missing, closes
        self.quill_stale = False  # only once it was created: a failed try is tried again


GuardedRedisStorage = _guard(RedisStorage)
GuardedSqliteStorage = _Reopening
#: Connecting to Redis gives up after this long (s), and so does a reply: an unreachable
#: host (no route, a dropped link) must not hold the writer longer than this per try.
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_REPLY_TIMEOUT_S = 5.0  # above huey's 1 s BRPOP wait


#: How long (s) a call waits for ``queue.db`` locked by another process's transaction before it
#: fails as ``QueueUnavailableError`` (SQLite's busy timeout).
QUEUE_BUSY_TIMEOUT_S = 10.0


def _huey(name: str, queue_db: Path) -> SqliteHuey:
    return SqliteHuey(
        name,
        filename=str(queue_db),
        journal_mode="truncate",
        results=False,
        utc=True,
        timeout=QUEUE_BUSY_TIMEOUT_S,
        storage_class=GuardedSqliteStorage,
        quill_where=str(queue_db),
    )


def redacted(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages and status."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def redis_names(host_id: str, namespace: str = "quill") -> tuple[str, str]:
    """``(store queue, worker queue)`` names on a shared Redis (``[queue] url``).

    The store queue is per host: its jobs run in that host's writer, on that host's store
    connection. The worker queue is shared: any host's consumer may run its jobs. huey keeps
    only ``[A-Za-z0-9_]`` of a name, so every other character of ``host_id`` is mapped to
    ``_`` here, before huey would silently drop it (``quill-host.1`` and ``quillhost1`` must
    not collide)."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in f"{namespace}_store_{host_id}")
    return safe, f"{namespace}_jobs"


def _redis_huey(name: str, url: str) -> RedisHuey:
    # Delivery is at most once (BRPOP, no acknowledgement): every job is idempotent and the
    # spool, not the queue, is the log of every change (docs/backends.md).
    redis_storage()  # the driver is loaded only for a data dir whose queue is on Redis
    from redis import ConnectionPool

    pool = ConnectionPool.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=REDIS_REPLY_TIMEOUT_S,
    )
    return RedisHuey(
        name,
        connection_pool=pool,
        results=False,
        utc=True,
        storage_class=GuardedRedisStorage,
        quill_where=redacted(url),
    )


def build(
    queue_db: Path,
    *,
    url: str | None = None,
    host_id: str = "local",
    namespace: str = "quill",
    cfg: Settings | None = None,
) -> Queues:
    """Open the queues and register every job of ``jobs.catalog``: in ``queue_db`` (created
    if missing), or on the Redis server at ``url`` (``redis_names(host_id, namespace)``).

    ``cfg`` (an ``quill.home.Settings``) is needed by the process that *executes* worker jobs:
    a queued task carries the job name and explicit options (e.g. ``mode``) only; parameters
    from config (paths, retention …) are resolved when it runs (``resolve_params``)."""
    if url is not None:
        store_name, worker_name = redis_names(host_id, namespace)
        queues = Queues(_redis_huey(store_name, url), _redis_huey(worker_name, url))
        return _register(queues, cfg)
    queue_db = Path(queue_db)
    private_dirs(queue_db.parent)
    return _register(Queues(_huey(STORE_QUEUE, queue_db), _huey(WORKER_QUEUE, queue_db)), cfg)


def build_for(cfg: Settings) -> Queues:
    """``build`` for a data dir's configuration (``quill.home.Settings``): Redis when
    ``[queue] url`` is set (queue names from the data dir's spool id), else ``queue.db``;
    worker jobs run from it resolve their parameters from ``cfg``, and a store job queued
    through it wakes the data dir's writer."""
    if cfg.queue_url:
        from quill.spool.identity import load_or_create

        queues = build(
            cfg.queue_db, url=cfg.queue_url, host_id=load_or_create(cfg.spool_id_path), cfg=cfg
        )
    else:
        queues = build(cfg.queue_db, cfg=cfg)
    queues.writer_doorbell = cfg.spool_dir / DOORBELL
    return queues


def fire_scheduled(cfg: Settings, name: str) -> list[str] | None:
    """Queue one scheduled run of job ``name`` for a data dir's configuration
    (``quill.home.Settings``): what every schedule does (``workers.scheduler.fire``).

    A ``per_host`` store job (``orphan_sweep``: an owner process can only be checked on its own
    host) on a cluster (``[store] url`` + ``[queue] url``) goes on the store queue of every
    host — each spool id with a cursor row in the shared store, plus this host's — because the
    schedule fires on the elected leader only. Each host's writer runs it on its own spool and
    records its own run in ``job_runs``. A host whose store queue already holds a pending run
    of the job is skipped (coalescing, as the schedule itself does): a host gone for good keeps
    one queued run, not one per period. Returns the spool ids queued for by such a fan-out, or
    None when the job went on this data dir's own queues. Raises ``KeyError`` for an unknown
    job and the store error tree when the shared store cannot be read."""
    queues = build_for(cfg)
    from quill.store.factory import capabilities, open_store

    if not (catalog.get(name).per_host and capabilities(cfg).cluster and cfg.queue_url):
        queues.enqueue(name)
        return None
    from quill.spool.identity import load_or_create
    from quill.store.postgres.apply import spool_ids
    from quill.store.postgres.store import PgStore

    own = load_or_create(cfg.spool_id_path)
    store = open_store(cfg, spool_id="scheduler")  # reads only: applies no ops
    try:
        assert isinstance(store, PgStore) and store.conn is not None  # cluster: PostgreSQL's
        hosts = sorted({own, *spool_ids(store.conn)})
    finally:
        store.close()
    queued = []
    for host in hosts:
        target = queues if host == own else build(cfg.queue_db, url=cfg.queue_url, host_id=host)
        if any(task.name == name for task in target.store.pending()):
            continue
        target.enqueue(name)
        queued.append(host)
    return queued


def _register(queues: Queues, cfg: Settings | None = None) -> Queues:
    queues.tasks[catalog.RECORD_RUN] = queues.store.task(name=catalog.RECORD_RUN)(record_job_run)
    queues.tasks[catalog.CLOSE_INTERRUPTED] = queues.store.task(name=catalog.CLOSE_INTERRUPTED)(
        close_interrupted
    )
    for spec in catalog.JOBS:
        if spec.kind == "store":
            queues.tasks[spec.name] = queues.store.task(
                name=spec.name, retries=spec.retries, retry_delay=spec.retry_delay
            )(_deferred(spec))
        else:
            queues.tasks[spec.name] = queues.worker.task(
                name=spec.name, retries=spec.retries, retry_delay=spec.retry_delay
            )(_recorded(spec, queues, cfg))
    return queues


def _deferred(spec: catalog.JobSpec) -> Any:
    """A function that runs ``spec``'s code, imported at the first call: a process that only
    queues jobs never loads what they run (``JobSpec.target``)."""

    def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return spec.func(*args, **kwargs)

    run.__name__ = spec.name
    return run


def resolve_params(
    spec: catalog.JobSpec, cfg: Settings | None, queued: dict[str, Any]
) -> dict[str, Any]:
    """The keyword arguments a run of ``spec`` gets: what the task was queued with, overridden
    by what the current config says (so a task queued before a data dir moved, or by an old
    version that froze paths, runs against the current paths)."""
    return {**queued, **(spec.params(cfg) if cfg is not None else {})}


def _recorded(spec: catalog.JobSpec, queues: Queues, cfg: Settings | None):
    """Wrap a worker job so every run (ok or error) is recorded in the store's job_runs."""

    def run(**queued: Any) -> dict[str, Any]:
        return run_recorded(spec, queues, resolve_params(spec, cfg, queued), runner="consumer")

    run.__name__ = spec.name
    return run
