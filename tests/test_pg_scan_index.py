"""PostgreSQL's substring index ``messages_scan`` (store/postgres/scan_index.py): a substring
or CJK search reads, of the rows the trigram index does not cover (tool calls and results,
long text, reasoning), only those holding the term's trigrams, and finds exactly the rows the
full scan finds (case folding, tool text, reasoning, search kinds). A store with rows that
lacks it gets it from a writer, built concurrently; searches are right meanwhile.

Rows read are the database's own counters (tuples fetched and returned in the search's
transaction), never times."""

from __future__ import annotations

import time

import psycopg
import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.spool.identity import holder
from quill.store.factory import open_url
from quill.store.postgres import search as pg_search
from quill.store.postgres.connection import PgConnection

BULK = 20_000  # tool results holding none of the terms (bulk SQL: the writer would take minutes)
_COUNTER = (
    "SELECT sum(pg_stat_get_xact_tuples_fetched(r) + pg_stat_get_xact_tuples_returned(r))"
    " FROM (SELECT 'messages'::regclass::oid AS r UNION ALL SELECT indexrelid FROM "
    "pg_index WHERE indrelid = 'messages'::regclass) AS t"
)
#: (query, search keyword arguments): every text the scan looks in, folded or not.
QUERIES = [
    ("parsedconf", {}),  # long assistant text (past the trigram prefix)
    ("PARSEDCONF", {}),  # the same, folded by ILIKE
    ("数据库连接失败", {}),  # CJK: strpos, no folding
    ("gazelleconf", {}),  # a tool call's argument value
    ("gazelleconf", {"kinds": ["text"]}),  # not in text: none
    ("Zebratool", {}),  # a tool result's tool name
    ("ponderings", {"kinds": ["reasoning"]}),
    ("ponderings", {"kinds": ["text", "tool"]}),  # only in reasoning: none
    ("zzqqxxyy", {}),  # nowhere
]


def _fill(store: Store) -> None:
    pad = "x " * 1200  # past TRIGRAM_PREFIX_CHARS: the trigram index does not cover the row
    msgs = []
    for i in range(6):
        msgs += [
            user(f"question {i}"),
            assistant(f"{pad} the reparsedconfig step {i}"),
            assistant(f"{pad} 错误：数据库连接失败，请检查配置 {i}"),
            assistant(None, tool_calls=[call(f"c{i}", "bash", f'{{"cmd": "cat gazelleconf{i}"}}')]),
            tool(f"c{i}", "done", name="Zebratool"),
            {**assistant("short answer"), "reasoning": f"my ponderings {i}"},
        ]
    assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
    store.conn.execute("INSERT INTO batches (batch_id) VALUES ('bulk')")
    store.conn.execute(
        "INSERT INTO messages (session_id, role, content, tool_name, ts, arrived_at, state, "
        "batch, pos, seq) SELECT 's', 'tool', 'listing ' || g, 'bash', g, g, 'live', "
        "(SELECT id FROM batches WHERE batch_id = 'bulk'), g, g "
        "FROM generate_series(100000, 100000 + ? - 1) AS g",
        (BULK,),
    )
    assert store.apply("messages.append", {"session_id": "s", "messages": [user("newest")]}) == []
    store.conn.execute("VACUUM ANALYZE messages")


def _read(conn: PgConnection, text: str, kw: dict) -> tuple[int, list[int]]:
    """(rows the search read by the backend's counters, hit ids)."""
    conn.execute("BEGIN")
    try:
        before = conn.execute(_COUNTER).fetchone()[0]
        hits = pg_search.search(conn, text, substring=True, limit=20, context=False, **kw)
        read = conn.execute(_COUNTER).fetchone()[0] - before
    finally:
        conn.execute("COMMIT")
    return read, [h["message_id"] for h in hits]


def test_a_substring_search_reads_only_the_uncovered_rows_holding_its_terms(tmp_path, pg_store_url):
    """Each query finds the same rows with the index as a scan of every uncovered row does
    (the index dropped, on a new connection), reading a small part of what the scan reads.
    Old code has no such index: both read every uncovered row."""
    store = Store(tmp_path, pg_store_url)
    try:
        _fill(store)
        indexed = {f"{t}{kw}": _read(store.conn, t, kw) for t, kw in QUERIES}
    finally:
        store.close()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute("DROP INDEX IF EXISTS messages_scan")
    scan = PgConnection(pg_store_url)
    try:
        scanned = {f"{t}{kw}": _read(scan, t, kw) for t, kw in QUERIES}
    finally:
        scan.close()
    for q in indexed:
        assert indexed[q][1] == scanned[q][1], q
        assert indexed[q][0] * 10 < scanned[q][0], (q, indexed[q][0], scanned[q][0])
    counts = {q: len(got[1]) for q, got in indexed.items()}
    assert counts == {
        "parsedconf{}": 6,
        "PARSEDCONF{}": 6,
        "数据库连接失败{}": 6,
        "gazelleconf{}": 6,
        "gazelleconf{'kinds': ['text']}": 0,
        "Zebratool{}": 6,  # the results' tool name (their calls name bash)
        "ponderings{'kinds': ['reasoning']}": 6,
        "ponderings{'kinds': ['text', 'tool']}": 0,
        "zzqqxxyy{}": 0,
    }


def _index_state(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'messages_scan' AND c.relnamespace = current_schema()::regnamespace"
        ).fetchone()
    return "missing" if row is None else ("valid" if row[0] else "invalid")


def test_a_store_with_rows_gets_the_index_from_a_writer(tmp_path, pg_store_url):
    """A store migrated from the layout before the index (rows, no ``messages_scan``): the
    migration leaves it out (it would block writers for the build), a search is right
    without it, and the first writer to connect builds it concurrently."""
    store = Store(tmp_path, pg_store_url)
    try:
        _fill(store)
        before = _read(store.conn, "parsedconf", {})[1]
    finally:
        store.close()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute("DROP INDEX messages_scan")
        conn.execute("UPDATE state_meta SET value = '6' WHERE key = 'pg_layout'")
    reader = PgConnection(pg_store_url)
    try:
        from quill.store.postgres import schema

        schema.create(reader)  # the layout migration: no build in its transaction
        assert _index_state(pg_store_url) == "missing"
        assert _read(reader, "parsedconf", {})[1] == before
    finally:
        reader.close()
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "spool-id").write_text("host-w")
    w = open_url(
        pg_store_url,
        tmp_path / "w" / "state.db",
        "host-w",
        holder=holder(tmp_path / "w" / "spool-id"),
    )
    try:
        deadline = time.monotonic() + 60
        while _index_state(pg_store_url) != "valid":
            if time.monotonic() > deadline:
                pytest.fail("messages_scan was not built")
            time.sleep(0.1)
    finally:
        w.close()
    fresh = PgConnection(pg_store_url)
    try:
        assert _read(fresh, "parsedconf", {})[1] == before
    finally:
        fresh.close()
