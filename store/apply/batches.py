"""Batch ids of message rows, each stored once (schema v12).

Every message row names the batch (the op) that wrote it, or for a compaction's copy the
batch of the row it copies. The id is a producer's UUID or a stable import id (36+ bytes);
on every row it cost about 36 bytes per message (bench/disk.py). ``batches`` maps each batch
id that wrote message rows to a small integer, and ``messages.batch`` holds that integer.

Invariants:
* A ``batches`` row is added by the op that first inserts message rows under its batch id,
  inside that op's transaction (a refused op leaves none), in op order; rows are never
  deleted, so SQLite's rowid (max + 1) gives a rebuild from snapshot + spool the same numbers
  as the live store (both apply the same ops in the same order). On PostgreSQL the number
  comes from the identity sequence, which a rollback does not restore: a refused bulk run
  gives its numbers back (``store.postgres.apply.PgLedger.give_back``; docs/backends.md, "Ids
  do not depend on how the spool was chunked").
* ``messages.batch`` is set by every insert (``ref``/``Ledger.batch_refs``), and by the
  migration for rows written before v12; NULL never means "no batch".
* Idempotency by batch id stays with ``applied_batches`` (keyed by the id itself): this table
  only names the rows.
"""

from __future__ import annotations

from typing import Any

#: The table, created by the migration below (``store.schema``: v11 → v12).
DDL = """
CREATE TABLE IF NOT EXISTS batches (
    id       INTEGER PRIMARY KEY,
    batch_id TEXT NOT NULL UNIQUE
);
"""

#: v12: ``messages.batch_id`` (text) becomes ``messages.batch`` (an integer into ``batches``,
#: numbered in the order the rows' batches first wrote rows), and ``messages_pos`` goes: it is
#: a prefix of ``messages_session_state`` (session_id, pos, state, seq), which serves the same
#: probes. Statements end with ``;`` and a newline (``store.postgres.schema.translate_ddl``).
MIGRATION = (
    DDL
    + """INSERT INTO batches (batch_id)
    SELECT batch_id FROM messages GROUP BY batch_id ORDER BY min(id);
ALTER TABLE messages ADD COLUMN batch INTEGER REFERENCES batches(id);
UPDATE messages SET batch = (SELECT b.id FROM batches b WHERE b.batch_id = messages.batch_id);
ALTER TABLE messages DROP COLUMN batch_id;
DROP INDEX IF EXISTS messages_pos;
"""
)

#: One batch id → its number, adding it when new (both backends: an upsert with RETURNING;
#: on a conflict the row is rewritten unchanged, so RETURNING always gives the id).
_REF_SQL = (
    "INSERT INTO batches (batch_id) VALUES (?) "
    "ON CONFLICT (batch_id) DO UPDATE SET batch_id = excluded.batch_id RETURNING id"
)


def ref(conn: Any, batch_id: str) -> int:
    """The number of ``batch_id`` in ``batches``, added (next number) when new. Runs in the
    caller's transaction (an op's savepoint: a refused op adds nothing). One statement on
    either backend. Raises the store error tree."""
    return conn.execute(_REF_SQL, (batch_id,)).fetchone()[0]


def refs(conn: Any, batch_ids: list[str]) -> dict[str, int]:
    """``{batch id: number}`` for ``batch_ids``, new ones added in the order given (one
    ``ref`` each: the embedded store, where a statement costs no round trip)."""
    out: dict[str, int] = {}
    for b in batch_ids:
        if b not in out:
            out[b] = ref(conn, b)
    return out


#: SQL expression (a message row aliased ``m``) giving the row's batch id as text.
BATCH_ID_SQL = "(SELECT b.batch_id FROM batches b WHERE b.id = m.batch)"
