"""Applying a chunk of one spool's entries to the shared PostgreSQL store.

The same exactly-once argument as SQLite's ``store.apply.chunk`` (docs/architecture.md, "The cursor
commits with the data"), per spool:
1. this spool's ``spool_cursor`` row (keyed by its ``spool_id``) is upserted in the same
   transaction as the rows, so a writer killed mid-chunk replays at most that chunk;
2. every batch id is recorded in ``applied_batches`` (unique store-wide) in that transaction;
   a batch already decided — by any host — is skipped.
3. Ops on one session serialize across hosts: before touching anything the chunk takes
   ``pg_advisory_xact_lock(hashtextextended(session_id, 0))`` for every session it may touch
   (``lock_sessions``: ``data.session_id``, a create's parent, a delete's targets and their
   descendants), in ascending key order (so two chunks can never wait on each other in a
   cycle; a hash collision only over-serializes). The locks are released at COMMIT/ROLLBACK.
   Ops of one session therefore apply one transaction at a time, each seeing the previous
   one's rows, and a batch's rows get consecutive positions in that session: placed by the
   op's order key (``store.apply.order``: acknowledgement time, spool tag, spool position),
   before rows another host's writer applied first when those were acknowledged later.
The op appliers are the shared ones (``store.apply.sessions.APPLIERS``), run through
``PgConnection``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from quill.store.apply import order
from quill.store.apply.chunk import (
    ChunkResult,
    EntryLike,
    RejectFn,
    apply_entries,
    chunk_batches,
    cursor_values,
)
from quill.store.apply.later import later
from quill.store.apply.message_rows import STATE_ID_COLUMNS
from quill.store.apply.rules import session_id_problem
from quill.store.contract import BadDataError
from quill.store.errors import InvalidOpError
from quill.store.postgres import claims, halt
from quill.store.postgres.connection import PgConnection

#: Errors that mean "this op's data cannot be stored" (see store.apply._BAD_DATA): the op is
#: quarantined and the drain goes on. BadDataError = SQLSTATE class 22/23 from the server.
_BAD_DATA: tuple[type[BaseException], ...] = (
    InvalidOpError,
    BadDataError,
    OverflowError,
    TypeError,
    ValueError,
    RecursionError,
)

_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(x, 0) AS k "
    "FROM unnest(?::text[]) AS x ORDER BY k) AS keys"
)


#: Most rows a bulk run writes with one queued ``INSERT`` rather than a ``COPY``
#: (``PgLedger.insert_rows``).
INSERT_MAX_ROWS = 32

#: The identity sequences a bulk run draws from (``PgLedger.give_back``), in lock order.
_SEQUENCES = ("messages", "usage", "batches")


def read_cursor(conn: PgConnection, spool_id: str) -> tuple[int, int] | None:
    """This spool's committed cursor ``(segment, offset)``, or None before its first chunk."""
    row = conn.execute(
        'SELECT segment, "offset" FROM spool_cursor WHERE spool_id = ?', (spool_id,)
    ).fetchone()
    return (row[0], row[1]) if row else None


def read_cursor_proof(
    conn: PgConnection, spool_id: str
) -> tuple[int, int, int | None, str | None] | None:
    """This spool's committed cursor with its proof ``(segment, offset, proof_offset,
    proof)`` (``spool.cursor_proof``; None proof: written before it was kept), or None."""
    row = conn.execute(
        'SELECT segment, "offset", proof_offset, proof FROM spool_cursor WHERE spool_id = ?',
        (spool_id,),
    ).fetchone()
    return tuple(row) if row else None


def spool_ids(conn: PgConnection) -> list[str]:
    """Every spool id with a cursor row, sorted: the hosts whose writers have applied to this
    store (a host's sessions reach the store only through its writer, which moves its cursor
    in the same transaction)."""
    return [
        r[0] for r in conn.execute("SELECT spool_id FROM spool_cursor ORDER BY spool_id").fetchall()
    ]


def session_ids(entries: Sequence[EntryLike]) -> list[str]:
    """Every session id the chunk's ops name, sorted, unique: ``data.session_id``, a
    ``session.create``'s ``parent_id`` (the parent's children change) and a
    ``sessions.delete``'s ``session_ids``. A value that is no valid session id is left out:
    no session has it (the op's check refuses it), and a NUL would fail the lock query."""
    out: set[str] = set()
    for e in entries:
        data = e.record.get("data") if e.record else None
        if not isinstance(data, dict):
            continue
        named = [data.get("session_id"), data.get("parent_id")]
        if isinstance(data.get("session_ids"), list):
            named += data["session_ids"]
        out.update(s for s in named if session_id_problem(s) is None)
    return sorted(out)


