"""Applying a chunk of one spool's entries to the shared PostgreSQL store.

The same exactly-once argument as SQLite's ``store.apply`` (docs/architecture.md, "The cursor
commits with the data"), per spool:
1. this spool's ``spool_cursor`` row (keyed by its ``spool_id``) is upserted in the same
   transaction as the rows, so a writer killed mid-chunk replays at most that chunk;
2. every batch id is recorded in ``applied_batches`` (unique store-wide) in that transaction;
   a batch already decided — by any host — is skipped.
3. Ops on one session serialize across hosts: before touching anything the chunk takes
   ``pg_advisory_xact_lock(hashtextextended(session_id, 0))`` for every session it names, in
   ascending key order (so two chunks can never wait on each other in a cycle; a hash
   collision only over-serializes). The locks are released at COMMIT/ROLLBACK. Ops of one
   session therefore apply one transaction at a time, each seeing the previous one's rows, and
   a batch's rows get consecutive positions in that session.
The op appliers are the shared ones (``store.ops.APPLIERS``), run through ``PgConnection``.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from ..apply import ChunkResult, EntryLike, RejectFn, arrival_time
from ..contract import BadDataError
from ..errors import InvalidOpError
from ..ops import APPLIERS
from . import halt
from .connection import PgConnection

#: Errors that mean "this op's data cannot be stored" (see store.apply._BAD_DATA): the op is
#: quarantined and the drain goes on. BadDataError = SQLSTATE class 22/23 from the server.
_BAD_DATA: tuple[type[BaseException], ...] = (InvalidOpError, BadDataError, OverflowError, TypeError,
                                              ValueError, RecursionError)

_LOCK_SQL = ("SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(x, 0) AS k "
             "FROM unnest(?::text[]) AS x ORDER BY k) AS keys")


def read_cursor(conn: PgConnection, spool_id: str) -> tuple[int, int] | None:
    """This spool's committed cursor ``(segment, offset)``, or None before its first chunk."""
    row = conn.execute('SELECT segment, "offset" FROM spool_cursor WHERE spool_id = ?', (spool_id,)).fetchone()
    return (row[0], row[1]) if row else None


def session_ids(entries: Sequence[EntryLike]) -> list[str]:
    """Every session id the chunk's ops name (``data.session_id``), sorted, unique."""
    out = set()
    for e in entries:
        data = e.record.get("data") if e.record else None
        if isinstance(data, dict) and isinstance(data.get("session_id"), str):
            out.add(data["session_id"])
    return sorted(out)


def apply_chunk(conn: PgConnection, spool_id: str, entries: Sequence[EntryLike], on_reject: RejectFn) -> ChunkResult:
    """Apply ``entries`` (consecutive, in spool order) and move ``spool_id``'s cursor past the
    last, in one transaction. Raises the store error tree; then nothing is committed
    (``TransientError`` for a deadlock or a lost connection: retry the chunk)."""
    result = ChunkResult()
    if not entries:
        return result
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        halt.check(conn)  # damage found by amcheck on any host stops every writer
        sids = session_ids(entries)
        if sids:
            conn.execute(_LOCK_SQL, (sids,)).fetchall()
        # Batches already decided (by any host), in one round trip for the whole chunk.
        ids = [e.record["batch"] for e in entries if e.record and isinstance(e.record.get("batch"), str)]
        decided = {r[0] for r in conn.execute(
            "SELECT batch_id FROM applied_batches WHERE batch_id = ANY(?1) UNION ALL "
            "SELECT batch_id FROM rejected_batches WHERE batch_id = ANY(?1)", (ids,))} if ids else set()
        for entry in entries:
            _apply_entry(conn, spool_id, entry, now, on_reject, result, decided)
        last = entries[-1].next
        conn.execute(
            'INSERT INTO spool_cursor (spool_id, segment, "offset", updated_at) VALUES (?, ?, ?, ?) '
            'ON CONFLICT (spool_id) DO UPDATE SET segment = excluded.segment, "offset" = excluded."offset", '
            "updated_at = excluded.updated_at", (spool_id, last[0], last[1], now))
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _apply_entry(conn: PgConnection, spool_id: str, entry: EntryLike, now: float, on_reject: RejectFn,
                 result: ChunkResult, decided: set[str]) -> None:
    if entry.record is None:
        damage = entry.damage
        on_reject(entry, getattr(damage, "reason", "damaged"), str(damage))
        result.rejected += 1
        return
    rec = entry.record
    batch = rec["batch"]
    if isinstance(batch, str) and batch in decided:
        result.duplicates += 1
        return
    if isinstance(batch, str):
        decided.add(batch)  # decided now, whatever the outcome: a repeat later in the chunk is a duplicate
    applier = APPLIERS.get(rec["op"])
    if applier is None:
        on_reject(entry, "unsupported-op", f"op {rec['op']!r} is not applied by this version of Quill")
        result.rejected += 1
        return
    data = rec["data"]
    conn.execute("SAVEPOINT op")
    try:
        if not isinstance(batch, str):
            raise InvalidOpError("invalid-batch", "batch id must be a string")
        if not isinstance(data, dict):
            raise InvalidOpError("invalid-data", "op data must be a JSON object")
        rows = applier(conn, data, batch, arrival_time(rec, now))
        conn.execute("INSERT INTO applied_batches (batch_id, spool_id, position, applied_at) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT DO NOTHING", (batch, spool_id, str(entry.position), now))
        if conn.changes() == 0:
            # Decided meanwhile by another host's writer (the same batch in two spools):
            # undo our copy, count it as the duplicate it is.
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
            result.duplicates += 1
            return
    except _BAD_DATA as exc:
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        reason, detail = ((exc.reason, exc.detail) if isinstance(exc, InvalidOpError)
                          else ("invalid-data", f"{type(exc).__name__}: {exc}"))
        if isinstance(batch, str):
            conn.execute("INSERT INTO rejected_batches (batch_id, spool_id, position, reason, rejected_at) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                         (batch, spool_id, str(entry.position), reason, now))
        on_reject(entry, reason, detail)
        result.rejected += 1
        return
    except BaseException:
        if conn.in_transaction and not conn.closed:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
        raise
    conn.execute("RELEASE op")
    result.applied += 1
    result.rows += rows
    result.batches.append(batch)
