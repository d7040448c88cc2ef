"""A small chunk on PostgreSQL costs the round trips where the writer needs an answer, not one
per statement: statements whose answer can wait are queued (``PgConnection.defer``,
``store.apply.later``) and sent in one query with the next statement that waits. Round trips
are counted from libpq's protocol trace (``store.postgres.wire``), never timed. Before, one
agent turn (a 2-message ``messages.append``) applied by a writer holding its spool claim took
20 round trips, one per statement.

The rules the queued statements must not weaken are checked here on the queued path: an
error of a queued statement is raised inside its op's savepoint scope (the op alone is
quarantined), a rollback discards what it would undo, and nothing is left queued outside a
transaction."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from quill.spool import START, Spool, SpoolReader
from quill.store.apply.chunking import take_chunk
from quill.store.contract import BadDataError
from quill.store.errors import TransientError
from quill.store.factory import open_url
from quill.store.postgres import apply as pg_apply
from quill.store.postgres import claims, wire
from quill.store.postgres.connection import PgConnection

HOLDER = {"token": "tok-a", "host": socket.gethostname(), "path": "/data/a", "pid": 1}


def _turn(i: int) -> list[dict]:
    """One agent turn as ``QuillSession.add_items`` sends it (bench/read_your_writes.py)."""
    return [
        {"role": "user", "content": f"question {i}: what is the weather in Oslo?"},
        {"role": "assistant", "content": f"answer {i}: sunny", "id": f"msg_{i}"},
    ]


def test_one_agent_turn_is_two_round_trips(tmp_path: Path, pg_store_url: str):
    """A writer holding its claim applies one turn per chunk in two round trips: the
    transaction's checks and the run's reads (asked ahead, after the session's lock); then
    its writes, which draw their own message ids and batch number, with the ledger insert,
    the cursor and COMMIT. Every statement is still sent, in order, and the rows are stored
    with the ids and numbers the waited draws gave. (Before: three, the ids and the batch
    number a round trip of their own; before that five.)"""
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    conn = store.conn
    claims.claim(conn, "host-a", HOLDER)
    spool = Spool(tmp_path / "spool", fsync=False)
    reader = SpoolReader(tmp_path / "spool")
    at, trips, sent = START, [], []
    try:
        for i in range(3):
            spool.append("messages.append", {"session_id": "s1", "messages": _turn(i)})
            entries = take_chunk(reader.read(at, max_bytes=1 << 20), 500)
            at = entries[-1].next
            with wire.traced(conn) as w:
                result = pg_apply.apply_chunk(
                    conn, "host-a", entries, lambda *a: pytest.fail(f"{a[1:]}"), HOLDER["token"]
                )
            assert (result.applied, result.rows) == (1, 2)
            trips.append(w.round_trips)
            sent.append(w.sql)
        rows = conn.execute(
            "SELECT m.id, m.role, m.ext_id, b.batch_id FROM messages m "
            "JOIN batches b ON b.id = m.batch WHERE m.session_id = 's1' ORDER BY m.seq"
        ).fetchall()
        batches = [
            r[0] for r in conn.execute("SELECT batch_id FROM applied_batches ORDER BY position")
        ]
        cursor = pg_apply.read_cursor(conn, "host-a")
    finally:
        spool.close()
        store.close()
    assert trips == [2, 2, 2], trips
    first, writes = sent[-1]  # each round trip's statements, as sent
    assert first.startswith('"BEGIN; ') and writes.endswith('; COMMIT"'), sent[-1]
    assert "UPDATE spool_claims" in first  # the claim is still renewed
    # the session still locked before any read of it: the run's reads come after the lock
    assert first.index("pg_advisory_xact_lock") < first.index("SELECT ext_id FROM messages")
    assert first.index("FROM applied_batches") < first.index("ORDER BY seq DESC LIMIT 1")
    # the draws first after the savepoint, then the rows, the ledger, the savepoint's end
    # and the cursor, in order
    assert writes.startswith("\"SAVEPOINT bulk; SELECT set_config('quillrun.ids'"), writes
    order = [
        writes.index(s)
        for s in ("INSERT INTO batches", "INTO messages", "INTO applied_batches", "RELEASE bulk")
    ]
    assert order == sorted(order) and order[-1] < writes.index("INTO spool_cursor"), writes
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]  # ascending, no gap, in turn order
    assert [r[1] for r in rows] == ["user", "assistant"] * 3
    assert [r[2] for r in rows][1::2] == ["msg_0", "msg_1", "msg_2"]
    assert [r[3] for r in rows][::2] == [r[3] for r in rows][1::2] == batches  # each its own
    assert cursor == tuple(at)


def test_a_bulk_chunk_is_five_round_trips(tmp_path: Path, pg_store_url: str):
    """A chunk of 500 rows (50 appends of 10 messages over 10 sessions, as bench.backends
    ingests) loads its rows by COPY and costs five round trips, whatever the number of
    sessions in it (before: 54, several per session; then 7, before the run's reads went
    with the first round trip and its ledger insert with the COMMIT)."""
    with Spool(tmp_path / "spool", fsync=False) as spool:
        for i in range(50):
            msgs = [{"role": "user", "content": f"m{i} {k}"} for k in range(10)]
            spool.append("messages.append", {"session_id": f"s{i % 10}", "messages": msgs})
    entries = take_chunk(SpoolReader(tmp_path / "spool").read(START, max_bytes=8 << 20), 500)
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    try:
        with wire.traced(store.conn) as w:
            result = store.apply_chunk(entries, lambda *a: pytest.fail(f"{a[1:]}"))
        count = store.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        store.close()
    assert (result.applied, result.rows, count) == (50, 500, 500)
    assert w.round_trips == 5, w.sql
    assert any(s.startswith('"COPY messages') for s in w.sql), w.sql


def test_a_queued_statement_refused_by_the_server_quarantines_its_op_alone(
    tmp_path: Path, pg_store_url: str
):
    """An op whose queued statements the server refuses (here a CHECK constraint the test
    adds to the real table: class 23, raised when the queue is sent, by the ledger insert
    that waits) is quarantined alone, inside its own savepoint; the ops before and after it
    in the chunk are applied and the cursor moves past all three. Once with the op in a bulk
    run (its queued multi-row INSERT), once alone (its queued session upsert)."""
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    store.conn.execute(
        "ALTER TABLE messages ADD CONSTRAINT poison CHECK (content IS DISTINCT FROM 'poison')"
    )
    store.conn.execute("ALTER TABLE sessions ADD CONSTRAINT poison CHECK (id <> 'poisoned')")
    poisoned = [
        ("s2", [{"role": "user", "content": "poison"}]),
        ("poisoned", [{"role": "user", "content": "fine"}]),
    ]
    with Spool(tmp_path / "spool", fsync=False) as spool:
        for sid, msgs in poisoned:
            spool.append("messages.append", {"session_id": "s1", "messages": _turn(len(sid))})
            spool.append("messages.append", {"session_id": sid, "messages": msgs})
        spool.append("messages.append", {"session_id": "s1", "messages": _turn(99)})
    entries = take_chunk(SpoolReader(tmp_path / "spool").read(START, max_bytes=1 << 20), 500)
    rejects: list[str] = []
    try:
        result = store.apply_chunk(entries, lambda e, reason, detail: rejects.append(detail))
        sessions = [r[0] for r in store.conn.execute("SELECT id FROM sessions ORDER BY id")]
        count = store.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        ids = [r[0] for r in store.conn.execute("SELECT id FROM messages ORDER BY id")]
        cursor = pg_apply.read_cursor(store.conn, "host-a")
    finally:
        store.close()
    assert (result.applied, result.rejected) == (3, 2), rejects
    assert all("poison" in r for r in rejects), rejects
    assert sessions == ["s1"] and count == 6
    assert ids == [1, 2, 4, 5, 6, 7]  # as the checked path numbers them (ids given back)
    assert cursor == tuple(entries[-1].next)


def test_a_rollback_discards_what_it_would_undo_and_an_error_surfaces_in_scope(
    pg_store_url: str,
):
    """On the connection itself: ``ROLLBACK TO`` a savepoint still queued sends nothing and
    leaves the statements before it queued; an error of a queued statement is raised by the
    next statement that waits (as the store error tree), after which ``ROLLBACK TO`` a sent
    savepoint works; outside a transaction ``defer`` runs at once."""
    conn = PgConnection(pg_store_url)
    try:
        conn.execute("CREATE TABLE t (v int PRIMARY KEY)")
        conn.defer("INSERT INTO t VALUES (5)")  # no transaction: runs at once
        assert not conn.in_transaction
        with wire.traced(conn) as w:
            conn.defer("BEGIN IMMEDIATE")
            conn.defer("INSERT INTO t VALUES (1)")
            conn.defer("SAVEPOINT a")
            conn.defer("INSERT INTO t VALUES (2)")
            assert conn.in_transaction
            conn.execute("ROLLBACK TO a")  # 'a' is queued: only (2) is dropped, unsent
            conn.defer("RELEASE a")
            conn.execute("SAVEPOINT b")  # sends everything queued: one round trip
        assert w.round_trips == 1 and not any("(2)" in s for s in w.sql), w.sql
        conn.defer("INSERT INTO t VALUES (1)")  # a duplicate key: refused by the server
        conn.defer("INSERT INTO t VALUES (3)")
        with pytest.raises(BadDataError):
            conn.execute("SELECT 1").fetchone()
        conn.execute("ROLLBACK TO b")
        conn.execute("RELEASE b")
        conn.defer("INSERT INTO t VALUES (4)")
        conn.execute("COMMIT")
        assert [r[0] for r in conn.execute("SELECT v FROM t ORDER BY v")] == [1, 4, 5]
        conn.defer("BEGIN IMMEDIATE")
        conn.defer("INSERT INTO t VALUES (6)")
        with wire.traced(conn) as w:
            conn.execute("ROLLBACK")  # its BEGIN was never sent: nothing to send
        assert w.round_trips == 0 and not conn.in_transaction
        assert [r[0] for r in conn.execute("SELECT v FROM t ORDER BY v")] == [1, 4, 5]
        # Queued statements end in a plain ReadyForQuery: a transaction left idle after them
        # is still ended by the server's idle_in_transaction_session_timeout.
        conn.execute("SET idle_in_transaction_session_timeout = 500")
        conn.defer("BEGIN IMMEDIATE")
        conn.defer("INSERT INTO t VALUES (7)")
        conn.execute("SELECT 1")
        time.sleep(2)
        with pytest.raises(TransientError):
            conn.execute("SELECT 1")
    finally:
        conn.close()
        other = PgConnection(pg_store_url)
        other.execute("DROP TABLE IF EXISTS t")
        other.close()


def test_a_read_asked_ahead_is_taken_only_while_nothing_was_sent_since(pg_store_url: str):
    """``PgConnection.ahead``: a read asked ahead and answered is taken by the same read
    later (no round trip) while only a SAVEPOINT was queued since; a write sent, a write
    queued before the later read, or a write that ran after it in its own query makes the
    later read go to the server and see the write."""
    conn = PgConnection(pg_store_url)
    read = "SELECT v FROM t ORDER BY v"
    try:
        conn.execute("CREATE TABLE t (v int PRIMARY KEY)")
        conn.defer("BEGIN IMMEDIATE")
        with conn.ahead():
            asked = conn.defer(read)
        conn.flush()
        with wire.traced(conn) as w:
            conn.defer("SAVEPOINT x")
            assert conn.defer(read) is asked and asked.fetchall() == []
        assert w.round_trips == 0
        with conn.ahead():
            conn.defer(read)
        conn.flush()
        conn.execute("INSERT INTO t VALUES (1)")  # sent: what was asked is stale
        assert conn.defer(read).fetchall() == [(1,)]
        with conn.ahead():
            conn.defer(read)
        conn.flush()
        conn.defer("INSERT INTO t VALUES (2)")  # queued before the read: it would see it
        assert conn.defer(read).fetchall() == [(1,), (2,)]
        with conn.ahead():
            conn.defer(read)
        conn.defer("INSERT INTO t VALUES (3)")  # runs after the asked read, in its query
        conn.flush()
        assert conn.defer(read).fetchall() == [(1,), (2,), (3,)]
        conn.execute("ROLLBACK")
    finally:
        conn.close()
        other = PgConnection(pg_store_url)
        other.execute("DROP TABLE IF EXISTS t")
        other.close()
