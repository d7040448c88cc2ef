"""What a piece of client code costs on the wire to PostgreSQL, counted from libpq's own
protocol trace: round trips, statements run and statements the server had to parse (and so
plan) anew. Load-independent figures, for tests and benchmarks that must show a change in
the number of round trips, never a timing.

A round trip is one ``ReadyForQuery`` the server sent: the end of a simple query or of an
extended-protocol ``Sync``, which the client waits for before it goes on. Several statements
sent together before one ``Sync`` (pipeline mode) are one round trip, however the client's
reads and writes interleave on the socket; a statement run through a named prepared
statement is a ``Bind`` and an ``Execute`` without a ``Parse``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from psycopg import pq

from quill.store.postgres.connection import PgConnection


@dataclass
class Wire:
    """Counts of one ``traced`` block: ``round_trips``; ``statements``: simple ``Query``
    messages (one may hold several statements, ``;``-separated) plus extended-protocol
    ``Execute`` messages; ``parses`` (``Query`` plus ``Parse``: texts the server parsed and
    planned in the block); ``sql``: each of those texts as the trace quotes it, in order."""

    round_trips: int = 0
    statements: int = 0
    parses: int = 0
    sql: list[str] = field(default_factory=list)


def _count(trace: str, into: Wire) -> None:
    for line in trace.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        direction, kind = parts[0], parts[2]
        if direction == "B" and kind == "ReadyForQuery":
            into.round_trips += 1
        if direction != "F":
            continue
        if kind in ("Query", "Execute"):
            into.statements += 1
        if kind in ("Query", "Parse"):
            into.parses += 1
            into.sql.append(parts[3].strip() if len(parts) > 3 else "")


@contextlib.contextmanager
def traced(conn: PgConnection) -> Iterator[Wire]:
    """Count what ``conn`` sends and receives inside the block (the ``Wire`` is filled when
    the block ends). Not re-entrant on one connection. Raises ``OSError`` when the temp file
    for libpq's trace cannot be made."""
    wire = Wire()
    with tempfile.TemporaryFile(mode="w+b") as f:
        pg = conn.raw.pgconn
        pg.trace(f.fileno())
        pg.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield wire
        finally:
            pg.untrace()
            f.seek(0)
            _count(f.read().decode("utf-8", "replace"), wire)
