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

from quill.store.apply import bulk, order
from quill.store.apply.chunk import apply_entries, first_run
from quill.store.apply.chunking import (
    ChunkResult,
    EntryLike,
    RejectFn,
    chunk_batches,
    cursor_values,
)
from quill.store.apply.later import later
from quill.store.apply.rules import session_id_problem
from quill.store.contract import BadDataError
from quill.store.postgres import claims, halt
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.ledger import PgLedger

_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(x, 0) AS k "
    "FROM unnest(?::text[]) AS x ORDER BY k) AS keys"
)


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
    holder has the claim now).

    A chunk that is one run of appends (``PgLedger.last_run``) sends its writes, its ledger
    insert, its cursor and the ``COMMIT`` in one round trip. When the server refuses that
    query for the data (class 22/23: a value, or a batch another host decided meanwhile)
    nothing of the chunk is committed, and it is applied again on a checked ledger, whose
    waited ledger insert rolls the run back alone and applies its ops one at a time (the
    refused op quarantined alone, a batch decided elsewhere skipped as a duplicate). The
    ids the first try drew go back first (``PgLedger.give_back``), so the chunk's rows are
    numbered as when the checked path applies it at once."""
    if not entries:
        return ChunkResult()
    now = time.time()
    ledger = PgLedger(spool_id, unwaited=True)
    try:
        return _apply(conn, spool_id, entries, on_reject, holder, now, ledger)
    except BadDataError:
        if not ledger.unwaited_sent:
            raise
    ledger.give_back(conn)  # in a transaction of its own: the chunk's was rolled back
    return _apply(conn, spool_id, entries, on_reject, holder, now, PgLedger(spool_id))


def _apply(
    conn: PgConnection,
    spool_id: str,
    entries: Sequence[EntryLike],
    on_reject: RejectFn,
    holder: str | None,
    now: float,
    ledger: PgLedger,
) -> ChunkResult:
    """``apply_chunk``'s one transaction, with ``ledger``."""
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
        ledger.ask_bases(conn)
        # The first run's reads go too, after the locks (``PgConnection.ahead``): the run
        # takes their rows when it is the run they were asked for (no batch of it decided
        # before) and nothing was sent in between.
        run = first_run(entries, now, ledger)
        if run:
            with conn.ahead():
                bulk.ask_reads(conn, run)
        halt.check(conn, halted)  # damage found by amcheck on any host stops every writer
        if holder is not None:  # no chunk applies under a lost claim
            claims.fence(conn, spool_id, holder, renewed=renewed)
        lock_sessions(conn, entries, named_held=True)
        floor = floor_asked.fetchone()
        clock = order.Clock(order.spool_tag(spool_id), floor[0] if floor else None)
        result = apply_entries(conn, entries, now, on_reject, ledger, clock, run)
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
