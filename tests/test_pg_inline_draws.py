"""A one-run chunk on PostgreSQL draws its message ids and batch numbers inside its writes'
query (``PgLedger.numbers``, inline), and a refused run still gives back exactly the values
it drew (``PgLedger.give_back``): all of them when the query went to the server and was
refused there, none when it was refused before it was sent. Checked on the real sequences,
with a second session drawing meanwhile as another host's writer would."""

from __future__ import annotations

from pathlib import Path

import pytest

from quill.store.contract import BadDataError
from quill.store.factory import open_url
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.ledger import Drawn, PgLedger

_LAST = "SELECT pg_sequence_last_value(pg_get_serial_sequence('messages', 'id')::regclass)"
_NEXT = "SELECT nextval(pg_get_serial_sequence('messages', 'id'))"


def _refused_run(conn: PgConnection, other: PgConnection, refusal: tuple) -> int:
    """Draw 2 ids inline after ``other`` drew ``k`` meanwhile; ``refusal`` (a statement and
    its arguments) then fails the query at COMMIT; roll back and give back. Returns the
    sequence's last value before the chunk."""
    before = conn.execute(_LAST).fetchone()[0]
    ledger = PgLedger("host-a", unwaited=True)
    conn.defer("BEGIN IMMEDIATE")
    ledger.ask_bases(conn)
    conn.flush()  # the chunk's first round trip: the values before its draws
    for _ in range(2):  # another writer draws as many as the run will, and commits
        other.execute(_NEXT)
    ledger.open_run()
    ledger.last_run()
    ids, refs = ledger.numbers(conn, 2, ["b-1"], named=False)
    assert all(isinstance(v, Drawn) for v in [*ids, *refs.values()])
    conn.defer(*refusal)
    with pytest.raises(BadDataError):
        conn.execute("COMMIT")
    conn.execute("ROLLBACK")
    ledger.give_back(conn)
    return before


def test_a_refusal_before_the_query_is_sent_gives_back_nothing(tmp_path: Path, pg_store_url):
    """NUL in text: psycopg refuses the value before anything is sent, so the run drew
    nothing, and the sequence's count matching the run's (another writer drew two) must not
    be taken for the run's draws: the other writer's ids stay taken."""
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    other = PgConnection(pg_store_url)
    try:
        before = _refused_run(store.conn, other, ("SELECT ?", ["a\x00b"]))
        after = store.conn.execute(_LAST).fetchone()[0]
        fresh = store.conn.execute(_NEXT).fetchone()[0]
    finally:
        other.close()
        store.close()
    assert after == (before or 0) + 2 and fresh == (before or 0) + 3


def test_a_refusal_by_the_server_gives_back_every_value_drawn(tmp_path: Path, pg_store_url):
    """Refused by the server after the draws ran (class 22): the run drew its two ids, and
    the batch number; with another writer's two draws between, the ids' count differs and
    their gap stays, as on the waited path (the batch number, drawn alone, goes back);
    alone, the ids go back too."""
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    other = PgConnection(pg_store_url)
    conn = store.conn
    try:
        before = _refused_run(conn, other, ("SELECT 1 / (0 * ?)", [1]))
        crowded = conn.execute(_LAST).fetchone()[0]
        ledger = PgLedger("host-a", unwaited=True)  # alone now: nothing drawn in between
        conn.defer("BEGIN IMMEDIATE")
        ledger.ask_bases(conn)
        conn.flush()
        ledger.open_run()
        ledger.last_run()
        ledger.numbers(conn, 2, ["b-2"], named=False)
        conn.defer("SELECT 1 / (0 * ?)", [1])
        with pytest.raises(BadDataError):
            conn.execute("COMMIT")
        conn.execute("ROLLBACK")
        ledger.give_back(conn)
        alone = conn.execute(_LAST).fetchone()[0]
        batches = conn.execute(
            "SELECT pg_sequence_last_value(pg_get_serial_sequence('batches', 'id')::regclass)"
        ).fetchone()[0]
    finally:
        other.close()
        store.close()
    assert crowded == (before or 0) + 4  # 2 of the other writer, 2 of the run: kept
    assert alone == crowded  # the run's two given back
    assert batches is None  # each run's batch number went back (that sequence was its own)
