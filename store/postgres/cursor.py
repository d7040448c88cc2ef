"""The cursor ``store.postgres.connection.PgConnection`` returns: apsw's calling convention
(``fetchone``, ``fetchall``, iteration) over a psycopg cursor, or over the rows of a statement
the connection queued and sent later (``PgConnection.defer``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import pq

from quill.store.postgres.errors import mapped

#: Result statuses that carry rows (a SELECT's, even with none).
ROWS = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE)


class PgCursor:
    """The result of ``PgConnection.execute`` or ``defer``: iterable, ``fetchone``,
    ``fetchall`` (None: a statement with no result, such as a deferred ``BEGIN``). A deferred
    statement's rows are read when it is sent, and the first fetch sends it (``flush``).
    Fetching one that a rollback discarded unsent, or that did not run because a statement
    before it failed, raises ``RuntimeError`` (a caller's bug: the error was raised first)."""

    def __init__(self, cur: psycopg.Cursor | None, owner: Any = None):  # a PgConnection
        self._cur = cur
        #: The connection whose queue holds this statement until it is sent (None: sent).
        self._owner = owner
        self._dropped = False
        #: The query holding this statement went to the server (``PgConnection.flush``;
        #: a statement run at once: True), whether or not it ran there.
        self.sent = owner is None
        #: A deferred statement's rows not fetched yet (None: not deferred, or not sent).
        self._got: list[tuple] | None = None

    def _rows(self) -> bool:
        if self._owner is not None:
            self._owner.flush()
        if self._dropped:
            raise RuntimeError("the statement was discarded by a ROLLBACK or did not run")
        if self._got is not None:
            return True
        # psycopg's ``description`` would say the same, building a Column per field first.
        res = self._cur.pgresult if self._cur else None
        return res is not None and (res.nfields > 0 or res.status in ROWS)

    def fetchone(self) -> tuple | None:
        with mapped():
            if not self._rows():
                return None
            if self._got is not None:
                return self._got.pop(0) if self._got else None
            assert self._cur is not None  # _rows: a sent statement that returned rows
            return self._cur.fetchone()

    def fetchall(self) -> list[tuple]:
        with mapped():
            if not self._rows():
                return []
            if self._got is not None:
                out, self._got = self._got, []
                return out
            assert self._cur is not None  # _rows: a sent statement that returned rows
            return self._cur.fetchall()

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())
