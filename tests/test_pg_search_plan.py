"""A PostgreSQL phrase search reads about a page of heap rows, not every match, when the words
of the phrase occur together (the planner, multiplying their frequencies, expects a hundredth
of the rows that match). Heap rows are counted by the server's own statistics for the
search's transaction (``pg_stat_get_xact_tuples_fetched``), not timed."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

from quill.store.postgres import search as pg_search


@pytest.fixture
def store(tmp_path, pg_store_url):
    s = Store(tmp_path, pg_store_url)
    yield s
    s.close()


def _fill(store: Store, rows: int, every: int) -> None:
    """``rows`` messages in one session, every ``every``-th holding "connection refused"
    (bulk SQL into Quill's own schema: the writer would take minutes for this many)."""
    assert (
        store.apply(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "hi"}]}
        )
        == []
    )
    store.conn.execute("INSERT INTO batches (batch_id) VALUES ('bulk')")
    store.conn.execute(
        "INSERT INTO messages (session_id, role, content, ts, arrived_at, state, batch, "
        "pos, seq) SELECT 's', 'assistant', CASE WHEN g % ? = 0 "
        "THEN 'deploy step ' || g || ' failed: connection refused by host' "
        "ELSE 'routine status line ' || g || ' all good' END, g, g, 'live', "
        "(SELECT id FROM batches WHERE batch_id = 'bulk'), g, g "
        "FROM generate_series(10, ? + 9) AS g",
        (every, rows),
    )
    store.conn.execute("ANALYZE messages")


def _heap_rows(store: Store, text: str) -> tuple[int, list[dict]]:
    """Heap rows of ``messages`` the search read, and its hits."""
    conn = store.conn
    conn.execute("BEGIN")
    try:
        hits = pg_search.search(conn, text, limit=20, context=False)
        fetched = conn.execute(
            "SELECT pg_stat_get_xact_tuples_fetched('messages'::regclass)"
        ).fetchone()[0]
    finally:
        conn.execute("COMMIT")
    return fetched, hits


@pytest.mark.parametrize(
    "rows, every",
    [(20_000, 10), (50_000, 50)],
    ids=["one row in 10 (key walk)", "one row in 50 (bitmap windows)"],
)
def test_a_phrase_of_words_that_occur_together_reads_about_a_page(store, rows, every):
    _fill(store, rows, every)
    matches = rows // every
    planned = store.conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM messages "
        "WHERE words @@ to_tsquery('simple', 'connection <-> refused')"
    ).fetchone()[0][0]["Plan"]["Plan Rows"]
    assert planned * 5 < matches  # the trap: the planner expects far fewer than match
    fetched, hits = _heap_rows(store, '"connection refused"')
    assert [h["ts"] for h in hits] == [float(g) for g in range(rows + 9, 9, -1) if g % every == 0][
        :20
    ]
    assert fetched < matches / 3, (fetched, matches)
