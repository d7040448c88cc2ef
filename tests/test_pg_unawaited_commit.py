"""A read-only session's snapshot ends without a round trip of its own: its ``COMMIT`` is sent
and its answer read before the next statement (``PgConnection(read_only=True)``, the
reader's connection). The server ends the transaction when it reads the message, so nothing
(snapshot, locks) is held while the client goes on; a failure is met by the next statement,
as the store error tree. A session that writes still waits for every ``COMMIT``. Counted from
libpq's protocol trace (``store.postgres.wire``) and the server's own view of the session,
never timed."""

from __future__ import annotations

import time

import psycopg
import pytest

from quill.store.errors import StoreError, TransientError
from quill.store.postgres import wire
from quill.store.postgres.connection import PgConnection


def _state(pg_url: str, pid: int) -> str | None:
    """The server's state of backend ``pid`` (``idle``, ``idle in transaction``…), asked
    until it is no longer in a transaction, for at most 10 s (then the last state seen)."""
    with psycopg.connect(pg_url, autocommit=True) as c:
        for _ in range(200):
            row = c.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            if row is None or row[0] == "idle":
                return row[0] if row else None
            time.sleep(0.05)
        return row[0]


def test_a_read_only_snapshot_ends_without_waiting_for_its_commit(pg_url):
    conn = PgConnection(pg_url, read_only=True)
    try:
        pid = conn.raw.info.backend_pid
        conn.execute("BEGIN")
        xid = conn.execute("SELECT txid_current()").fetchone()[0]
        with wire.traced(conn) as w:
            conn.execute("COMMIT")
        assert w.statements == 1 and w.sql == ['"COMMIT"'] and w.round_trips == 0, w
        # The server ended the transaction although the client never read the answer.
        assert _state(pg_url, pid) == "idle"
        assert not conn.in_transaction
        with wire.traced(conn) as nxt:
            conn.execute("BEGIN")
            assert conn.execute("SELECT txid_current()").fetchone()[0] > xid  # a new one
            conn.execute("COMMIT")
        assert nxt.round_trips == 1  # the statement's; the COMMIT's answer was read before it
        with pytest.raises(StoreError):  # the session is read-only
            conn.execute("CREATE TEMP TABLE t (x int)")
    finally:
        conn.close()


def test_a_writing_session_waits_for_its_commit(pg_url):
    conn = PgConnection(pg_url)
    try:
        conn.execute("BEGIN")
        conn.execute("SELECT 1").fetchall()
        with wire.traced(conn) as w:
            conn.execute("COMMIT")
        assert w.round_trips == 1 and not conn.in_transaction
    finally:
        conn.close()


def test_an_aborted_snapshot_is_ended_and_the_session_goes_on(pg_url):
    """A statement failed inside the snapshot: its COMMIT (answered ROLLBACK) is waited for,
    and the next snapshot runs."""
    conn = PgConnection(pg_url, read_only=True)
    try:
        conn.execute("BEGIN")
        with pytest.raises(StoreError):
            conn.execute("SELECT 1 / 0").fetchall()
        conn.execute("COMMIT")
        assert not conn.in_transaction
        conn.execute("BEGIN")
        assert conn.execute("SELECT 2").fetchone() == (2,)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_connection_lost_after_an_unawaited_commit_is_the_next_statements_error(pg_url):
    conn = PgConnection(pg_url, read_only=True)
    try:
        pid = conn.raw.info.backend_pid
        conn.execute("BEGIN")
        conn.execute("SELECT 1").fetchall()
        conn.execute("COMMIT")
        assert _state(pg_url, pid) == "idle"
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(200):  # until the server has ended the session
            if _state(pg_url, pid) is None:
                break
        with pytest.raises(TransientError):
            conn.execute("SELECT 1").fetchall()
    finally:
        conn.close()
