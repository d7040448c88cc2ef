"""A store file of an older schema is brought to the current one by the migrations
(``store.schema.MIGRATIONS``), keeping its rows. SQLite files only: every PostgreSQL store was
created at a later version."""

from __future__ import annotations


def test_a_v2_store_is_migrated_to_hold_usage_keys_and_placeholders(tmp_path):
    """SQLite only: a v2 state.db file (no PostgreSQL store predates v3)."""
    import apsw

    from quill.store import open_writer, schema
    from quill.store.apply import batches, order, usage

    db = tmp_path / "state.db"
    conn = apsw.Connection(str(db))
    v2 = schema.DDL.replace(usage.MIGRATION, "").replace(schema.BATCH_DIGEST, "")
    v2 = v2.replace(schema.SESSION_DELETIONS, "").replace(schema.SPOOL_IDENTITY, "")
    v2 = v2.replace(schema.LEADER_LEASE, "").replace(order.MIGRATION, "")
    v2 = v2.replace(schema.OWNER_PROOF, "").replace(batches.MIGRATION, "")
    conn.execute(v2.replace(schema.MESSAGES_SESSION_TS, ""))
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO sessions (id, source, created_at) VALUES ('old', 'cli', 1.0)")
    conn.close()
    writer = open_writer(db)
    try:
        assert writer.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert writer.execute(
            "SELECT key, placeholder FROM sessions WHERE id = 'old'"
        ).fetchone() == (None, 0)
        assert writer.execute("SELECT count(*) FROM usage").fetchone()[0] == 0
        assert writer.execute(
            "SELECT owner_boot, owner_ticks FROM sessions WHERE id = 'old'"
        ).fetchone() == (None, None)
    finally:
        writer.close()
