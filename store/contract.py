"""The store contract: what every store (embedded SQLite, shared PostgreSQL) offers the
writer, replay, recover, readers and jobs. ``store.open`` (``store.factory``) returns one;
docs/backends.md describes both implementations and their differences.

A store is opened for one spool (``spool_id``: the stable id in the data dir's ``spool-id``
file, ``quill.spool.identity``) and provides:

* op application with its cursor: ``apply_chunk(entries, on_reject) -> ChunkResult`` applies
  consecutive spool entries in ONE transaction that also moves this spool's cursor, so a
  crash replays at most the uncommitted chunk; every op is recorded by batch id (unique
  store-wide) in that transaction, so a replayed or re-sent batch is skipped; an invalid op is
  rolled back alone, handed to ``on_reject`` (which quarantines it before the commit) and the
  rest applied. ``read_cursor()`` is this spool's committed cursor ``(segment, offset)``;
  ``read_cursor_proof()`` adds the proof of the entry before it (``spool.cursor_proof``),
  which the drain checks against its own spool before resuming.
  Ops on one session serialize (SQLite: one writer per store; PostgreSQL: a per-session
  transaction lock), so transcript semantics hold whatever host wrote them.
* the writer's life: ``connect``, ``check``/``committed`` around each unit of work,
  ``index_step``, ``idle_work``, ``run_job``; the sticky halt (``startup_halt``, ``halt``,
  ``serve_halted``); ``describe`` for status. Where the backends differ the store says so with
  a capability flag (below), never through the writer looking at the store URL.
* reads and search: ``reader()`` returns an object with the ``store.Reader`` API.
* the error tree: every failure is a ``store.errors.StoreError``: ``TransientError`` (retry),
  ``CorruptError`` (sticky halt), ``DiskFullError``, ``StoreIOError``, ``ReadOnlyError``, and
  ``BadDataError`` for values the engine refuses (quarantine the op, go on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from quill.home import Halt
from quill.store.errors import StoreError


class BadDataError(StoreError, ValueError):
    """The engine refused an op's values (PostgreSQL SQLSTATE class 22 data exception or 23
    integrity violation: a number out of range, a constraint). The op is quarantined with
    reason ``quarantine_reason``."""

    quarantine_reason = "invalid-data"


class OverLimitError(BadDataError):
    """A value of the op is over one of the engine's own limits (PostgreSQL SQLSTATE class 54
    "program limit exceeded": an index row over 2704 bytes, a tsvector over 1 MB). The op can
    never be stored, so it is quarantined (reason ``over-limit``) and the rest applied."""

    quarantine_reason = "over-limit"


#: Maintenance each backend runs on a schedule. SQLite's VACUUM, FTS optimize/merge and WAL
#: checkpoints have no PostgreSQL counterpart to run (autovacuum reclaims space, GIN indexes
#: are maintained by the server, there is no WAL checkpoint to force); integrity checks use
#: ``amcheck`` there.
MAINTENANCE_JOBS: dict[str, tuple[str, ...]] = {
    "sqlite": ("vacuum", "fts_optimize", "fts_merge", "wal_checkpoint", "integrity_check"),
    "postgres": ("analyze", "integrity_check"),
}

#: What a halted writer does next (``Store.serve_halted``): stay halted, resume draining
#: (the halt was lifted), or exit to be restarted (a rebuilt store was swapped in).
HaltAction = Literal["halted", "resume", "exit"]


class ReaderLike(Protocol):
    """What store readers of either backend offer (``store.Reader`` is the SQLite one)."""

    def get_messages(
        self, session_id: str, projection: str = "display", **page: Any
    ) -> list[dict[str, Any]]: ...
    def get_session(self, session_id: str) -> dict[str, Any] | None: ...
    def get_messages_page(
        self, session_id: str, projection: str = "display", **page: Any
    ) -> tuple[list[dict[str, Any]], int | None]: ...
    def list_sessions(self, **filters: Any) -> list[dict[str, Any]]: ...
    def sessions_page(self, **filters: Any) -> dict[str, Any]: ...
    def job_runs_page(self, **filters: Any) -> dict[str, Any]: ...
    def search(self, text: str, **filters: Any) -> list[dict[str, Any]]: ...
    def search_page(self, text: str, **filters: Any) -> dict[str, Any]: ...
    def export(self, session_id: str) -> dict[str, Any] | None: ...
    def figures(self) -> dict[str, Any]: ...
    def applied_cursor(self) -> str | None: ...
    def close(self) -> None: ...
    def __enter__(self) -> ReaderLike: ...
    def __exit__(self, *exc: object) -> None: ...


class Store(Protocol):
    """A store opened for writing by one spool's writer (see the module doc).

    Capability flags (class attributes) say where the backends differ:

    * ``kind``: ``"sqlite"`` or ``"postgres"`` (for status and logs, never for branching);
    * ``jobs_while_halted``: a halted writer still runs its queued bookkeeping jobs;
    * ``reconnect_on_error``: after a retryable failure the connection is dropped and
      reopened (PostgreSQL: the server may have gone); SQLite keeps its file open;
    * ``retry_first_s``: the first pause after a retryable failure (None: the writer's
      ``poll_interval``), doubling up to the writer's maximum;
    * ``halt_poll_s``: how often a halted writer looks again;
    * ``recover_hint``: the command that ends a halt, for the halt record;
    * ``maintenance_jobs``: ``MAINTENANCE_JOBS[kind]``;
    * ``local_file``, ``cluster``: inherited from the store's capability class
      (``store.capabilities``), which ``store.factory.capabilities`` returns without opening.
    """

    kind: str
    spool_id: str
    jobs_while_halted: bool
    reconnect_on_error: bool
    retry_first_s: float | None
    halt_poll_s: float
    recover_hint: str
    maintenance_jobs: tuple[str, ...]
    local_file: bool
    cluster: bool

    @property
    def connected(self) -> bool:
        """True while the store holds an open connection."""

    def connect(self) -> dict[str, Any]:
        """Open the connection (and, for the writer, the store's start-up work); returns
        figures for the ``writer.started`` log. Raises the store error tree."""

    def disconnect(self) -> None:
        """Drop the connection (reopened by ``connect``); never raises."""

    def close(self) -> None:
        """Release everything the store holds; never raises."""

    def read_cursor(self) -> tuple[int, int] | None:
        """This spool's committed cursor ``(segment, offset)``, or None before the first chunk."""

    def read_cursor_proof(self) -> tuple[int, int, int | None, str | None] | None:
        """This spool's committed cursor with its proof ``(segment, offset, proof_offset,
        proof)`` (``spool.cursor_proof``; the proof is None for a cursor written before it
        was kept), or None before the first chunk."""

    def refused(self, batches: dict[str, str]) -> set[str]:
        """The batches of ``batches`` (``{batch id: spool position}``) whose refusal at that
        position of this spool is committed (its ledger's ``rejected_batches``). Raises the
        store error tree."""

    def apply_chunk(
        self, entries: Sequence[Any], on_reject: Callable[[Any, str, str], None]
    ) -> Any:
        """Apply ``entries`` and move the cursor past them, with the proof of the last entry,
        in one transaction; returns a
        ``store.apply.chunking.ChunkResult``. Raises the store error tree (nothing committed)."""

    def check(self) -> None:
        """Before a unit of work: raise ``CorruptError`` if the store was replaced under us."""

    def committed(self) -> None:
        """After a unit of work: our own commits changed the file (the guard's baseline)."""

    def index_step(self, max_rows: int) -> tuple[int, dict[str, Any] | None]:
        """Bring search up to date by at most ``max_rows`` rows: ``(rows indexed,
        detached)``; ``detached`` is ``{"damaged": [tables], "error"}`` when damage confined
        to the search indexes was cut off (writes go on; queue ``fts_rebuild``). Raises
        ``CorruptError`` for damage anywhere else."""

    def index(self, max_rows: int) -> int:
        """One plain index slice (no damage handling); rows indexed."""

    def idle_work(self, now: float, cursor: Any, was_busy: bool) -> dict[str, Any]:
        """The store's own upkeep while the spool is drained (``now``: monotonic seconds,
        ``cursor``: the drain's ``spool.Position``, ``was_busy``: chunks were applied since
        the last call). Returns status fields to publish."""

    def status_fields(self) -> dict[str, Any]:
        """Fields the writer adds to its published status (``quill.home.WriterStatus`` fields)."""

    def describe(self, exc: Exception) -> str:
        """A retryable failure in words for status (a full disk says so, with free bytes)."""

    def startup_halt(self) -> Halt | None:
        """A halt the writer must honour before opening (recorded earlier, or found now),
        else None."""

    def halt(self, cause: Halt) -> bool:
        """Stop writing and record ``cause``; False when the record could not be written.
        Raises the store error tree (retry later) where the record lives in the store."""

    def serve_halted(self) -> HaltAction:
        """One look while halted (see ``HaltAction``)."""

    def run_job(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the store job ``func(connection, *args, **kwargs)`` on the writer's
        connection; returns what it returns. The raw connection never leaves the store."""

    def reader(self) -> ReaderLike:
        """A new reader of this store (the caller closes it)."""

    def maintenance(self, job: str) -> dict[str, Any]:
        """Run the backend's maintenance job ``job`` (``maintenance_jobs``); figures."""


class NullLog:
    """The log of a store opened without one (replay, maintenance): events are dropped, so a
    command's ``--json`` output never carries a stray log line."""

    def __getattr__(self, level: str) -> Any:
        return lambda *args, **kwargs: None
