"""Message ids do not depend on how the spool was chunked (both backends).

The spool is the log of every change: a store replayed from it in other chunks must number
its messages as the live one did, because ops name messages by id (read marks, rewind and
compaction watermarks). A run of appends the store refuses part-way (a repeated tool result,
refused once the store is consulted; store/apply/bulk.py) is rolled back and re-applied op at
a time; the ids it drew before the refusal must not shift the ids of the rows after it.

Each case drains one real spool into fresh stores in chunks of 1, 3 and 500 message rows
(the live writer's chunks follow arrival; a replay's do not) and compares every message's id,
content and batch, and every usage row's message id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import RecordingDrain

from quill.spool import Quarantine, Spool, SpoolReader
from quill.store.factory import open_url

OPS = [
    [{"role": "user", "content": "go"}],
    [{"role": "tool", "tool_call_id": "x", "content": "1"}],
    # refused in the store phase: call x already has a live result
    [
        {"role": "tool", "tool_call_id": "x", "content": "2"},
        {"role": "user", "content": "lost"},
    ],
    [
        {
            "role": "assistant",
            "content": "after",
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    ],
    [{"role": "user", "content": "last"}],
    [{"role": "tool", "tool_call_id": "x", "content": "3"}],  # refused again, alone
    [{"role": "user", "content": "end"}, {"role": "user", "content": "end2"}],
]


def _spool(root: Path) -> Path:
    with Spool(root / "spool", fsync=False) as sp:
        for i, msgs in enumerate(OPS):
            sid = "s" if i != 4 else "t"  # another session in the middle
            sp.append("messages.append", {"session_id": sid, "messages": msgs}, batch_id=f"b{i}")
    return root / "spool"


def _drain(spool_dir: Path, url: str | None, db: Path, chunk_rows: int) -> dict[str, list]:
    store = open_url(url, db, "local")
    try:
        drain = RecordingDrain(store, SpoolReader(spool_dir), Quarantine.for_store(db), chunk_rows)
        drain.start()
        drain.until_empty()
        conn = store.conn
        return {
            "messages": conn.execute(
                "SELECT m.id, m.session_id, quill_text(m.content), b.batch_id FROM messages m "
                "JOIN batches b ON b.id = m.batch ORDER BY m.id"
            ).fetchall(),
            "usage": conn.execute(
                "SELECT message_id, batch_id FROM usage ORDER BY message_id"
            ).fetchall(),
            "rejects": [(p, r) for r, _, p in drain.rejects],
        }
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_ids_do_not_depend_on_chunking(tmp_path: Path, kind: str, request) -> None:
    spool_dir = _spool(tmp_path)
    schemas = request.getfixturevalue("pg_schemas") if kind == "postgres" else None
    seen = {}
    for rows in (1, 3, 500):
        url = schemas() if schemas else None
        seen[rows] = _drain(spool_dir, url, tmp_path / f"c{rows}.db", rows)
    live = seen[1]
    assert [r for _, r in live["rejects"]] == ["duplicate-tool-result"] * 2
    assert [m[2] for m in live["messages"]] == ["go", "1", "after", "last", "end", "end2"]
    for rows, got in seen.items():
        assert got == live, rows


def _last(conn, table: str) -> int | None:
    return conn.execute(
        f"SELECT pg_sequence_last_value(pg_get_serial_sequence('{table}', 'id')::regclass)"
    ).fetchone()[0]


def test_postgresql_gives_back_only_its_own_ids(tmp_path: Path, pg_store_url: str) -> None:
    """Several writers share the store's sequences: a refused run's ids go back only when no
    other writer drew after them, and no writer can draw between that check and the reset."""
    import psycopg

    from quill.store.postgres.apply import PgLedger

    store = open_url(pg_store_url, tmp_path / "unused.db", "a")
    other = psycopg.connect(pg_store_url, autocommit=True)
    draw = "SELECT nextval(pg_get_serial_sequence('messages', 'id'))"
    try:
        conn, ledger = store.conn, PgLedger("a")
        # alone: the run's ids and batch numbers go back
        conn.execute("BEGIN IMMEDIATE")
        ledger.open_run()
        assert ledger.message_ids(conn, 3) == [1, 2, 3]
        ledger.batch_refs(conn, ["x", "y"])
        conn.execute("ROLLBACK")  # the refused run (its rows and batches rows) rolled back
        conn.execute("BEGIN IMMEDIATE")
        ledger.give_back(conn)
        conn.execute("COMMIT")
        assert _last(conn, "messages") is None and _last(conn, "batches") is None
        assert other.execute(draw).fetchone()[0] == 1  # the next row takes id 1, as if never
        # another writer drew after the run: its id is never handed out again
        conn.execute("BEGIN IMMEDIATE")
        ledger.open_run()
        assert ledger.message_ids(conn, 2) == [2, 3]
        assert other.execute(draw).fetchone()[0] == 4
        ledger.give_back(conn)
        conn.execute("COMMIT")
        assert _last(conn, "messages") == 4
        # while the reset's chunk is open, other writers' draws wait for it
        conn.execute("BEGIN IMMEDIATE")
        ledger.open_run()
        assert ledger.message_ids(conn, 1) == [5]
        ledger.give_back(conn)
        other.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute(draw)
        conn.execute("COMMIT")
        assert other.execute(draw).fetchone()[0] == 5
    finally:
        other.close()
        store.close()
