"""The ledger of applied and refused batches, per backend, and the op content digest.

``apply_entries`` (``store.apply.chunk``) asks a ``Ledger`` which batch ids are already decided
and records each op's outcome in the chunk's transaction; ``op_digest`` tells a retry of a batch
(same content) from a reused batch id (other content). ``SqliteLedger`` is the embedded store's
(``applied_batches``/``rejected_batches``); the PostgreSQL backend has its own
(``store.postgres.apply``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import apsw

#: Errors that mean "this op's data cannot be stored", not "the store is in trouble": values
#: SQLite or Python cannot represent (an integer beyond 64 bits, 1e400 → inf → OverflowError,
#: nesting past the recursion limit, a row over SQLite's size limit, a CHECK or NOT NULL
#: constraint). The op is quarantined and the drain goes on; a poison record must never
#: crash the writer. Corruption, I/O, busy and full errors are not in this list: they stop
#: the chunk and are handled by the writer.
_BAD_DATA: tuple[type[BaseException], ...] = (
    OverflowError,
    TypeError,
    ValueError,
    RecursionError,
    apsw.ConstraintError,
    apsw.MismatchError,
    apsw.TooBigError,
    apsw.RangeError,
)


def op_digest(op: Any, data: Any) -> str:
    """Content digest of one op (hex, 32 chars): SHA-256 of its op name and data as JSON with
    sorted keys, so a retry of the same op and data matches whatever key order or envelope
    (producer, seq, timestamp) the retry has. Used to tell a retry (a duplicate) from a
    reused batch id carrying other content (quarantined: ``batch-id-reused``). Cost linear in
    the data's size (bench/RESULTS.md)."""
    import msgspec

    try:
        raw = msgspec.json.encode([op, data], order="sorted")
    except (TypeError, ValueError, OverflowError):  # not JSON-shaped: refused later by the op rules
        raw = repr((op, data)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


class Ledger(Protocol):
    """What differs between backends in applying ops (``apply_entries``): where batch ids and
    their outcomes are recorded, and which exceptions mean "this op's data cannot be stored"."""

    bad_data: tuple[type[BaseException], ...]
    #: Whether runs of plain ``messages.append`` ops may be applied together
    #: (``store.apply.bulk``, with ids from ``message_ids``).
    bulk_append: bool

    def decided(self, conn: Any, batches: list[str]) -> dict[str, str | None]:
        """The batch ids among ``batches`` already applied or refused (by any writer), each
        with the content digest it was applied with (None: refused, or applied before digests
        were recorded)."""

    def record_applied(self, conn: Any, batch: str, position: str, now: float, digest: str) -> bool:
        """Record ``batch`` as applied; False when another writer decided it meanwhile (the
        op's rows are then rolled back and it counts as a duplicate)."""

    def record_rejected(
        self, conn: Any, batch: str, position: str, reason: str, now: float
    ) -> None:
        """Record ``batch`` as refused for its data (a replay skips it)."""

    def message_ids(self, conn: Any, n: int) -> list[int] | None:
        """``n`` increasing ids for new message rows of a bulk run, or None when the store
        cannot give them (the run is then applied op at a time)."""

    def batch_refs(self, conn: Any, batches: list[str]) -> dict[str, int]:
        """``{batch id: number}`` (``store.apply.batches``) for a bulk run's batches that
        write rows, new ones numbered in the order given, in the run's transaction."""

    def numbers(
        self, conn: Any, n: int, batches: list[str], *, named: bool = True
    ) -> tuple[list[Any], dict[str, Any]] | None:
        """``message_ids(conn, n)`` then ``batch_refs(conn, batches)``, as ``(ids, refs)``,
        or None (nothing drawn) when there are no ids; in one round trip where the store is
        across a network. ``named`` False: the caller passes the ids and numbers only to
        ``insert_rows``, so a store may hand back stand-ins its ``insert_rows`` writes as
        values drawn by the insert's own query (PostgreSQL: ``PgLedger.numbers``)."""

    def insert_rows(self, conn: Any, rows: list[tuple]) -> None:
        """Insert a bulk run's message rows (``message_rows.STATE_ID_COLUMNS`` order)."""

    def record_applied_many(self, conn: Any, rows: list[tuple[str, str, float, str]]) -> bool:
        """Record each ``(batch, position, now, digest)`` as applied; False when any batch was
        decided by another writer meanwhile (the caller rolls the run back)."""

    def open_run(self) -> None:
        """A bulk run starts: forget the ids counted for the previous one (``give_back``)."""

    def last_run(self) -> None:
        """The run about to be applied is the whole chunk (every op of it in the run): after
        its ``record_applied_many`` the chunk's transaction writes only its cursor. A ledger
        may then send that insert unwaited, to be refused with the ``COMMIT`` rather than
        before it (``store.postgres.ledger``): its caller must then redo the chunk, checked."""

    def drew(self, table: str, n: int) -> None:
        """The run inserted ``n`` rows into ``table`` taking default ids (``usage``)."""

    def give_back(self, conn: Any) -> None:
        """After the caller rolled a refused run back: return the ids it drew, so the rows
        applied after it are numbered as if the run had been applied op at a time from the
        start (a rebuild chunks the spool differently). SQLite: nothing to do (a new row
        takes max(id) + 1, which the rollback restores)."""


class SqliteLedger:
    """``applied_batches``/``rejected_batches`` of the embedded store (one writer per store)."""

    bad_data = _BAD_DATA
    bulk_append = True

    def decided(self, conn: Any, batches: list[str]) -> dict[str, str | None]:
        import json

        ids = json.dumps(batches)
        return {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT batch_id, digest FROM applied_batches "
                "WHERE batch_id IN (SELECT value FROM json_each(?1)) "
                "UNION ALL SELECT batch_id, NULL FROM rejected_batches "
                "WHERE batch_id IN (SELECT value FROM json_each(?1))",
                (ids,),
            )
        }

    def record_applied(self, conn: Any, batch: str, position: str, now: float, digest: str) -> bool:
        conn.execute(
            "INSERT INTO applied_batches (batch_id, position, applied_at, digest) "
            "VALUES (?, ?, ?, ?)",
            (batch, position, now, digest),
        )
        return True

    def open_run(self) -> None:
        pass

    def last_run(self) -> None:
        pass  # nothing is sent: the insert's answer costs no round trip

    def drew(self, table: str, n: int) -> None:
        pass

    def give_back(self, conn: Any) -> None:
        pass

    def message_ids(self, conn: Any, n: int) -> list[int] | None:
        from quill.store.apply.bulk import sqlite_ids

        return sqlite_ids(conn, n)

    def batch_refs(self, conn: Any, batches: list[str]) -> dict[str, int]:
        from quill.store.apply.batches import refs

        return refs(conn, batches)

    def numbers(
        self, conn: Any, n: int, batches: list[str], *, named: bool = True
    ) -> tuple[list[Any], dict[str, Any]] | None:
        ids = self.message_ids(conn, n)
        return None if ids is None else (ids, self.batch_refs(conn, batches))

    def insert_rows(self, conn: Any, rows: list[tuple]) -> None:
        from quill.store.apply.message_rows import INSERT_STATE_ID

        conn.executemany(INSERT_STATE_ID, rows)

    def record_applied_many(self, conn: Any, rows: list[tuple[str, str, float, str]]) -> bool:
        # One writer per store: nothing else can decide a batch meanwhile.
        conn.executemany(
            "INSERT INTO applied_batches (batch_id, position, applied_at, digest) "
            "VALUES (?, ?, ?, ?)",
            rows,
        )
        return True

    def record_rejected(
        self, conn: Any, batch: str, position: str, reason: str, now: float
    ) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO rejected_batches (batch_id, position, reason, rejected_at) "
            "VALUES (?, ?, ?, ?)",
            (batch, position, reason, now),
        )


def refused_here(conn: Any, batches: dict[str, str]) -> set[str]:
    """The batches of ``batches`` (``{batch id: spool position}``) whose refusal at that
    position is committed in the embedded store's ledger (``rejected_batches``)."""
    import json

    rows = conn.execute(
        "SELECT batch_id, position FROM rejected_batches "
        "WHERE batch_id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(batches)),),
    )
    return {batch for batch, position in rows if batches.get(batch) == position}
