"""A search through the word index reads a bounded part of the rows not merged into it yet.

A GIN index keeps new rows' entries in a pending list that every scan of the index reads
whole, merged into the tree only by VACUUM, autovacuum's ANALYZE, or when the list passes
``gin_pending_list_limit``. At PostgreSQL's default (4 MB) a store its writer fills (no
VACUUM since) made each word search read hundreds of pending pages for a word in a few rows;
the store bounds the list (``schema.GIN_PENDING_KB``). Counted in buffers from EXPLAIN
ANALYZE, never timed; autovacuum is off on the test's table so only the limit merges."""

from __future__ import annotations

import json

from semantics_helpers import Store

from quill.store.postgres.schema import GIN_PENDING_KB

#: Rows inserted, each with 30 distinct words: several MB of pending entries unmerged.
ROWS = 4000


def _index_pages(conn, sql: str) -> int:
    """Buffers the Bitmap Index Scan of ``sql``'s plan touched (hit + read)."""
    plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}").fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node):
        if node["Node Type"] == "Bitmap Index Scan":
            yield node["Shared Hit Blocks"] + node["Shared Read Blocks"]
        for child in node.get("Plans", []):
            yield from walk(child)

    return sum(walk(plan[0]["Plan"]))


def test_a_word_search_reads_a_bounded_pending_list(tmp_path, pg_store_url):
    s = Store(tmp_path, pg_store_url)
    try:
        msg = {"role": "user", "content": "a quasar appeared"}
        assert s.apply("messages.append", {"session_id": "s0", "messages": [msg]}) == []
        conn = s.conn
        conn.execute("ALTER TABLE messages SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, ts, arrived_at, state, batch, "
            "pos, seq) SELECT 's0', 'user', (SELECT string_agg('w' || md5(g::text || '.' || "
            "k::text), ' ') FROM generate_series(1, 30) AS k), 1, 1, 'live', "
            "(SELECT min(batch) FROM messages), 10 + g, 10 + g "
            "FROM generate_series(1, ?) AS g",
            (ROWS,),
        )
        conn.execute("SET enable_seqscan = off")  # the index's scan, whatever the estimate
        sql = "SELECT id FROM messages WHERE words @@ to_tsquery('simple', 'quasar')"
        assert len(conn.execute(sql).fetchall()) == 1
        pages = _index_pages(conn, sql)
        # The pending list (8 kB pages) plus the tree's few: at the default limit, hundreds.
        assert pages <= GIN_PENDING_KB // 8 + 16, pages
    finally:
        s.close()
