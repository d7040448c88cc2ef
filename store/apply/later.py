"""Statements whose answer can wait: sent with the next one that waits, on PostgreSQL.

On PostgreSQL every statement the appliers send is a round trip, and most of an op's
statements need no answer before the next is sent (a session upsert, a ``SAVEPOINT``, a
``RELEASE``) or several reads are independent of each other. ``later`` queues such a
statement on a ``PgConnection`` (``PgConnection.defer``): the queue goes to the server in one
query with the next statement that waits for its answer, so an op's round trips are the
points where the applier needs an answer, not its statements. On SQLite (apsw: no network)
the statement runs at once and its rows are read right away.

What the caller must keep in mind (both hold for every caller in ``store.apply``): an error
of a queued statement is raised by the statement that sends it, so every savepoint scope
ends with a statement that waits (an op's ledger insert) inside the ``try`` that rolls the
scope back; and rows of a ``later`` read are those of the store when the statement runs on
the server, after every statement sent before it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


class Rows:
    """The rows of a statement run at once (SQLite): ``fetchone``, ``fetchall``, iterable,
    as a cursor is."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[tuple]):
        self._rows = rows

    def fetchone(self) -> tuple | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple]:
        return self._rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._rows)


def later(conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
    """Run ``sql`` with ``args`` on ``conn`` (apsw or ``PgConnection``) when its answer is
    first needed: on PostgreSQL it is queued (``PgConnection.defer``) and sent with the next
    statement that waits, or by the first fetch from what this returns; on SQLite it runs
    now. Returns a cursor-like object (``fetchone``, ``fetchall``, iteration). Raises the
    store error tree, possibly from the later call that sends it (module doc)."""
    defer = getattr(conn, "defer", None)
    if defer is not None:
        return defer(sql, args)
    return Rows(list(conn.execute(sql, args)))
