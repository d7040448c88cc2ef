"""Read-only access to the PostgreSQL store with the ``store.Reader`` API.

``PgReader`` reuses ``Reader``'s methods (projections, listings, lineage and export are the
shared modules, run through ``PgConnection``); ``snapshot()`` is a REPEATABLE READ
transaction (one committed state for every query inside, like a SQLite read transaction).
Search goes to ``store.postgres.search``; there is no FTS watermark, so ``search_health``
is always current and ``figures`` reports every spool's cursor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quill.store.errors import CantOpenError
from quill.store.postgres import schema
from quill.store.postgres import search as pg_search
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.reach import redact
from quill.store.read.io_retry import retry_io
from quill.store.read.reader import Reader
from quill.store.sqlite.job_runs import read_figures

#: Tables whose size ``server_figures`` sums (the store's own, from the schema registry;
#: APScheduler's job store lives in the same database but is not the store).
_STORE_TABLES = tuple(schema.TABLES)


class PgReader(Reader):
    """A read-only view of the store at ``url``. Raises ``CantOpenError`` when it has no Quill
    schema yet, ``TransientError`` when the server cannot be reached.

    ``spool_dir``: the spool of ``spool_id`` on this host. With it, the cursor this reader
    reports as its spool's (``applied_cursor``, ``figures()["cursor"]``) is the store's only
    once it is proved to be this spool's (``spool.cursor_proof.check``, as the writer proves
    it before resuming): a copied data dir carries the spool id, and the store's cursor for
    that id is then the other data dir's progress, which would read as "applied" records
    this host never applied. An unproved cursor reads as None, the reason in
    ``cursor_problem``."""

    search_engine = pg_search  # ``Reader.search``/``search_page`` through PostgreSQL's

    def __init__(  # noqa: D107 - see class doc
        self,
        url: str,
        *,
        spool_id: str | None = None,
        client: dict[str, Any] | None = None,
        spool_dir: Path | None = None,
        max_line: int | None = None,
    ):
        self.path = None
        self.url = url
        self.spool_id = spool_id
        self.spool_dir = spool_dir
        self.max_line = max_line
        #: Why the store's cursor for ``spool_id`` is not this spool's (None: it is, or none).
        self.cursor_problem: str | None = None
        self._proved: tuple[Any, ...] | None = None  # the last row proved (one check per row)
        # client: libpq bounds on the connection's network waits (Settings.pg_client_params).
        # Read-only session: its snapshots' COMMITs are not waited for (``PgConnection``).
        self.conn = PgConnection(
            url, application_name="quill-reader", read_only=True, **(client or {})
        )
        self.schema_version = schema.version(self.conn)
        if self.schema_version == 0:
            self.conn.close()
            raise CantOpenError("the PostgreSQL store has no Quill schema yet")

    def search_health(self) -> dict[str, Any]:
        """Indexes are maintained in the writer's transaction: never behind, never detached."""
        return {"fts_state": "ok", "fts_pending": 0, "degraded": False}

    @retry_io
    def applied_cursor(self) -> str | None:
        """This reader's spool's committed cursor ``"segment:offset"`` (None before its
        writer's first commit, or with no ``spool_id``): one row read, for ``wait``."""
        if not self.spool_id:
            return None
        row = self.conn.execute(
            'SELECT segment, "offset", proof_offset, proof FROM spool_cursor WHERE spool_id = ?',
            (self.spool_id,),
        ).fetchone()
        return self._own(row)

    def _own(self, row: Any) -> str | None:
        """``row`` (segment, offset, proof_offset, proof) as ``"segment:offset"`` when it is
        this spool's (always, without ``spool_dir``), else None with ``cursor_problem`` set.
        Reads one entry of the spool per new row (``spool.cursor_proof.check``)."""
        if row is None:
            self.cursor_problem = None
            return None
        row = tuple(row)
        if self.spool_dir is not None and row != self._proved:
            from quill.spool import Position, cursor_proof

            kwargs = {} if self.max_line is None else {"max_line": self.max_line}
            self.cursor_problem = cursor_proof.check(
                self.spool_dir, Position(row[0], row[1]), row[2], row[3], **kwargs
            )
            self._proved = None if self.cursor_problem else row
        if self.cursor_problem is not None:
            return None
        return f"{row[0]}:{row[1]}"

    @retry_io
    def applied_positions(self, batch_ids: list[str]) -> dict[str, str | None]:
        """``{batch id: "segment:offset"}`` for each of ``batch_ids`` the store applied: its
        position in this reader's spool (``spool_id``), None when another spool applied it.
        A position alone names no spool: host A's "1:0" is not host B's."""
        rows = self.conn.execute(
            "SELECT batch_id, CASE WHEN spool_id = ? THEN position END FROM applied_batches "
            "WHERE batch_id = ANY(?)",
            (self.spool_id, batch_ids),
        ).fetchall()
        return dict(rows)

    @retry_io
    def figures(self) -> dict[str, Any]:
        """Counts for ``quill status``; ``cursor`` is this reader's spool's (``spool_id``),
        with its ``cursor_proof`` ``[proof_offset, proof]`` (``spool.cursor_proof``), and
        ``cursors`` every spool's ``{spool_id: "segment:offset"}``."""
        with self.snapshot() as c:
            cursors = {
                r[0]: (f"{r[1]}:{r[2]}", r[3], r[1:3] + r[4:6])
                for r in c.execute(
                    'SELECT spool_id, segment, "offset", updated_at, proof_offset, proof '
                    "FROM spool_cursor ORDER BY spool_id"
                )
            }
            found = cursors.get(self.spool_id) if self.spool_id else None
            # Only a cursor proved to be this spool's is "this host's cursor" (class doc).
            mine = found if found is not None and self._own(found[2]) is not None else None
            return {
                "backend": "postgres",
                "sessions": c.execute("SELECT count(*) FROM sessions").fetchone()[0],
                "messages": c.execute("SELECT count(*) FROM messages").fetchone()[0],
                "fts_indexed_upto": c.execute(
                    "SELECT coalesce(max(id), 0) FROM messages"
                ).fetchone()[0],
                "fts_pending": 0,
                "fts_state": "ok",
                "cursor": mine[0] if mine else None,
                "cursor_updated_at": mine[1] if mine else None,
                "cursor_proof": list(mine[2][2:]) if mine else None,
                "cursor_problem": self.cursor_problem if found is not None else None,
                "cursors": {k: v[0] for k, v in cursors.items()},
                "applied_batches": c.execute("SELECT count(*) FROM applied_batches").fetchone()[0],
            }

    @retry_io
    def server_figures(self, now: float) -> dict[str, Any]:
        """What ``quill status``/``doctor`` show of a PostgreSQL store: ``url`` (password
        redacted), ``server_version``, ``size_bytes`` (the store's tables with their indexes
        and TOAST, bytes), ``database_bytes`` (the whole database), ``spools`` (every host's
        cursor: ``spool_id``, ``cursor`` "segment:offset", ``updated_at`` epoch s, ``age_s``
        since that writer last committed), and ``amcheck``: the last ``pg_integrity_check``
        run recorded in the shared job history (``at``, ``outcome``, ``error``, ``figures``)
        or None when it never ran, and ``leaders``: each role's lease row (``role``,
        ``holder`` host:pid:token, ``term``, ``renewed_at``, ``expires_at`` in the server's
        epoch s, ``expired``: past its expiry by the server's clock), empty when none."""
        with self.snapshot() as c:
            size = c.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
                "AND c.relname = ANY(?)",
                (list(_STORE_TABLES),),
            ).fetchone()[0]
            db_bytes = c.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            version = c.execute("SHOW server_version").fetchone()[0]
            spools = [
                {
                    "spool_id": r[0],
                    "cursor": f"{r[1]}:{r[2]}",
                    "updated_at": r[3],
                    "age_s": round(max(0.0, now - r[3]), 1),
                }
                for r in c.execute(
                    'SELECT spool_id, segment, "offset", updated_at FROM spool_cursor '
                    "ORDER BY spool_id"
                )
            ]
            leaders = [
                dict(zip(("role", "holder", "term", "renewed_at", "expires_at", "expired"), r))
                for r in c.execute(
                    "SELECT role, holder, term, renewed_at, expires_at, "
                    "expires_at < extract(epoch FROM clock_timestamp()) "
                    "FROM leader_lease ORDER BY role"
                )
            ]
            run = c.execute(
                "SELECT started_at, outcome, error, figures FROM job_runs "
                "WHERE job = 'pg_integrity_check' ORDER BY started_at DESC LIMIT 1"
            ).fetchone()
        amcheck = (
            None
            if run is None
            else {
                "at": run[0],
                "outcome": run[1],
                "error": run[2],
                "figures": read_figures(run[3]),
            }
        )
        return {
            "url": redact(self.url),
            "server_version": version,
            "size_bytes": int(size),
            "database_bytes": int(db_bytes),
            "spools": spools,
            "amcheck": amcheck,
            "leaders": leaders,
        }
