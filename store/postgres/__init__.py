"""Quill's PostgreSQL store (psycopg 3): several hosts' writers, one shared store.

``PgStore`` (``store.postgres.store``, over ``PostgresBackend``) implements
``store.contract.Store`` for one spool; ``PgReader`` the reader API. See docs/backends.md
for the contract, what differs from the embedded SQLite store, and the maintenance that
replaces SQLite's.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Sequence
from typing import Any

from quill.store.apply.chunking import ChunkResult
from quill.store.contract import MAINTENANCE_JOBS
from quill.store.errors import CorruptError
from quill.store.postgres import apply as pg_apply
from quill.store.postgres import schema
from quill.store.postgres.bounded import LONG_WORK_ANSWER_S
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.extensions import extension_schema
from quill.store.postgres.reads import PgReader
from quill.store.postgres.session_settings import WRITER_SESSION

__all__ = ["PgConnection", "PgReader", "PostgresBackend"]


class PostgresBackend:
    """The store at ``url`` opened for the writer of spool ``spool_id``: creates or migrates
    the schema, then applies chunks with this spool's cursor. Raises the store error tree
    (``TransientError`` when the server is unreachable: the writer retries)."""

    kind = "postgres"
    #: The claim token this writer holds on its spool id (``store.postgres.claims``); None:
    #: chunks apply unclaimed (the bare backend of tests and tools).
    holder_token: str | None = None

    def __init__(self, url: str, spool_id: str, *, client: dict[str, Any] | None = None):
        """``client``: libpq parameters bounding the connection's network waits
        (``Settings.pg_client_params``; None: the defaults')."""
        self.url = url
        self.spool_id = spool_id
        self.client = dict(client or {})
        self.conn = PgConnection(
            url,
            application_name=f"quill-writer:{spool_id}",
            settings=WRITER_SESSION,
            **self.client,
        )
        try:
            schema.create(self.conn)
        except BaseException:
            self.conn.close()
            raise

    def read_cursor(self) -> tuple[int, int] | None:
        return pg_apply.read_cursor(self.conn, self.spool_id)

    def read_cursor_proof(self) -> tuple[int, int, int | None, str | None] | None:
        return pg_apply.read_cursor_proof(self.conn, self.spool_id)

    def refused(self, batches: dict[str, str]) -> set[str]:
        from quill.store.postgres.ledger import refused_here

        return refused_here(self.conn, self.spool_id, batches) if batches else set()

    def apply_chunk(
        self, entries: Sequence[Any], on_reject: Callable[[Any, str, str], None]
    ) -> ChunkResult:
        return pg_apply.apply_chunk(self.conn, self.spool_id, entries, on_reject, self.holder_token)

    def index(self, max_rows: int) -> int:
        """Nothing to do: GIN indexes are maintained in the writer's transaction."""
        return 0

    def reader(self) -> PgReader:
        return PgReader(self.url, spool_id=self.spool_id)

    def maintenance(self, job: str) -> dict[str, Any]:
        """Run a PostgreSQL maintenance job (``MAINTENANCE_JOBS['postgres']``) and return its
        figures. ``analyze``: ANALYZE the store's tables (after a big purge; autovacuum does the
        rest) and report dead tuples. ``integrity_check``: amcheck's ``bt_index_check`` with
        ``heapallindexed`` on every B-tree index and ``verify_heapam`` on every table — both
        safe on a live primary (AccessShareLock); ``bt_index_parent_check`` is never run (it
        blocks writes). Needs the ``amcheck`` extension (created if missing; superuser or a
        granted role). Raises ``ValueError`` for another job."""
        if job not in MAINTENANCE_JOBS[self.kind]:
            raise ValueError(f"{job!r} is not a maintenance job of the {self.kind} store")
        with self.conn.longer(LONG_WORK_ANSWER_S):  # statements that grow with the store
            return self._maintenance(job)

    def _maintenance(self, job: str) -> dict[str, Any]:
        tables = tuple(schema.TABLES)
        if job == "analyze":
            for t in tables:
                self.conn.execute(f"ANALYZE {t}")
            dead = {
                r[0]: r[1]
                for r in self.conn.execute(
                    "SELECT relname, n_dead_tup FROM pg_stat_user_tables "
                    "WHERE schemaname = current_schema()"
                )
            }
            return {"tables": len(tables), "dead_tuples": dead}
        amcheck = extension_schema(self.conn, "amcheck")
        problems: list[str] = []
        indexes = [
            r[0]
            for r in self.conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_am a ON a.oid = c.relam "
                "WHERE a.amname = 'btree' AND t.relnamespace = current_schema()::regnamespace "
                "AND i.indisvalid "  # amcheck refuses an index still being built (concurrently)
                "ORDER BY 1"
            )
        ]
        for name in indexes:
            try:
                self.conn.execute(
                    f'SELECT "{amcheck}".bt_index_check(?::regclass, true)', (name,)
                ).fetchall()
            except CorruptError as exc:  # XX002: amcheck raises for the first violation it meets
                problems.append(f"index {name}: {exc}")
        for t in tables:
            problems += [
                f"{t} block {r[0]}: {r[1]}"
                for r in self.conn.execute(
                    f'SELECT blkno, msg FROM "{amcheck}".verify_heapam(?::regclass)', (t,)
                )
            ]
        return {
            "ok": not problems,
            "problems": problems,
            "indexes_checked": len(indexes),
            "tables_checked": len(tables),
            "tables": list(tables),
            "host": socket.gethostname(),
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
