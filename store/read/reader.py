"""Read-only access to ``state.db``: transcripts, session listings, lineage, search, figures.

A ``Reader`` holds one read-only connection (WAL readers never block the writer) and
delegates to the modules that own each rule: ``projections`` (model / display / audit),
``listing`` (filters, chains, unread, emptiness), ``lineage`` (compression chains),
``search`` (word, trigram, scan). Every method maps SQLite errors to the store error tree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from quill.store import packed
from quill.store.apply import context as context_mod
from quill.store.apply.normalize import COMPARED_COLUMNS
from quill.store.apply.revise import REVISED_COLUMNS
from quill.store.apply.usage_fields import TOKEN_FIELDS
from quill.store.errors import CantOpenError, StoreError, cant_open_cause, mapped
from quill.store.read import lineage, listing, message_pages, projections, resume
from quill.store.read import usage as usage_reads
from quill.store.read.io_retry import retry_io
from quill.store.read.status_reads import StatusReads
from quill.store.search import run as search_mod
from quill.store.sqlite.connection import open_reader


class Reader(StatusReads):
    """A read-only view of a store file. Raises ``CantOpenError`` if it does not exist,
    ``DescriptorsExhaustedError`` when no file descriptor was left to open it.
    Every public read retries briefly after an I/O error (``IO_RETRIES``)."""

    #: The module that serves ``search``/``search_page`` (``search(conn, text, **filters)``,
    #: ``search_page(...)``): SQLite's; ``PgReader`` names PostgreSQL's.
    search_engine: Any = search_mod

    def __init__(self, db_path: Path, *, vfs: str | None = None):
        self.path = Path(db_path)
        self.conn: apsw.Connection = open_reader(self.path, vfs=vfs)
        try:
            with mapped():  # the first read opens the WAL and its index: more descriptors
                version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        except StoreError as exc:
            cause = cant_open_cause(self.path, self.conn.system_errno)
            self.conn.close()
            if cause is not None:
                raise cause from exc
            raise
        if version == 0:  # the writer created the file but has not committed the schema yet
            self.conn.close()
            raise CantOpenError(f"{self.path} has no Quill schema yet")
        #: The store's schema version when opened: an older store (not yet migrated by a newer
        #: writer) lacks the newer tables, and the reads of them answer as an empty table would.
        self.schema_version = version

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[apsw.Connection]:
        """A read transaction: every query inside sees one committed state of the store
        (so a page, its neighbours and the session row agree). Re-entrant."""
        with mapped():
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:  # an I/O error makes SQLite roll back by itself
                    self.conn.execute("COMMIT")

    @retry_io
    def get_messages(
        self,
        session_id: str,
        projection: str = "display",
        *,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
        before_id: int | None = None,
        clip: int | None = None,
    ) -> list[dict[str, Any]]:
        """Messages of a session in ``projection``, oldest first (``projections.read``):
        ``limit``/``offset`` pages, ``latest=True`` for the last ``limit``, ``after_id`` /
        ``before_id`` for keyset pages, ``clip`` (characters) for a page that shows only the
        start of each text, at a cost that does not grow with the largest message. Raises
        ``ValueError`` for an unknown projection or a bad limit, offset or clip."""
        with self.snapshot() as conn:
            return projections.read(
                conn,
                session_id,
                projection,
                limit=limit,
                offset=offset,
                latest=latest,
                after_id=after_id,
                before_id=before_id,
                clip=clip,
            )

    @retry_io
    def get_messages_page(
        self,
        session_id: str,
        projection: str = "display",
        *,
        limit: int,
        after_pos: int | None = None,
        clip: int | None = None,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """A keyset page of ``get_messages`` (``message_pages.read_page``): at most ``limit``
        messages positioned after ``after_pos``, and the position the next page starts
        after (None on the last page). Raises ``ValueError`` for a bad argument."""
        with self.snapshot() as conn:
            return message_pages.read_page(
                conn, session_id, projection, limit, after_pos=after_pos, clip=clip
            )

    @retry_io
    def export(self, session_id: str) -> dict[str, Any] | None:
        """``{"session": …, "messages": display transcript, "chain": root→tip ids}`` or None."""
        with self.snapshot() as conn:
            session = self.get_session(session_id)
            if session is None:
                return None
            return {
                "session": session,
                "chain": lineage.compression_chain(conn, session_id),
                "messages": projections.read(conn, session_id, "display"),
            }

    @retry_io
    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """One session row (``listing.SESSION_KEYS`` + chain fields), or None."""
        with mapped():
            rows = listing.list_sessions(
                self.conn, session_id=session_id, include_hidden=True, limit=1, lineage="all"
            )
        return rows[0] if rows else None

    @retry_io
    def list_sessions(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        include_hidden: bool = False,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """Sessions most recently active first; see ``listing.list_sessions`` for the filters
        (archived, pinned, hidden, title_contains, since, until, lineage)."""
        with mapped():
            return listing.list_sessions(
                self.conn, source=source, limit=limit, include_hidden=include_hidden, **filters
            )

    @retry_io
    def sessions_page(self, *, limit: int = 50, **filters: Any) -> dict[str, Any]:
        """One page of ``list_sessions`` (same filters, ``after`` among them):
        ``{"sessions": rows, "next": cursor | None}`` (``listing.sessions_page``)."""
        with mapped():
            return listing.sessions_page(self.conn, limit=limit, **filters)

    @retry_io
    def usage_totals(self, by: tuple[str, ...] = (), **filters: Any) -> list[dict[str, Any]]:
        """Token and cost totals grouped by ``by`` (session, model, source, task, provider,
        day); filters since, until, session_id, source, model, task (``usage_reads.totals``)."""
        with mapped():
            return usage_reads.totals(self.conn, tuple(by), **filters)

    @retry_io
    def usage_page(
        self, by: tuple[str, ...] = (), *, limit: int, after: str | None = None, **filters: Any
    ) -> dict[str, Any]:
        """A page of ``usage_totals``: ``{"usage": rows, "next": cursor | None}``, keyset on
        the group key (``usage_reads.page``). Raises ``BadCursorError`` for a cursor of another
        listing, grouping or filter."""
        with mapped():
            return usage_reads.page(self.conn, tuple(by), limit=limit, after=after, **filters)

    @retry_io
    def resume_target(
        self, *, key: str | None = None, cwd: str | None = None
    ) -> dict[str, Any] | None:
        """The session to resume for ``key`` or ``cwd`` (``resume.resume_target``): the tip
        of the newest compression chain, never a branch, delegate or hidden session."""
        with self.snapshot() as conn:
            return resume.resume_target(conn, key=key, cwd=cwd)

    @retry_io
    def key_sessions(self, key: str) -> list[str]:
        """Session ids of the conversation ``key`` (``resume.key_sessions``)."""
        with self.snapshot() as conn:
            return resume.key_sessions(conn, key)

    @retry_io
    def orphans(self, *, window_s: float = resume.QUIET_WINDOW_S) -> list[dict[str, Any]]:
        """Message-bearing sessions that never got their key (``resume.orphans``)."""
        with self.snapshot() as conn:
            return resume.orphans(conn, window_s=window_s)

    @retry_io
    def context(self, session_id: str) -> dict[str, Any]:
        """The session's system prompt and tool array (current, and every change), stored
        once per distinct value (``context.context``)."""
        with self.snapshot() as conn:
            return context_mod.context(conn, session_id)

    @retry_io
    def usage_responses(self, session_id: str) -> dict[str, dict[str, int]]:
        """``{response_id: {token field: count}}`` (``usage.TOKEN_FIELDS``) of every usage row
        of a session with a response id: the calls already counted, and their counts (an
        import sends a call again when a later copy of its record counts more)."""
        with mapped():
            return {
                rid: dict(zip(TOKEN_FIELDS, counts))
                for rid, *counts in self.conn.execute(
                    f"SELECT response_id, {', '.join(TOKEN_FIELDS)} FROM usage "
                    "WHERE session_id = ? AND response_id IS NOT NULL",
                    (session_id,),
                )
            }

    @retry_io
    def has_session(self, session_id: str) -> bool:
        """True when a session row with this id exists (a primary-key probe, far cheaper
        than ``get_session``, which assembles the listing row)."""
        with mapped():
            return (
                self.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is not None
            )

    @retry_io
    def is_empty(self, session_id: str) -> bool:
        """True when the session has no message row in any state (an EXISTS probe)."""
        with mapped():
            return (
                self.conn.execute(
                    "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (session_id,)
                ).fetchone()
                is None
            )

    @retry_io
    def message_states(self, session_id: str) -> dict[str, str]:
        """``{producer id: state}`` of a session's rows that have a producer id (the newest
        row wins for an id held twice). Importers use it to spool only what is missing."""
        with mapped():
            return {
                ext: state
                for ext, state in self.conn.execute(
                    "SELECT ext_id, state FROM messages "
                    "WHERE session_id = ? AND ext_id IS NOT NULL ORDER BY seq",
                    (session_id,),
                )
            }

    @retry_io
    def message_versions(self, session_id: str) -> dict[str, list[tuple]]:
        """``{producer id: [row values in revise.REVISED_COLUMNS order, …]}`` of every row of
        the session that has a producer id (every row holding an id, in transcript order): how
        an import tells a message the store holds in an older copy (``revise.changed``)."""
        out: dict[str, list[tuple]] = {}
        with mapped():
            for ext, *values in self.conn.execute(
                f"SELECT ext_id, {packed.columns_sql(REVISED_COLUMNS)} FROM messages "
                "WHERE session_id = ? AND ext_id IS NOT NULL ORDER BY seq",
                (session_id,),
            ):
                out.setdefault(ext, []).append(tuple(values))
        return out

    @retry_io
    def message_identities(self, session_id: str, ext_ids: list[str]) -> dict[str, tuple]:
        """``{producer id: row values in normalize.COMPARED_COLUMNS order}`` of the session's
        rows with those ids (the first row wins for an id held twice): how an import tells
        whether a stored session holds the conversation it reads (ops/transfer/import_spool.py)."""
        out: dict[str, tuple] = {}
        with mapped():
            for ext, *values in self.conn.execute(
                f"SELECT ext_id, {packed.columns_sql(COMPARED_COLUMNS)} FROM messages "
                "WHERE session_id = ? AND ext_id IN "
                f"({','.join('?' * len(ext_ids))}) ORDER BY seq",
                (session_id, *ext_ids),
            ):
                out.setdefault(ext, tuple(values))
        return out

    @retry_io
    def title_holder(self, title: str) -> str | None:
        """The session holding exactly ``title`` (titles are unique), or None."""
        with mapped():
            row = self.conn.execute("SELECT id FROM sessions WHERE title = ?", (title,)).fetchone()
        return row[0] if row else None

    @retry_io
    def deletions(self, session_id: str) -> int:
        """How many times ``session_id`` was deleted (``sessions.delete``; 0 = never). Importers
        put it in their batch ids so a deleted session can be imported again (schema v6)."""
        if self.schema_version < 6:  # the table came with v6 (deletions before it were not counted)
            return 0
        with mapped():
            row = self.conn.execute(
                "SELECT deletions FROM session_deletions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return row[0] if row else 0

    @retry_io
    def compression_chain(self, session_id: str) -> list[str]:
        """Session ids of the compression chain through ``session_id``, root → tip."""
        with mapped():
            return lineage.compression_chain(self.conn, session_id)

    @retry_io
    def search(self, text: str, **filters: Any) -> list[dict[str, Any]]:
        """Messages matching ``text``, newest first (``search_engine.search``: hits carry
        session_id, message_id, role, state, ts, title, matched_in, snippet, highlights, before,
        after). Filters (``store.search.run.search_page``'s, the one list for both backends):
        limit (20), session_id, role, source, projection ("display"), since, until, substring,
        context, kinds, order ("newest" or "relevance": bounded BM25 over the newest 1,000
        matches, ``store.search.rank``), per_session."""
        with self.snapshot() as conn:
            return self.search_engine.search(conn, text, **filters)

    @retry_io
    def search_page(self, text: str, **filters: Any) -> dict[str, Any]:
        """``search`` with the per-session cap (``per_session``) and the bounded count:
        ``{hits, total, total_exact, more, per_session, sessions}`` (``store.search.group``)."""
        with self.snapshot() as conn:
            return self.search_engine.search_page(conn, text, **filters)

    def search_route(
        self, text: str, *, substring: bool = False, kinds: list[str] | None = None
    ) -> dict[str, Any]:
        """How ``text`` will be searched (``search.route``): route, narrower, note."""
        return search_mod.route(text, substring=substring, kinds=kinds)
