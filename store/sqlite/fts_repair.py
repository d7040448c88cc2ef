"""FTS-only damage: detach the search indexes, keep writing, rebuild them from ``messages``.

The FTS tables are derived data: every word in them comes from ``messages``. So damage that
is confined to them is not a reason to stop accepting transcripts (architecture.md,
"Corruption stops writes, never loses data": "FTS-only corruption: index detached, writes go
on, search degrades, a job rebuilds it").

* ``classify`` tells FTS-only damage from structural damage by which tables'
  ``PRAGMA integrity_check(TABLE)`` fails — by table, never by the error's text.
* ``detach`` marks the indexes stale in ``state_meta``: the indexer stops writing them and
  search stops reading them (it scans instead, and says so).
* ``rebuild`` drops the damaged tables, recreates them empty with the watermark at 0, and
  lets the normal indexer refill them slice by slice. A damaged b-tree often cannot be
  dropped (``DROP TABLE`` walks its pages and hits the damage); then its schema rows are
  removed with ``writable_schema`` and the orphaned pages are reclaimed by the VACUUM that
  follows (SQLite's documented way to discard an unreadable table).
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.errors import CorruptError, mapped
from quill.store.schema import FTS_DDL, FTS_LAYOUT, FTS_TABLES, STORE_TABLES
from quill.store.sqlite.connection import transaction

#: Every table whose damage halts the writer: all but the search indexes (store.schema's
#: registry, so a table added to the schema is never mistaken for index-only damage).
CANONICAL_TABLES = STORE_TABLES
#: An FTS5 table's objects in ``sqlite_schema``: the table and its shadow tables ``<name>_*``.
_FTS_OBJECTS_SQL = " OR ".join("name = ? OR name LIKE ? ESCAPE '\\'" for _ in FTS_TABLES)
_FTS_OBJECTS_ARGS = tuple(a for t in FTS_TABLES for a in (t, t.replace("_", "\\_") + "\\_%"))


def _table_ok(conn: apsw.Connection, table: str) -> bool:
    try:
        return [r[0] for r in conn.execute(f"PRAGMA integrity_check({table})")] == ["ok"]
    except (apsw.CorruptError, apsw.NotADBError):
        return False


def classify(conn: apsw.Connection) -> dict[str, list[str]]:
    """``{"canonical": [damaged tables], "fts": [damaged FTS tables]}``, each list in registry
    order. ``canonical`` covers every table but the search indexes (bookkeeping included):
    the writer may keep writing only when it is empty and ``fts`` is not."""
    return {
        "canonical": [t for t in CANONICAL_TABLES if not _table_ok(conn, t)],
        "fts": [t for t in FTS_TABLES if not _table_ok(conn, t)],
    }


def detach(conn: apsw.Connection, reason: str) -> None:
    """Mark the indexes stale: no more index writes or index reads until ``rebuild``."""
    with transaction(conn):
        conn.execute(
            "INSERT INTO state_meta(key, value) VALUES ('fts_state', 'stale') "
            "ON CONFLICT(key) DO UPDATE SET value = 'stale'"
        )
        conn.execute(
            "INSERT INTO state_meta(key, value) VALUES ('fts_stale_reason', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (reason,),
        )


def rebuild(conn: apsw.Connection) -> dict[str, Any]:
    """Replace the FTS tables with empty ones and reset the watermark; the writer's indexer
    then refills them. Figures: how the old tables were removed and whether a VACUUM is
    needed to reclaim their pages."""
    removed = "drop"
    try:
        with transaction(conn):
            for table in FTS_TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
    except CorruptError:  # DROP walked into the damage: discard the table's schema rows instead
        removed = "writable_schema"
        with mapped():
            conn.execute("PRAGMA writable_schema = ON")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    f"DELETE FROM sqlite_schema WHERE {_FTS_OBJECTS_SQL}", _FTS_OBJECTS_ARGS
                )
                version = conn.execute("PRAGMA schema_version").fetchone()[0]
                conn.execute(f"PRAGMA schema_version = {version + 1}")
                conn.execute("COMMIT")
            finally:
                conn.execute("PRAGMA writable_schema = OFF")
    with transaction(conn):
        conn.execute(FTS_DDL)
        conn.execute("UPDATE state_meta SET value = '0' WHERE key = 'fts_indexed_upto'")
        conn.execute(
            "INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_layout', ?)", (FTS_LAYOUT,)
        )
        conn.execute("DELETE FROM state_meta WHERE key IN ('fts_state', 'fts_stale_reason')")
    return {"removed_by": removed, "needs_vacuum": removed == "writable_schema"}
