"""A psycopg connection whose every round trip has a deadline (``BoundedConnection``).

Keepalives and ``tcp_user_timeout`` end a connection whose peer's kernel stops answering (a
cut cable, a host gone). A peer that is alive but never answers — a frozen proxy or pooler, a
hung server — goes on acknowledging every byte, so neither fires and a statement would wait
for ever; ``statement_timeout`` does not help either (the server may have answered long ago:
the answer is held on the way). So the client bounds each wait itself: psycopg runs every
operation on an open connection (a statement with its results, a fetch, a ``COPY`` block, a
``COMMIT``) as one generator through ``Connection.wait``, and this class gives that wait a
deadline. Past it the connection is closed (its state mid-protocol is unknown, so it cannot be
used again) and ``psycopg.OperationalError`` without a SQLSTATE is raised: the store error
tree's ``TransientError`` (``store.postgres.errors``), the same as a connection lost, so a
writer's chunk whose ``COMMIT`` answer never came is resolved as after any lost connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors

#: The key of Quill's own bound in a connection's parameters (``Settings.pg_client_params``),
#: taken out before the rest go to libpq.
ANSWER_TIMEOUT = "answer_timeout"
#: Seconds one round trip may take on a connection opened without ``answer_timeout``.
DEFAULT_ANSWER_TIMEOUT_S = 60.0
#: The bound of a round trip whose work grows with the store (a schema migration's index
#: build, ANALYZE, amcheck, an order index built in the background): an hour, so a frozen
#: peer still frees them, while no store Quill is built for needs that long for one statement.
LONG_WORK_ANSWER_S = 3600.0


class NoAnswerError(psycopg.OperationalError):
    """The server did not answer one round trip within the connection's ``answer_timeout``
    (seconds): the connection was closed. No SQLSTATE: classified as ``TransientError``."""


class BoundedConnection(psycopg.Connection):
    """``psycopg.Connection`` whose every wait for the server (one operation: send, then
    read the whole answer) ends after ``answer_timeout`` seconds (None: no bound) with the
    connection closed and ``NoAnswerError`` raised. Set ``answer_timeout`` after connecting
    (``psycopg.connect`` takes libpq parameters only); ``longer`` widens it for a block."""

    answer_timeout: float | None = DEFAULT_ANSWER_TIMEOUT_S

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """psycopg's ``Connection.wait`` with ``answer_timeout`` as its timeout (a caller's own
        ``timeout`` wins). Raises ``NoAnswerError`` (the connection closed) when it expires."""
        bound = self.answer_timeout if timeout is None else timeout
        try:
            return super().wait(gen, interval=interval, timeout=bound)
        except pg_errors._WaitTimeout as exc:  # psycopg's own wait timed out: no answer
            self.pgconn.finish()  # mid-protocol: never usable again
            raise NoAnswerError(
                f"no answer from the PostgreSQL server within {bound:g} s (a hung server, or "
                "a proxy or network that holds the connection): connection closed"
            ) from exc

    @contextlib.contextmanager
    def longer(self, seconds: float) -> Iterator[None]:
        """Within the block, round trips may take up to ``seconds`` (for statements whose
        work grows with the store); the bound before it is restored after."""
        before = self.answer_timeout
        self.answer_timeout = seconds if before is None else max(before, seconds)
        try:
            yield
        finally:
            self.answer_timeout = before
