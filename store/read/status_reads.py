"""The reads behind ``quill status`` and ``quill jobs history``: job runs and their totals,
search health, and the store's figures (counts, cursor, FTS lag). Mixed into
``store.read.reader.Reader``; ``PgReader`` overrides ``search_health`` and ``figures``.
"""

from __future__ import annotations

from typing import Any

from quill.store import paging
from quill.store.errors import mapped
from quill.store.read.io_retry import retry_io
from quill.store.search import candidates
from quill.store.sqlite.indexer import fts_state, indexed_upto
from quill.store.sqlite.job_runs import read_figures


def _run(r: Any) -> dict[str, Any]:
    """A ``job_runs`` row (id, job, started_at, ended_at, outcome, figures, error) as a dict."""
    return {
        "id": r[0],
        "job": r[1],
        "started_at": r[2],
        "ended_at": r[3],
        "outcome": r[4],
        "figures": read_figures(r[5]),
        "error": r[6],
    }


class StatusReads:
    """Job history, search health and figures over ``self.conn`` (a read-only connection)."""

    conn: Any  # the reader's read-only connection (``Reader``: an ``apsw.Connection``)

    @retry_io
    def job_runs(
        self, *, job: str | None = None, limit: int = 20, before: int | None = None
    ) -> list[dict[str, Any]]:
        """Recent job runs, newest first (by ``id``, the order they were recorded): id, job,
        started_at, ended_at, outcome, figures, error. ``before``: only runs with a smaller
        ``id`` (the next page after the run with that id)."""
        where = [w for w, on in (("job = ?", job), ("id < ?", before is not None)) if on]
        sql = (
            "SELECT id, job, started_at, ended_at, outcome, figures, error FROM job_runs "
            + ("WHERE " + " AND ".join(where) + " " if where else "")
            + "ORDER BY id DESC LIMIT ?"
        )
        params = ((job,) if job else ()) + ((before,) if before is not None else ()) + (limit,)
        with mapped():
            rows = self.conn.execute(sql, params).fetchall()
        return [_run(r) for r in rows]

    @retry_io
    def last_job_runs(self, jobs: list[str]) -> dict[str, dict[str, Any]]:
        """``{job: its last run}`` for each of ``jobs`` that has run (a job never run is not a
        key): the run ``job_runs`` gives, newest started (ties: newest recorded), however old.
        One statement, one index probe per job (``job_runs_job``: job, started_at), on both
        backends."""
        if not jobs:
            return {}
        names = ", ".join("(?)" for _ in jobs)
        # Each name's newest run read through the index, not found among the newest N runs
        # of all jobs: a job that ran long ago, before many runs of others, still has one.
        sql = (
            f"WITH names(name) AS (VALUES {names}) "
            "SELECT id, job, started_at, ended_at, outcome, figures, error FROM job_runs "
            "WHERE id IN (SELECT (SELECT id FROM job_runs WHERE job = names.name "
            "ORDER BY started_at DESC, id DESC LIMIT 1) FROM names)"
        )
        with mapped():
            rows = self.conn.execute(sql, list(jobs)).fetchall()
        return {r[1]: _run(r) for r in rows}

    def job_runs_page(
        self, *, job: str | None = None, limit: int = 20, after: str | None = None
    ) -> dict[str, Any]:
        """A page of ``job_runs``, newest first: ``{"runs": [...], "next": cursor | None}``
        (``store.paging``, listing ``job_runs``, bound to ``job``; keyset on the run id).
        ``after``: the ``next`` of the previous page with the same ``job``. Raises
        ``BadCursorError`` for anything else."""
        scope = paging.scope_of(job)
        before = None
        if after is not None:
            (before,) = paging.decode(after, "job_runs", (int,), scope)
        runs = self.job_runs(job=job, limit=limit + 1, before=before)
        more = len(runs) > limit
        del runs[limit:]
        return {
            "runs": runs,
            "next": paging.encode("job_runs", (runs[-1]["id"],), scope) if more else None,
        }

    @retry_io
    def job_run_totals(self) -> list[dict[str, Any]]:
        """Per job and outcome: ``{"job", "outcome", "runs", "seconds"}`` (total run time in
        seconds over every recorded run; runs still going have outcome None and count 0 s)."""
        with mapped():
            rows = self.conn.execute(
                "SELECT job, outcome, count(*), coalesce(sum(ended_at - started_at), 0) "
                "FROM job_runs GROUP BY job, outcome ORDER BY job, outcome"
            ).fetchall()
        return [{"job": r[0], "outcome": r[1], "runs": r[2], "seconds": r[3]} for r in rows]

    @retry_io
    def search_health(self) -> dict[str, Any]:
        """``{"fts_state": ok|stale, "fts_pending": rows not yet indexed, "degraded": bool}``:
        degraded means some messages are not searched: the index is detached, or more
        than ``TAIL_MAX_ROWS`` messages wait to be indexed (after a rebuild), of which only the
        newest are scanned."""
        with mapped():
            state = fts_state(self.conn)
            upto = indexed_upto(self.conn)
            pending = self.conn.execute(
                "SELECT count(*) FROM messages WHERE id > ?", (upto,)
            ).fetchone()[0]
        return {
            "fts_state": state,
            "fts_pending": pending,
            "degraded": state != "ok" or pending > candidates.TAIL_MAX_ROWS,
        }

    @retry_io
    def applied_cursor(self) -> str | None:
        """The committed spool cursor ``"segment:offset"`` (None before the first commit): one
        row read, for ``wait``'s looks (``figures`` also counts every table)."""
        with mapped():
            row = self.conn.execute(
                'SELECT segment, "offset" FROM spool_cursor WHERE id = 1'
            ).fetchone()
        return f"{row[0]}:{row[1]}" if row else None

    @retry_io
    def applied_positions(self, batch_ids: list[str]) -> dict[str, str | None]:
        """``{batch id: "segment:offset"}`` for each of ``batch_ids`` the store applied: its
        position in *this reader's* spool, or None when another spool's writer applied it
        (PostgreSQL's ``PgReader``; an SQLite store has one spool)."""
        marks = ", ".join("?" for _ in batch_ids)
        with mapped():
            return dict(
                self.conn.execute(
                    f"SELECT batch_id, position FROM applied_batches WHERE batch_id IN ({marks})",
                    batch_ids,
                ).fetchall()
            )

    @retry_io
    def figures(self) -> dict[str, Any]:
        """Counts and positions for ``quill status``: sessions, messages, cursor, FTS lag;
        ``cursor_proof``: ``[proof_offset, proof]`` of the cursor (``spool.cursor_proof``;
        both None for a cursor written before proofs were kept), None with no cursor."""
        with mapped():
            c = self.conn
            cursor = c.execute(
                'SELECT segment, "offset", updated_at, proof_offset, proof FROM spool_cursor '
                "WHERE id = 1"
            ).fetchone()
            upto = indexed_upto(c)
            return {
                "sessions": c.execute("SELECT count(*) FROM sessions").fetchone()[0],
                "messages": c.execute("SELECT count(*) FROM messages").fetchone()[0],
                "fts_indexed_upto": upto,
                "fts_pending": c.execute(
                    "SELECT count(*) FROM messages WHERE id > ?", (upto,)
                ).fetchone()[0],
                "fts_state": fts_state(c),
                "cursor": f"{cursor[0]}:{cursor[1]}" if cursor else None,
                "cursor_updated_at": cursor[2] if cursor else None,
                "cursor_proof": [cursor[3], cursor[4]] if cursor else None,
                "applied_batches": c.execute("SELECT count(*) FROM applied_batches").fetchone()[0],
            }
