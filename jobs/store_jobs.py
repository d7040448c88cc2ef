"""Jobs that write ``state.db``: run only by the writer, on its one connection, between
drain chunks (docs/architecture.md, "Processes"). Each takes the writer connection plus keyword
parameters and returns a dict of figures recorded in ``job_runs``.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import apsw

from quill.store.errors import CorruptError, mapped
from quill.store.sqlite import fts_repair
from quill.store.sqlite.connection import AUTO_VACUUM, has_pointer_map, transaction
from quill.store.sqlite.indexer import FTS_TABLES, fts_state, optimize, reindex_trigram
from quill.store.sqlite.wal import wal_bytes, wal_checkpoint


def fts_optimize(conn: apsw.Connection) -> dict[str, Any]:
    """Merge each FTS5 index's b-trees into one (FTS5 'optimize'). Figures: seconds taken."""
    start = time.monotonic()
    with transaction(conn):
        optimize(conn)
    return {"seconds": round(time.monotonic() - start, 3)}


def fts_merge(conn: apsw.Connection, pages: int = 500) -> dict[str, Any]:
    """One bounded incremental FTS5 merge step on each index ('merge', N): keeps the number
    of b-tree segments low between full optimizes without a long transaction. Figures: pages
    written (total_changes delta, as the FTS5 docs suggest)."""
    before = conn.total_changes()
    with transaction(conn):
        for table in FTS_TABLES:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))
    return {"pages_written": conn.total_changes() - before}


def _vacuum(conn: apsw.Connection) -> None:
    """VACUUM, keeping (or adding) the store's pointer-map pages (``AUTO_VACUUM``). The
    pragma only when they are missing: setting it commits, and the VACUUM's commit is the
    first one (``store.sqlite.effects`` judges a killed run from that)."""
    if not has_pointer_map(conn):
        conn.execute(f"PRAGMA auto_vacuum={AUTO_VACUUM}")
    conn.execute("VACUUM")


#: Rows per transaction when the ``vacuum`` job packs texts stored plain (``pack_stored``).
PACK_SLICE_ROWS = 5000


def pack_stored(conn: apsw.Connection, slice_rows: int = PACK_SLICE_ROWS) -> int:
    """Pack the texts stored plain that reach the writer's ``[store] pack_min_bytes``
    (``store.packed.PACK_STORED_SQL``: rows written before packing existed, or under a higher
    threshold), ``slice_rows`` rows of ids per transaction so the drain waits at most one
    slice. Readers see the same text before and after. Returns the rows packed. ``conn`` is a
    store connection (``store.packed.register`` done, with the writer's threshold); on any other
    the SQL function is missing and ``StoreError`` is raised before a row changes."""
    from quill.store.packed import PACK_STORED_SQL

    done, low = 0, 0
    while True:
        with mapped(), transaction(conn):
            high = conn.execute(
                "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
                (low, slice_rows),
            ).fetchone()[0]
            if high is not None:
                ids = [r[0] for r in conn.execute(PACK_STORED_SQL + " RETURNING id", (low, high))]
                # The trigram index holds a packed text whole (store.search.columns): the
                # rows packed here are indexed again in the same transaction.
                reindex_trigram(conn, ids)
                done += len(ids)
        if high is None:
            return done
        low = high


def vacuum(
    conn: apsw.Connection, min_free_ratio: float = 0.2, headroom: float = 1.2
) -> dict[str, Any]:
    """First packs the texts stored plain that reach ``[store] pack_min_bytes``
    (``pack_stored``; figure ``packed_rows``), then VACUUMs when worthwhile: only if free
    pages are at least ``min_free_ratio`` of the file
    and the disk has ``headroom`` × the file size free (VACUUM writes a full copy, and the
    following checkpoint is as large as the database: 22–27 s and ~2 GB at 1M messages).
    Then a TRUNCATE checkpoint. A store without pointer-map pages (made before
    ``AUTO_VACUUM``) is vacuumed whatever its free pages, once, to gain them
    (``pointer_map_added``). Figures: bytes before/after, free ratio, or why it skipped."""
    path = conn.filename
    packed_rows = pack_stored(conn)
    with mapped():
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        convert = not has_pointer_map(conn)
    ratio = free / pages if pages else 0.0
    before = os.stat(path).st_size + wal_bytes(conn)
    if ratio < min_free_ratio and not convert and not packed_rows:  # packing frees parts of pages
        return {
            "skipped": "free-page ratio below threshold",
            "free_ratio": round(ratio, 4),
            "bytes": before,
            "packed_rows": packed_rows,
        }
    room = shutil.disk_usage(os.path.dirname(path)).free
    if room < before * headroom:
        return {
            "skipped": "not enough disk for the copy",
            "free_bytes": room,
            "bytes": before,
            "packed_rows": packed_rows,
        }
    start = time.monotonic()
    try:
        with mapped():
            _vacuum(conn)
    finally:  # after any attempt, failed ones included: a VACUUM's WAL is as big as the store
        cp = wal_checkpoint(conn, "TRUNCATE")
    return {
        **({"pointer_map_added": True} if convert else {}),
        "packed_rows": packed_rows,
        "bytes_before": before,
        "bytes_after": os.stat(path).st_size + wal_bytes(conn),
        "free_ratio": round(ratio, 4),
        "seconds": round(time.monotonic() - start, 3),
        "wal_bytes_after": cp["wal_bytes_after"],
        "wal_blocked_by_reader": cp["blocked_by_reader"],
    }


