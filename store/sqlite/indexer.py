"""Bringing the FTS indexes up to date in bounded bulk slices, after rows are committed.

The durable path (rows + cursor) never waits for FTS: indexing was most of the insert time in
the measurements in docs/architecture.md. ``state_meta['fts_indexed_upto']`` is the highest message
id in the indexes; every id at or below it is indexed, and ids above it are the tail that
search scans directly. One slice = one ``INSERT … SELECT`` per index plus the watermark, in
one transaction, so ``messages_fts`` and the scoped ``messages_trigram`` share the watermark
and can never disagree about what is indexed.

Invariant: the indexes are keyed by message id and hold text only; visibility (``state``)
lives on ``messages`` and is filtered at query time, so compaction and rewind never touch an
index.
"""

from __future__ import annotations

import apsw

from quill.home import DEFAULTS
from quill.store.schema import FTS_LAYOUT, FTS_TABLES, fts_layout
from quill.store.search.columns import SEARCH_COLUMNS_SQL, TRIGRAM_SCOPE_SQL, TRIGRAM_TEXT_SQL
from quill.store.sqlite.connection import transaction


def indexed_upto(conn: apsw.Connection) -> int:
    """The FTS watermark: every message id ≤ this is in both indexes."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'").fetchone()
    return int(row[0]) if row else 0


def fts_state(conn: apsw.Connection) -> str:
    """``ok``; ``stale`` when the indexes were detached after damage (store.fts_repair);
    ``layout`` when they were built with another layout and the writer has not re-created
    them yet (schema.ensure_fts_layout). Only ``ok`` indexes are read or written."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_state'").fetchone()
    if row and row[0] != "ok":
        return row[0]
    return "ok" if fts_layout(conn) == FTS_LAYOUT else "layout"


def search_state(conn: apsw.Connection) -> tuple[str, int, int]:
    """``(fts_state(conn), indexed_upto(conn), highest message id or 0)`` in one query (what
    a search reads before it starts: the same rules as those two functions)."""
    state, layout, upto, top = conn.execute(
        "SELECT (SELECT value FROM state_meta WHERE key = 'fts_state'), "
        "(SELECT value FROM state_meta WHERE key = 'fts_layout'), "
        "(SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'), "
        "(SELECT max(id) FROM messages)"
    ).fetchone()
    if state is None or state == "ok":
        state = "ok" if layout == FTS_LAYOUT else "layout"
    return state, int(upto) if upto is not None else 0, top or 0


def index_slice(conn: apsw.Connection, max_rows: int = DEFAULTS.index_slice_rows) -> int:
    """Index up to ``max_rows`` not-yet-indexed messages (word index for all of them, trigram
    index for the rows in its scope); returns how many rows entered the word index."""
    with transaction(conn):
        if fts_state(conn) != "ok":
            return 0  # detached after damage: fts_repair.rebuild resets it
        low = indexed_upto(conn)
        high = conn.execute(
            "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            (low, max_rows),
        ).fetchone()[0]
        if high is None:
            return 0
        conn.execute(
            f"INSERT INTO messages_fts (rowid, {', '.join(SEARCH_COLUMNS_SQL)}) "
            f"SELECT m.id, {', '.join(SEARCH_COLUMNS_SQL.values())} "
            "FROM messages AS m WHERE m.id > ? AND m.id <= ? ORDER BY m.id",
            (low, high),
        )
        count = conn.changes()
        conn.execute(
            f"INSERT INTO messages_trigram (rowid, text) SELECT m.id, {TRIGRAM_TEXT_SQL} "
            "FROM messages AS m WHERE m.id > ? AND m.id <= ? "
            f"AND {TRIGRAM_SCOPE_SQL} ORDER BY m.id",
            (low, high),
        )
        conn.execute("UPDATE state_meta SET value = ? WHERE key = 'fts_indexed_upto'", (str(high),))
    return count


#: ``FTS_TABLES`` (imported from the schema registry): the FTS5 tables the indexer fills;
#: every maintenance step must treat them alike.


def unindex(conn: apsw.Connection, message_ids: list[int]) -> None:
    """Remove messages from both indexes (for jobs that DELETE message rows, e.g. prune).
    Call inside the same transaction as the DELETE. Ids above the watermark were never
    indexed and are skipped; ids outside the trigram scope are absent there (a no-op)."""
    if fts_state(conn) != "ok":
        return  # detached indexes are rebuilt from scratch; nothing to remove
    upto = indexed_upto(conn)
    ids = [i for i in message_ids if i <= upto]
    for table in FTS_TABLES:  # names come from the fixed tuple above
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            conn.execute(
                f"DELETE FROM {table} WHERE rowid IN ({', '.join('?' for _ in part)})", part
            )


def reindex(conn: apsw.Connection, message_ids: list[int]) -> None:
    """Replace the index entries of messages whose text was rewritten in place (a revision:
    ``store.apply.revise``), inside the caller's transaction: ids at or below the watermark
    are removed and indexed again from their rows as ``index_slice`` indexes them; ids above
    it are indexed by the next slice anyway."""
    if fts_state(conn) != "ok":
        return
    upto = indexed_upto(conn)
    ids = sorted(i for i in message_ids if i <= upto)
    unindex(conn, ids)
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        marks = ", ".join("?" for _ in part)
        conn.execute(
            f"INSERT INTO messages_fts (rowid, {', '.join(SEARCH_COLUMNS_SQL)}) "
            f"SELECT m.id, {', '.join(SEARCH_COLUMNS_SQL.values())} "
            f"FROM messages AS m WHERE m.id IN ({marks}) ORDER BY m.id",
            part,
        )
        conn.execute(
            f"INSERT INTO messages_trigram (rowid, text) SELECT m.id, {TRIGRAM_TEXT_SQL} "
            f"FROM messages AS m WHERE m.id IN ({marks}) AND {TRIGRAM_SCOPE_SQL} ORDER BY m.id",
            part,
        )


def reindex_trigram(conn: apsw.Connection, message_ids: list[int]) -> None:
    """Replace the trigram index entries of messages whose stored form changed while their text
    did not (``jobs.store_jobs.pack_stored`` packing a plain text: the index holds a packed
    text whole, a plain one only in scope and up to its prefix: ``search.columns``), inside the
    caller's transaction. Ids above the watermark are indexed by the next slice anyway."""
    if fts_state(conn) != "ok":
        return
    upto = indexed_upto(conn)
    ids = sorted(i for i in message_ids if i <= upto)
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        marks = ", ".join("?" for _ in part)
        conn.execute(f"DELETE FROM messages_trigram WHERE rowid IN ({marks})", part)
        conn.execute(
            f"INSERT INTO messages_trigram (rowid, text) SELECT m.id, {TRIGRAM_TEXT_SQL} "
            f"FROM messages AS m WHERE m.id IN ({marks}) AND {TRIGRAM_SCOPE_SQL} ORDER BY m.id",
            part,
        )


def optimize(conn: apsw.Connection) -> None:
    """FTS5 'optimize' on both indexes (merge b-trees); the caller owns the transaction."""
    for table in FTS_TABLES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