def _deletes(entries: Sequence[EntryLike]) -> list[str]:
    """The sessions the chunk's ``sessions.delete`` ops name."""
    out: list[str] = []
    for e in entries:
        data = e.record.get("data") if e.record else None
        if (
            e.record
            and e.record.get("op") == "sessions.delete"
            and isinstance(data, dict)
            and isinstance(data.get("session_ids"), list)
        ):
            out += [s for s in data["session_ids"] if session_id_problem(s) is None]
    return out


def lock_sessions(
    conn: PgConnection, entries: Sequence[EntryLike], named_held: bool = False
) -> list[str]:
    """Take the per-session transaction lock of every session the chunk may touch; returns them.

    That is every id the ops name (``session_ids``) plus, for a ``sessions.delete``, every
    descendant of its targets (delegate children it may delete, other children it detaches),
    found after the named locks are held. Invariant: a session's children change only under
    its lock (``session.create`` locks its ``parent_id``), so once a parent's lock is held its
    set of children is final; the closure is re-read until it stops growing. The first set is
    locked in ascending key order; a later round may wait out of order, and a cycle with
    another chunk is then broken by the server (40P01, ``TransientError``: the chunk is retried).
    ``named_held``: the caller already queued the first set's lock (``ask_locks``).

    Each lock statement is queued (``store.apply.later``): every statement sent after it runs
    on the server once the locks are held, whichever of them the client waits for."""
    held = session_ids(entries)
    todo = held
    frontier = _deletes(entries)
    skip = named_held
    while todo:
        if not skip:
            later(conn, _LOCK_SQL, (todo,))
        skip = False
        if not frontier:
            break
        found: set[str] = set()
        while frontier:  # descendants visible now that the parents' locks are held
            kids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM sessions WHERE parent_id = ANY(?)", (frontier,)
                )
            ]
            frontier = [k for k in kids if k not in found and k not in held]
            found.update(frontier)
        todo = sorted(found)
        held = held + todo
        frontier = todo  # their children, once these locks are held
    return held


def ask_locks(conn: PgConnection, entries: Sequence[EntryLike]) -> None:
    """Queue the lock of every session ``entries`` name (``lock_sessions``' first set), so
    it goes with the chunk's first statements; then call ``lock_sessions(…,
    named_held=True)``."""
    named = session_ids(entries)
    if named:
        later(conn, _LOCK_SQL, (named,))


