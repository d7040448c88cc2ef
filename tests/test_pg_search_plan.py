"""A PostgreSQL phrase search reads about a page of heap rows, not every match, when the words
of the phrase occur together (the planner, multiplying their frequencies, expects a hundredth
of the rows that match). Heap rows are counted by the server's own statistics for the
search's transaction (``pg_stat_get_xact_tuples_fetched``), not timed."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

from quill.store.postgres import search as pg_search
from quill.store.postgres import windows, wire
from quill.store.search import plan as query


@pytest.fixture
def store(tmp_path, pg_store_url):
    s = Store(tmp_path, pg_store_url)
    yield s
    s.close()


def _fill(store: Store, rows: int, every: int, statistics: bool = True) -> None:
    """``rows`` messages in one session, every ``every``-th holding "connection refused"
    (bulk SQL into Quill's own schema: the writer would take minutes for this many);
    ``statistics``: False leaves the word column without statistics, as a store is before
    its first ANALYZE (every lexeme then estimated at 0.5 % of the rows)."""
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
    if not statistics:
        store.conn.execute("ALTER TABLE messages ALTER COLUMN words SET STATISTICS 0")
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
    "rows, every, statistics",
    [(20_000, 10, True), (50_000, 50, True), (50_000, 50, False)],
    ids=[
        "one row in 10 (key walk)",
        "one row in 50 (bitmap windows)",
        # Each word estimated at 250 rows where 1,000 hold it: without counting them, the
        # bound put the phrase at 250 rows, and every match was fetched and re-checked.
        "one row in 50, no statistics (counted: bitmap windows)",
    ],
)
def test_a_phrase_of_words_that_occur_together_reads_about_a_page(store, rows, every, statistics):
    _fill(store, rows, every, statistics)
    matches = rows // every
    planned = store.conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM messages "
        "WHERE words @@ to_tsquery('simple', 'connection <-> refused')"
    ).fetchone()[0][0]["Plan"]["Plan Rows"]
    assert planned * 5 < matches  # the trap: the planner expects far fewer than match
    if not statistics:
        # Each word is counted (up to ``windows.COUNT_ROWS`` matches, kept for
        # ``ESTIMATE_TTL_S``): past the cap, the phrase is read in windows of ids, never
        # index-first (every match fetched and re-checked). Which plan serves a window of so
        # small a table without statistics is the planner's choice (the GIN bitmap alone or
        # ANDed with the key range): the route is asserted, not the heap rows.
        with wire.traced(store.conn) as w:
            _, hits = _heap_rows(store, '"connection refused"')
        first = next(s for s in w.sql if "ORDER BY m.id" in s)
        assert "m.id >= " in first and "(SELECT " in first, first
        bound, table = windows.bound(store.conn, query.plan('"connection refused"'), "")
        assert bound >= windows.COUNT_ROWS and table == rows + 1
    else:
        fetched, hits = _heap_rows(store, '"connection refused"')
        assert fetched < matches / 3, (fetched, matches)
    assert [h["ts"] for h in hits] == [float(g) for g in range(rows + 9, 9, -1) if g % every == 0][
        :20
    ]


def test_a_substring_scan_decodes_tool_calls_only_on_rows_that_have_them(store):
    """The scan of the rows the trigram index does not cover tests each row's tool text;
    ``quill_tool_text`` (JSON decoded in plpgsql, inside a subtransaction) runs only for a
    row with tool calls, the text of the others (a tool result's name, or nothing) being
    written out in SQL. Counted by the server (``track_functions``), not timed: 300 tool
    results and 100 rows with calls, a term none holds."""
    assert (
        store.apply(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "hi"}]}
        )
        == []
    )
    calls = '[{"function": {"name": "Bash", "arguments": "{\\"cmd\\": \\"ls -la\\"}"}}]'
    store.conn.execute("INSERT INTO batches (batch_id) VALUES ('bulk')")
    store.conn.execute(
        "INSERT INTO messages (session_id, role, content, tool_calls, tool_name, ts, "
        "arrived_at, state, batch, pos, seq) SELECT 's', CASE WHEN g % 4 = 0 THEN "
        "'assistant' ELSE 'tool' END, 'output line ' || g, CASE WHEN g % 4 = 0 THEN ? END, "
        "CASE WHEN g % 4 = 0 THEN NULL ELSE 'Bash' END, g, g, 'live', "
        "(SELECT id FROM batches WHERE batch_id = 'bulk'), g, g "
        "FROM generate_series(10, 409) AS g",
        (calls,),
    )
    with_calls = store.conn.execute(
        "SELECT count(*) FROM messages WHERE tool_calls IS NOT NULL"
    ).fetchone()[0]
    assert with_calls == 100
    fn = "quill_tool_text(text, text, text)"
    conn = store.conn
    conn.execute("SET track_functions = 'all'")
    conn.execute("BEGIN")
    try:
        assert pg_search.search(conn, "zqxv", limit=20, context=False, substring=True) == []
        ran = conn.execute(
            "SELECT coalesce(pg_stat_get_xact_function_calls(?::regprocedure), 0)", (fn,)
        ).fetchone()[0]
    finally:
        conn.execute("COMMIT")
        conn.execute("RESET track_functions")
    assert ran == with_calls, ran
    # The same text as the function's on every row (the search's hits depend on it).
    differs = conn.execute(
        f"SELECT count(*) FROM messages m WHERE {pg_search.SCAN_COLUMNS_SQL['tool']} "
        f"IS DISTINCT FROM {fn.split('(')[0]}(m.tool_calls, m.role, m.tool_name)"
    ).fetchone()[0]
    assert differs == 0


def test_a_rare_word_the_statistics_do_not_list_is_read_index_first_in_one_round_trip(
    store, monkeypatch
):
    """A word the column's statistics do not list is estimated by the planner at its default
    (0.5 % of the rows at most: 5,000 at 1M for the bench's rare word, in 50 rows). Counted
    (``windows.UNLISTED_FRACTION``), its bound is its few matches: read index-first, the
    page with its hits and context in one round trip. Before, only a word estimated at
    ``COUNT_ROWS`` or fewer was counted, and this one went through id windows: a window,
    the rest of the matches index-first, then the hits the first statement had not read
    (three round trips at 1M). Scaled down here: the index-first bound is 50 rows (so 20k
    rows put an unlisted word's estimate above it), counted from the wire trace."""
    monkeypatch.setattr(windows, "INDEX_FIRST_MAX_ROWS", 50)
    monkeypatch.setattr(windows, "COUNT_ROWS", 51)
    _fill(store, 20_000, 10)
    store.conn.execute(
        "UPDATE messages SET content = 'a quasar appeared at ' || pos WHERE pos % 4000 = 0"
    )
    store.conn.execute("ANALYZE messages")
    planned = store.conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM messages WHERE words @@ to_tsquery('simple', 'quasar')"
    ).fetchone()[0][0]["Plan"]["Plan Rows"]
    assert planned > windows.COUNT_ROWS  # the planner's default for an unlisted word
    with store.reader() as r:
        first = r.search(text="quasar", limit=20)  # cold: the bound counted, PREPARE
        with wire.traced(r.conn) as w:
            hits = r.search(text="quasar", limit=20)
    assert hits == first
    assert [h["ts"] for h in hits] == [20_000.0, 16_000.0, 12_000.0, 8_000.0, 4_000.0]
    assert all(h["snippet"].startswith("a quasar appeared") for h in hits)
    assert w.round_trips == 1, w.sql
    assert windows.bound(store.conn, query.plan("quasar"), "")[0] == 5
