"""Bringing the FTS index up to date in bounded bulk slices, after rows are committed.

The durable path (rows + cursor) never waits for FTS: indexing was ~91 % of insert time in
the measurements behind DESIGN.md. ``state_meta['fts_indexed_upto']`` is the highest message
id in the index; every id at or below it is indexed, and ids above it are the tail that search
scans directly. One slice = one ``INSERT … SELECT`` plus the watermark, in one transaction.
"""
from __future__ import annotations

import apsw

from .connection import transaction
from .schema import SEARCH_TEXT_SQL

#: Rows per indexing slice: big enough for bulk efficiency (+18 % at 500, +50 % at 5,000 vs
#: per-row triggers), small enough to keep each write transaction short.
DEFAULT_SLICE_ROWS = 2000


def indexed_upto(conn: apsw.Connection) -> int:
    """The FTS watermark: every message id ≤ this is in the index."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'").fetchone()
    return int(row[0]) if row else 0


def index_slice(conn: apsw.Connection, max_rows: int = DEFAULT_SLICE_ROWS) -> int:
    """Index up to ``max_rows`` not-yet-indexed messages; returns how many were indexed."""
    with transaction(conn):
        low = indexed_upto(conn)
        high = conn.execute(
            "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            (low, max_rows)).fetchone()[0]
        if high is None:
            return 0
        conn.execute(
            f"INSERT INTO messages_fts (rowid, text) SELECT m.id, {SEARCH_TEXT_SQL} "
            "FROM messages AS m WHERE m.id > ? AND m.id <= ? ORDER BY m.id", (low, high))
        count = conn.changes()
        conn.execute("UPDATE state_meta SET value = ? WHERE key = 'fts_indexed_upto'", (str(high),))
    return count