class PgLedger:
    """``applied_batches``/``rejected_batches`` of the shared store: keyed by batch id
    store-wide, with the spool that decided it. Two hosts may carry the same batch (a spool
    copied with its data dir): the second to record it finds the row taken and its copy is
    rolled back as a duplicate."""

    bad_data = _BAD_DATA
    #: Runs of appends together (store.apply.bulk): ids are drawn from the identity sequence
    #: up front (``message_ids``), and a batch another host decided meanwhile sends the run
    #: back to the op-at-a-time path (``record_applied_many``).
    bulk_append = True

    def __init__(self, spool_id: str):
        self.spool_id = spool_id
        #: ``ask_decided``'s batches and its queued read.
        self._asked: tuple[list[str], Any] | None = None
        #: Per identity sequence a bulk run draws from (``_SEQUENCES``): ``[value before
        #: the run's first draw (None: never drawn), values the run drew]``.
        self._drawn: dict[str, list] = {}

    def open_run(self) -> None:
        self._drawn = {}

    def drew(self, table: str, n: int) -> None:
        if table in self._drawn:
            self._drawn[table][1] += n

    def give_back(self, conn: PgConnection) -> None:
        """Return the ids a refused run drew (``Ledger.give_back``), in one round trip.

        A sequence is not rolled back with the savepoint, so without this the rows after a
        refused run would start after a gap whose size depends on how the spool was chunked
        (a replay would number them differently). Each sequence is set back to its value
        before the run only when every value drawn since is provably the run's own: its
        ``last_value`` equals that value plus the draws counted (a draw by another writer,
        or one the run did not count, makes it larger; then the gap stays, as it does for
        any op rolled back on a shared store). The check and the reset run under ``ALTER
        SEQUENCE``'s lock, which blocks every other ``nextval`` on it until this chunk ends
        (only after a refused run), so no draw can slip between them. Sequences are locked
        in ``_SEQUENCES`` order, the same on every host. Needs the sequences' owner (the
        role that created the schema). Raises the store error tree."""
        steps = []
        for table in _SEQUENCES:
            before, count = self._drawn.get(table, (None, 0))
            if count <= 0:
                continue
            base = before or 0  # identity values start at 1: 0 means none drawn yet
            reset = f"setval(s, {int(base)}, true)" if base > 0 else "setval(s, 1, false)"
            steps.append(
                f"s := pg_get_serial_sequence('{table}', 'id')::regclass; "
                "EXECUTE 'ALTER SEQUENCE ' || s::text || ' NO CYCLE'; "  # the lock, no change
                f"IF coalesce(pg_sequence_last_value(s), 0) = {int(base + count)} "
                f"THEN PERFORM {reset}; END IF;"
            )
        self._drawn = {}
        if steps:
            conn.execute("DO $$ DECLARE s regclass; BEGIN " + " ".join(steps) + " END $$")

    def ask_decided(self, conn: PgConnection, batches: list[str]) -> None:
        """Queue ``decided``'s read of ``batches`` (``PgConnection.defer``), so it goes with
        the chunk's first statements; ``decided`` of the same list then reads its rows."""
        self._asked = (
            batches,
            conn.defer(
                "SELECT batch_id, digest FROM applied_batches WHERE batch_id = ANY(?1) UNION ALL "
                "SELECT batch_id, NULL FROM rejected_batches WHERE batch_id = ANY(?1)",
                (batches,),
            ),
        )

    def decided(self, conn: PgConnection, batches: list[str]) -> dict[str, str | None]:
        # Every batch of the chunk in one round trip (or none of its own: ``ask_decided``).
        if self._asked is None or self._asked[0] != batches:
            self.ask_decided(conn, batches)
        rows, self._asked = self._asked[1], None
        return {r[0]: r[1] for r in rows}

    def record_applied(
        self, conn: PgConnection, batch: str, position: str, now: float, digest: str
    ) -> bool:
        conn.execute(
            "INSERT INTO applied_batches (batch_id, spool_id, position, applied_at, digest) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (batch, self.spool_id, position, now, digest),
        )
        return conn.changes() > 0

    def message_ids(self, conn: PgConnection, n: int) -> list[int]:
        """``n`` ids from ``messages``' identity sequence, ascending, in one round trip.
        Within a session they follow commit order: the chunk holds the session's lock."""
        return self._ids(self._ask_ids(conn, n), n)

    def numbers(
        self, conn: PgConnection, n: int, batches: list[str]
    ) -> tuple[list[int], dict[str, int]]:
        """``message_ids`` and ``batch_refs`` (``Ledger.numbers``) in one round trip: both
        statements queued, in that order (``give_back`` counts on the ids' statement reading
        the sequences before the batch numbers are drawn)."""
        asked_ids = self._ask_ids(conn, n)
        asked_refs = self._ask_refs(conn, batches)
        ids = self._ids(asked_ids, n)
        return ids, self._refs(asked_refs, batches)

    def _ask_ids(self, conn: PgConnection, n: int) -> Any:
        if n <= 0:
            return None
        return conn.defer(
            "SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id, "
            "(SELECT pg_sequence_last_value(pg_get_serial_sequence('usage', 'id')::regclass)), "
            "(SELECT pg_sequence_last_value(pg_get_serial_sequence('batches', 'id')::regclass)) "
            "FROM generate_series(1, ?) ORDER BY id",
            (n,),
        )

    def _ids(self, asked: Any, n: int) -> list[int]:
        if asked is None:
            return []
        rows = asked.fetchall()
        ids = [r[0] for r in rows]
        # The values before the run's draws (``give_back``; read once per statement): the run
        # draws usage and batch ids only after this statement. Had another writer drawn
        # between, ``give_back`` finds more values taken than counted and keeps the gap.
        self._drawn = {
            "messages": [ids[0] - 1, n],
            "usage": [rows[0][1], 0],
            "batches": [rows[0][2], 0],
        }
        return ids

    def batch_refs(self, conn: PgConnection, batches: list[str]) -> dict[str, int]:
        """``{batch id: number}`` (``store.apply.batches``) in one round trip: the new ids
        inserted in the order given (each gets the next identity value), the others read.
        The statement's snapshot does not see its own inserts, so each id comes from
        exactly one of the two arms."""
        asked = self._ask_refs(conn, batches)
        return self._refs(asked, batches)

    def _refs(self, asked: Any, batches: list[str]) -> dict[str, int]:
        if asked is None:
            return {}
        # every row offered takes a value, even one ON CONFLICT then drops
        self.drew("batches", len(batches))
        return dict(asked.fetchall())

    def _ask_refs(self, conn: PgConnection, batches: list[str]) -> Any:
        if not batches:
            return None
        return conn.defer(
            "WITH added AS (INSERT INTO batches (batch_id) "
            "SELECT b FROM unnest(?1::text[]) WITH ORDINALITY AS u(b, n) ORDER BY n "
            "ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id, id) "
            "SELECT batch_id, id FROM added UNION ALL "
            "SELECT batch_id, id FROM batches WHERE batch_id = ANY(?1::text[])",
            (batches,),
        )

    def insert_rows(self, conn: PgConnection, rows: list[tuple]) -> None:
        """The run's message rows in one ``COPY … FROM STDIN`` (one statement, parsed and
        planned once, where an INSERT per row is parsed and planned per row). A value the
        server refuses fails the COPY (class 22/23: ``BadDataError``), and the run goes op
        at a time. Up to ``INSERT_MAX_ROWS`` rows (a turn or two of one agent) go in one
        multi-row ``INSERT`` instead, queued (``PgConnection.defer``) to go with the run's
        other writes and its ledger insert in one round trip: a COPY cannot share a query,
        and costs two more (the statements before it, then its own)."""
        if len(rows) > INSERT_MAX_ROWS:
            conn.copy_rows("messages", STATE_ID_COLUMNS, rows)
            return
        if rows:
            marks = ", ".join("?" for _ in STATE_ID_COLUMNS)
            conn.defer(
                f"INSERT INTO messages ({', '.join(STATE_ID_COLUMNS)}) VALUES "
                + ", ".join(f"({marks})" for _ in rows),
                [v for row in rows for v in row],
            )

    def record_applied_many(
        self, conn: PgConnection, rows: list[tuple[str, str, float, str]]
    ) -> bool:
        """One statement for the run's batches; False when any was taken meanwhile (another
        host carrying the same batch), so the caller rolls the run back."""
        if not rows:
            return True
        batches, positions, times, digests = (list(c) for c in zip(*rows))
        conn.execute(
            "INSERT INTO applied_batches (batch_id, spool_id, position, applied_at, digest) "
            "SELECT b, ?, p, t, d FROM unnest(?::text[], ?::text[], ?::float8[], ?::text[]) "
            "AS u(b, p, t, d) ON CONFLICT DO NOTHING",
            (self.spool_id, batches, positions, times, digests),
        )
        return conn.changes() == len(rows)

    def record_rejected(
        self, conn: PgConnection, batch: str, position: str, reason: str, now: float
    ) -> None:
        conn.execute(
            "INSERT INTO rejected_batches (batch_id, spool_id, position, reason, rejected_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (batch, self.spool_id, position, reason, now),
        )


