"""A read snapshot whose deferred ``BEGIN`` (sent with the snapshot's first statement) never
ran, because that statement was refused before it (an argument the client cannot send, SQL the
server cannot parse), is still a snapshot: the connection says it is in a transaction and the
next statement takes the snapshot. Before, the refusal dropped the ``BEGIN``: the rest of the
snapshot ran in autocommit, each statement seeing its own committed state."""

from __future__ import annotations

import pytest

from quill.store.contract import BadDataError
from quill.store.errors import StoreError
from quill.store.postgres.connection import PgConnection


@pytest.mark.parametrize(
    "first, error",
    [
        (("SELECT ?", ["a\x00b"]), BadDataError),  # NUL: refused by the client
        (("SELECT ?", ["a\ud800b"]), UnicodeEncodeError),  # lone surrogate: not encodable
        (("SELEC ?", [1]), StoreError),  # a syntax error: the server parses the whole query
    ],
    ids=["nul", "surrogate", "syntax"],
)
def test_a_refused_first_statement_keeps_the_snapshot(pg_url, first, error):
    conn = PgConnection(pg_url)
    try:
        conn.execute("BEGIN")
        with pytest.raises(error):
            conn.execute(*first).fetchall()
        assert conn.in_transaction
        iso, xid = conn.execute(
            "SELECT current_setting('transaction_isolation'), txid_current()"
        ).fetchone()
        assert iso == "repeatable read"
        # the same transaction for the statements after: one snapshot
        assert conn.execute("SELECT txid_current()").fetchone()[0] == xid
        conn.execute("ROLLBACK")
        assert not conn.in_transaction
    finally:
        conn.close()
