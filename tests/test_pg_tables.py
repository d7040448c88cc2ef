"""The PostgreSQL store's table registry (``store.postgres.schema.TABLES``) against the
tables a real store schema holds, and the maintenance jobs that walk it: the integrity check
(amcheck ``verify_heapam``) must read every heap of the store, ``analyze`` analyze each.
No damage is made here: the server is shared (test_pg_amcheck.py makes index damage safely)."""

from __future__ import annotations

import base64
import time

import psycopg
from semantics_helpers import Store

from quill.store import schema as sqlite_schema
from quill.store.postgres import claims
from quill.store.postgres import schema as pg_schema
from quill.store.postgres.election import Leadership


def _fill(root, url: str) -> Store:
    """A store on ``url`` with rows in every table (through the real spool and apply path)."""
    store = Store(root, url)
    image = base64.b64encode(b"\x89PNG" * 600).decode()
    for s in range(3):
        sid = f"s{s}"
        store.spool.append(
            "session.create",
            {"session_id": sid, "system_prompt": "be brief", "tools": [{"name": "grep"}]},
        )
        usage = {"prompt_tokens": 3, "completion_tokens": 1}
        url = f"data:image/png;base64,{image}"
        store.spool.append(
            "messages.append",
            {
                "session_id": sid,
                "messages": [
                    {"role": "assistant", "content": f"hello {s}", "usage": usage},
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
                ],
            },
        )
    store.spool.append("sessions.delete", {"session_ids": ["s0"]})
    store.spool.append("messages.append", {"session_id": "bad", "messages": "not a list"})
    assert store.drain() != []  # the bad batch is quarantined: a row in rejected_batches
    store.conn.execute(
        "INSERT INTO job_runs(job, started_at, ended_at, outcome) VALUES ('probe', 1, 2, 'ok')"
    )
    claims.claim(store.conn, "test-spool", {"token": "t", "host": "h", "path": "/p", "pid": 1})
    leader = Leadership(store.backend.url, "probe")
    assert leader.try_lead()  # a row in leader_lease
    leader.release()
    return store


def _schema_tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }


def test_the_registry_is_every_table_of_a_created_store_and_sqlites_store_tables(
    pg_store_url, tmp_path
):
    store = Store(tmp_path, pg_store_url)
    try:
        assert set(pg_schema.TABLES) == _schema_tables(pg_store_url)
    finally:
        store.backend.close()
    assert tuple(pg_schema.TABLES) == sqlite_schema.STORE_TABLES
    assert {t: sqlite_schema.TABLES[t] for t in pg_schema.TABLES} == pg_schema.TABLES


def _verify_heapam_calls(url: str) -> int:
    """Calls of amcheck's verify_heapam recorded in the database's function statistics."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT sum(calls) FROM pg_stat_user_functions WHERE funcname = 'verify_heapam'"
        ).fetchone()
        return int(row[0] or 0)


def test_integrity_check_reads_every_heap_of_the_store(pg_store_url, tmp_path):
    """verify_heapam runs once per table of the schema (counted by the server's function
    statistics), and the figures name each table. (Heap reads in pg_statio cannot tell:
    bt_index_check with heapallindexed scans every indexed heap too, without checking its
    pages as verify_heapam does.)"""
    store = _fill(tmp_path, pg_store_url)
    try:
        tables = _schema_tables(pg_store_url)
        with psycopg.connect(pg_store_url) as conn:
            empty = [
                t
                for t in sorted(tables)
                if not conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            ]
        assert not empty, f"tables without rows: {empty}"
        before = _verify_heapam_calls(pg_store_url)
        store.conn.execute("SET track_functions = 'all'")  # this session only: counts C calls
        figures = store.backend.maintenance("integrity_check")
        store.conn.execute("SELECT pg_stat_force_next_flush()")  # flushed once the session idles
        deadline = time.monotonic() + 60
        while (calls := _verify_heapam_calls(pg_store_url) - before) < len(tables):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert calls == len(tables), f"verify_heapam ran {calls} times for {len(tables)} tables"
        assert figures["ok"], figures["problems"]
        assert figures["tables_checked"] == len(tables), (figures["tables_checked"], sorted(tables))
        assert set(figures["tables"]) == tables
    finally:
        store.backend.close()


def test_analyze_covers_every_table_of_the_store(pg_store_url, tmp_path):
    store = _fill(tmp_path, pg_store_url)
    try:
        figures = store.backend.maintenance("analyze")
        tables = _schema_tables(pg_store_url)
        assert figures["tables"] == len(tables)
        with psycopg.connect(pg_store_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            analyzed = {
                r[0]
                for r in conn.execute(
                    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
                    "AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"
                )
            }
        assert analyzed == tables
    finally:
        store.backend.close()