def apply_chunk(
    conn: PgConnection,
    spool_id: str,
    entries: Sequence[EntryLike],
    on_reject: RejectFn,
    holder: str | None = None,
) -> ChunkResult:
    """Apply ``entries`` (consecutive, in spool order) and move ``spool_id``'s cursor past the
    last, with its proof, in one transaction (the op rules: ``store.apply.chunk.apply_entries``).
    ``holder``: the claim token the writer holds (``store.postgres.claims``), renewed in the
    transaction; None applies unclaimed (tests' bare backend). Raises the store error tree;
    then nothing is committed (``TransientError`` for a deadlock or a lost connection: retry
    the chunk; ``CorruptError`` while the store is halted; ``SpoolClaimedError`` when another
    holder has the claim now)."""
    if not entries:
        return ChunkResult()
    now = time.time()
    ledger = PgLedger(spool_id)
    # The transaction's first statements go in one round trip (``PgConnection.defer``), in
    # this order on the server; their answers are checked in the same order after it, and
    # a refusal rolls back everything they did (a renewed claim, locks taken).
    conn.defer("BEGIN IMMEDIATE")
    try:
        halted = halt.ask(conn)
        renewed = claims.renewal(conn, spool_id, holder) if holder is not None else None
        ask_locks(conn, entries)
        floor_asked = later(conn, "SELECT ack_us FROM spool_cursor WHERE spool_id = ?", (spool_id,))
        batches = chunk_batches(entries)
        if batches:
            ledger.ask_decided(conn, batches)
        halt.check(conn, halted)  # damage found by amcheck on any host stops every writer
        if holder is not None:  # no chunk applies under a lost claim
            claims.fence(conn, spool_id, holder, renewed=renewed)
        lock_sessions(conn, entries, named_held=True)
        floor = floor_asked.fetchone()
        clock = order.Clock(order.spool_tag(spool_id), floor[0] if floor else None)
        result = apply_entries(conn, entries, now, on_reject, ledger, clock)
        later(
            conn,
            'INSERT INTO spool_cursor (spool_id, segment, "offset", proof_offset, proof, '
            "updated_at, ack_us) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (spool_id) DO UPDATE SET segment = excluded.segment, "
            '"offset" = excluded."offset", proof_offset = excluded.proof_offset, '
            "proof = excluded.proof, updated_at = excluded.updated_at, ack_us = excluded.ack_us",
            (spool_id, *cursor_values(entries), now, clock.floor_us),
        )
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result