#: TRUNCATE checkpoints the scrub tries after its VACUUM, and the pause between them (s): a
#: reader holding an old snapshot (a search, the job worker's backup) usually ends within a
#: few hundred ms; the writer's drain waits at most ``SCRUB_CHECKPOINT_TRIES × pause``.
SCRUB_CHECKPOINT_TRIES = 10
SCRUB_CHECKPOINT_PAUSE_S = 0.1


def scrub(conn: apsw.Connection, vacuum: bool = True) -> dict[str, Any]:
    """Leave no bytes of deleted rows in the live store (queued by ``quill spool purge``).

    A delete leaves copies of its rows' bytes that no read sees: FTS5 keeps the tokens of a
    contentless table's deleted rows in its segments until they are merged (FTS5's own
    ``secure-delete`` still left words in ``messages_fts_data``), and cells of deleted or
    earlier-rewritten rows stay in free space and freed pages (``PRAGMA secure_delete`` only
    zeroes the cells the delete itself frees, not the stale copies page splits and updates
    left before it). So, for every purge: FTS5 'optimize' rewrites each index as one segment
    without the deleted entries, VACUUM rewrites the file from its live rows only (its free
    pages and free space are zeros), then a TRUNCATE checkpoint copies the rewrite into the
    main file and empties the WAL; retried ``SCRUB_CHECKPOINT_TRIES`` times while a reader on
    an older snapshot blocks it (``wal_blocked_by_reader`` when it still does: reads and
    snapshots see only the rewrite, but the main file and the WAL keep old pages until a
    TRUNCATE checkpoint succeeds; the purge fails then and a re-run finishes it).

    Cost: the optimize rewrites both indexes and the VACUUM the whole file (22–27 s and a
    store-sized WAL at 1M messages), each reported in seconds. ``vacuum`` is accepted for
    jobs queued by older versions and ignored: every scrub VACUUMs. Figures: ``bytes_before``,
    ``bytes_after``, ``seconds``, ``optimize_seconds``, ``vacuum_seconds``,
    ``checkpoint_tries``, ``vacuumed`` (True), ``wal_bytes_after``, ``wal_blocked_by_reader``.
    Raises the store error tree (``mapped``)."""
    del vacuum
    path = conn.filename
    before = os.stat(path).st_size + wal_bytes(conn)
    start = time.monotonic()
    optimize_s = vacuum_s = None
    tries = 0
    try:
        with mapped():
            if fts_state(conn) == "ok":  # detached (damaged) indexes are rebuilt, not merged
                with transaction(conn):
                    optimize(conn)
            optimize_s = round(time.monotonic() - start, 3)
            _vacuum(conn)
            vacuum_s = round(time.monotonic() - start - optimize_s, 3)
    finally:  # after any attempt, failed ones included: a VACUUM's WAL is as big as the store
        while True:
            tries += 1
            cp = wal_checkpoint(conn, "TRUNCATE")
            if not cp["blocked_by_reader"] or tries >= SCRUB_CHECKPOINT_TRIES:
                break
            time.sleep(SCRUB_CHECKPOINT_PAUSE_S)
    return {
        "bytes_before": before,
        "bytes_after": os.stat(path).st_size + wal_bytes(conn),
        "seconds": round(time.monotonic() - start, 3),
        "optimize_seconds": optimize_s,
        "vacuum_seconds": vacuum_s,
        "checkpoint_tries": tries,
        "vacuumed": True,
        "wal_bytes_after": cp["wal_bytes_after"],
        "wal_blocked_by_reader": cp["blocked_by_reader"],
    }


def fts_rebuild(conn: apsw.Connection) -> dict[str, Any]:
    """Rebuild detached (damaged) search indexes: new empty tables, watermark 0; the writer's
    indexer refills them in slices. When the damaged tables had to be discarded rather than
    dropped, VACUUM reclaims their pages (if the disk has room) so integrity checks pass."""
    figures = fts_repair.rebuild(conn)
    if figures["needs_vacuum"]:
        figures["vacuum"] = vacuum(conn, min_free_ratio=0.0)
    return figures


def declare_corrupt(
    conn: apsw.Connection, detail: str, generation: int | None = None
) -> dict[str, Any]:
    """Halt the writer: a check outside it (``quick_check`` in the job worker) found damage
    in the store's own tables. Raising ``CorruptError`` on the writer takes the same path as
    damage met while writing: sticky halt, WAL kept, ``quill recover`` next.

    ``generation`` is the store's generation stamp (``application_id``) when it was checked;
    a request about a store that has since been recovered (new stamp) is stale and ignored."""
    with mapped():
        current = conn.execute("PRAGMA application_id").fetchone()[0]
    if generation is not None and current != generation:
        return {
            "skipped": "the store was replaced since the check",
            "checked": generation,
            "current": current,
        }
    raise CorruptError(detail)
