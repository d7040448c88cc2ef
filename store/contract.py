"""The store contract: what every backend (embedded SQLite, PostgreSQL) offers the writer,
readers and jobs. docs/backends.md describes both implementations and their differences.

A backend is opened for one spool (``spool_id``: the stable id in the data dir's
``spool-id`` file, ``quill.spool.identity``) and provides:

* op application with its cursor — ``apply_chunk(entries, on_reject) -> ChunkResult`` applies
  consecutive spool entries in ONE transaction that also moves this spool's cursor, so a
  crash replays at most the uncommitted chunk; every op is recorded by batch id (unique
  store-wide) in that transaction, so a replayed or re-sent batch is skipped; an invalid op is
  rolled back alone, handed to ``on_reject`` (which quarantines it before the commit) and the
  rest applied. ``read_cursor()`` is this spool's committed cursor ``(segment, offset)``.
  Ops on one session serialize (SQLite: one writer per store; PostgreSQL: a per-session
  transaction lock), so transcript semantics hold whatever host wrote them.
* reads and search — ``reader()`` returns an object with the ``store.Reader`` API
  (get_messages, get_session, list_sessions, search, export, figures, …), one query language
  (``store.query``) and the same visibility rules (``store.projections``) on both backends.
* job hooks — ``index(max_rows)`` brings search up to date (SQLite's FTS slice; PostgreSQL
  indexes synchronously and returns 0); ``maintenance(job)`` runs the backend's version of a
  maintenance job and returns its figures (``MAINTENANCE_JOBS``: which jobs each backend has).
* the error tree — every failure is a ``store.errors.StoreError``: ``TransientError`` (retry),
  ``CorruptError`` (sticky halt), ``DiskFullError``, ``StoreIOError``, ``ReadOnlyError``, and
  ``BadDataError`` for values the engine refuses (quarantine the op, go on).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .errors import StoreError


class BadDataError(StoreError, ValueError):
    """The engine refused an op's values (PostgreSQL SQLSTATE class 22 data exception or 23
    integrity violation: a number out of range, a constraint). The op is quarantined."""


#: Maintenance each backend runs on a schedule. SQLite's VACUUM, FTS optimize/merge and WAL
#: checkpoints have no PostgreSQL counterpart to run (autovacuum reclaims space, GIN indexes
#: are maintained by the server, there is no WAL checkpoint to force); integrity checks use
#: ``amcheck`` there.
MAINTENANCE_JOBS: dict[str, tuple[str, ...]] = {
    "sqlite": ("vacuum", "fts_optimize", "fts_merge", "wal_checkpoint", "integrity_check"),
    "postgres": ("analyze", "integrity_check"),
}


class ReaderLike(Protocol):
    """What readers of either backend offer (``store.Reader`` is the SQLite one)."""

    def get_messages(self, session_id: str, projection: str = "display", **page: Any) -> list[dict[str, Any]]: ...
    def get_session(self, session_id: str) -> dict[str, Any] | None: ...
    def list_sessions(self, **filters: Any) -> list[dict[str, Any]]: ...
    def search(self, text: str, **filters: Any) -> list[dict[str, Any]]: ...
    def export(self, session_id: str) -> dict[str, Any] | None: ...
    def figures(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class Backend(Protocol):
    """A store opened for writing by one spool's writer (see the module doc)."""

    kind: str          # "sqlite" | "postgres"
    spool_id: str
    conn: Any          # apsw.Connection or store.postgres.connection.PgConnection

    def read_cursor(self) -> tuple[int, int] | None: ...
    def apply_chunk(self, entries: Sequence[Any], on_reject: Callable[[Any, str, str], None]) -> Any: ...
    def index(self, max_rows: int) -> int: ...
    def reader(self) -> ReaderLike: ...
    def maintenance(self, job: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


class SqliteBackend:
    """The embedded default: ``state.db`` through apsw (store.connection, store.apply, …).
    One writer per store, so the cursor is the single ``spool_cursor`` row."""

    kind = "sqlite"

    def __init__(self, path: Path, spool_id: str = "local", *, synchronous: str = "NORMAL"):
        from .connection import open_writer
        self.path = Path(path)
        self.spool_id = spool_id
        self.conn = open_writer(self.path, synchronous=synchronous)

    def read_cursor(self) -> tuple[int, int] | None:
        from .apply import read_cursor
        return read_cursor(self.conn)

    def apply_chunk(self, entries: Sequence[Any], on_reject: Callable[[Any, str, str], None]) -> Any:
        from .apply import apply_chunk
        return apply_chunk(self.conn, entries, on_reject)

    def index(self, max_rows: int) -> int:
        from .indexer import index_slice
        return index_slice(self.conn, max_rows)

    def reader(self) -> ReaderLike:
        from .reads import Reader
        return Reader(self.path)

    def maintenance(self, job: str) -> dict[str, Any]:
        if job not in MAINTENANCE_JOBS[self.kind]:
            raise ValueError(f"{job!r} is not a maintenance job of the {self.kind} store")
        if job == "integrity_check":
            problems = [r[0] for r in self.conn.execute("PRAGMA quick_check")]
            return {"ok": problems == ["ok"], "problems": [p for p in problems if p != "ok"]}
        raise ValueError(f"{job!r} runs as a scheduled store job (jobs.store_jobs) on SQLite")

    def close(self) -> None:
        self.conn.close()


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` / ``postgres://`` store URL."""
    return bool(url) and url.split(":", 1)[0] in ("postgresql", "postgres")


def open_backend(url: str | None, state_db: Path, spool_id: str, **kw: Any) -> Backend:
    """The backend for ``[store] url``: PostgreSQL for a ``postgresql://`` URL, else the
    embedded SQLite file ``state_db``. Raises ``ValueError`` for another scheme and the store
    error tree when opening fails."""
    if url is None:
        return SqliteBackend(state_db, spool_id, **kw)
    if not is_postgres_url(url):
        raise ValueError(f"[store] url must be postgresql://…, got {url.split(':', 1)[0]!r}")
    from .postgres import PostgresBackend
    return PostgresBackend(url, spool_id)
