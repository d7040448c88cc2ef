"""Applying a chunk of spool entries in one transaction, with the cursor.

Exactly-once rests on two facts (docs/architecture.md, "The cursor commits with the data"):
1. the spool cursor is updated in the same ``BEGIN IMMEDIATE`` transaction as the rows, so a
   crash replays at most the uncommitted chunk;
2. every op is recorded in ``applied_batches`` by batch id in that same transaction, so a
   replayed (or re-sent) batch is skipped.
Each op runs inside a SAVEPOINT: an invalid op is rolled back alone and handed to
``on_reject`` (which quarantines it durably *before* the commit), and the rest of the chunk
is applied.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import apsw

from quill.spool.record import id_size_problem
from quill.store.apply import bulk as bulk_append
from quill.store.apply import deletes, order
from quill.store.apply.chunking import (
    ChunkResult,
    EntryLike,
    RejectFn,
    arrival_time,
    chunk_batches,
    cursor_values,
)
from quill.store.apply.later import later
from quill.store.apply.ledger import Ledger, SqliteLedger, op_digest
from quill.store.apply.sessions import APPLIERS
from quill.store.errors import InvalidOpError
from quill.store.sqlite.connection import transaction


def read_cursor(conn: apsw.Connection) -> tuple[int, int] | None:
    """The committed spool cursor ``(segment, offset)``, or None before the first chunk."""
    row = conn.execute('SELECT segment, "offset" FROM spool_cursor WHERE id = 1').fetchone()
    return (row[0], row[1]) if row else None


def read_cursor_proof(conn: Any) -> tuple[int, int, int | None, str | None] | None:
    """The committed cursor with its proof ``(segment, offset, proof_offset, proof)``
    (``spool.cursor_proof``; the proof is None for a cursor written before it was kept), or
    None before the first chunk."""
    row = conn.execute(
        'SELECT segment, "offset", proof_offset, proof FROM spool_cursor WHERE id = 1'
    ).fetchone()
    return tuple(row) if row else None


def apply_chunk(
    conn: apsw.Connection, entries: Sequence[EntryLike], on_reject: RejectFn
) -> ChunkResult:
    """Apply ``entries`` (consecutive, in spool order) to the SQLite store and advance the
    cursor past the last, in one ``BEGIN IMMEDIATE`` transaction.

    Raises the store error tree on SQLite failures; then nothing of the chunk is committed.
    """
    if not entries:
        return ChunkResult()
    now = time.time()
    with transaction(conn):
        floor = conn.execute("SELECT ack_us FROM spool_cursor WHERE id = 1").fetchone()
        clock = order.Clock(0, floor[0] if floor else None)  # one spool: no tie-break tag
        result = apply_entries(conn, entries, now, on_reject, SqliteLedger(), clock)
        # The proof commits with the cursor: a resumed cursor is checked against it.
        conn.execute(
            'INSERT INTO spool_cursor (id, segment, "offset", proof_offset, proof, updated_at, '
            "ack_us) VALUES (1, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET segment = excluded.segment, "
            '"offset" = excluded."offset", proof_offset = excluded.proof_offset, '
            "proof = excluded.proof, updated_at = excluded.updated_at, ack_us = excluded.ack_us",
            (*cursor_values(entries), now, clock.floor_us),
        )
    return result


def first_run(
    entries: Sequence[EntryLike], now: float, ledger: Ledger
) -> list[bulk_append.Prepared]:
    """The chunk's first run of appends as ``apply_entries`` takes it when no batch of the
    chunk was decided before (the usual case), its ops prepared; store-free. Pass it to
    ``apply_entries`` (``ahead``), which reuses an op prepared here when it takes the same
    entry into a run, so the checks run once per op."""
    if not ledger.bulk_append:
        return []
    run: list[bulk_append.Prepared] = []
    decided: dict[str, str | None] = {}
    for entry in entries:
        prepared = _bulk_candidate(entry, now, decided, ledger, (0, 0, 0))
        if prepared is None and run:
            break
        if prepared is not None:
            run.append(prepared)
    return run


def apply_entries(
    conn: Any,
    entries: Sequence[EntryLike],
    now: float,
    on_reject: RejectFn,
    ledger: Ledger,
    clock: order.Clock | None = None,
    ahead: Sequence[bulk_append.Prepared] = (),
) -> ChunkResult:
    """Apply ``entries`` inside the caller's transaction, on either backend: the one copy of
    the op rules (docs/backends.md, "The contract"). A batch already decided — earlier, or
    earlier in this chunk — is a duplicate; a damaged record, an unknown op, a non-string
    batch id or non-object data is refused; each op runs in a SAVEPOINT, so an op that raises
    ``InvalidOpError`` or one of ``ledger.bad_data`` is rolled back alone, recorded as
    refused, handed to ``on_reject`` (which quarantines it before the commit), and the rest
    applied. Any other error rolls the op back and propagates (the chunk is not committed).
    With ``ledger.bulk_append`` (both backends), consecutive plain ``messages.append`` ops
    are applied as one run (``store.apply.bulk``) with the same outcome, row for row; an op
    the store refuses, or a batch another writer decided meanwhile, sends its run back to the
    op-at-a-time path above.
    ``clock`` (``store.apply.order.Clock``, this spool's) gives each entry its order key, in
    spool order, whatever its outcome, so a replay computes the same keys; the caller stores
    ``clock.floor_us`` with the cursor. None: a fresh clock (tag 0, floor 0). ``ahead``:
    ``first_run``'s ops, prepared for this chunk at the same ``now``."""
    clock = clock if clock is not None else order.Clock(0, None)
    result = ChunkResult()
    batches = chunk_batches(entries)
    decided = ledger.decided(conn, batches) if batches else {}
    run: list[bulk_append.Prepared] = []
    keys = {id(e): clock.key(e.record, e.position) for e in entries}
    alone = False  # an op of the chunk was applied (or refused) on its own
    memo = {id(op.entry): op for op in ahead}
    for entry in entries:
        key = keys[id(entry)]
        prepared = (
            _bulk_candidate(entry, now, decided, ledger, key, memo.get(id(entry)))
            if ledger.bulk_append
            else None
        )
        if prepared is not None:
            run.append(prepared)
            continue
        _apply_run(conn, run, now, on_reject, result, decided, ledger)
        run = []
        alone = True
        _apply_entry(conn, entry, now, on_reject, result, decided, ledger, key)
    if run and not alone:
        ledger.last_run()
    _apply_run(conn, run, now, on_reject, result, decided, ledger)
    return result


def _bulk_candidate(
    entry: EntryLike,
    now: float,
    decided: dict[str, str | None],
    ledger: Ledger,
    key: order.OrderKey,
    done: bulk_append.Prepared | None = None,
) -> bulk_append.Prepared | None:
    """``entry`` prepared for a bulk run (and its batch marked decided), or None when it is
    not an undecided ``messages.append`` whose data passes the store-free checks: then it is
    applied alone by ``_apply_entry``, after the run so far (so is an append with
    ``order_keys``, whose rows each take their own place, ``store.apply.placed``). ``done``:
    ``entry`` as ``first_run`` prepared it (the same checks passed, the same ``now``)."""
    rec = entry.record
    if rec is None or rec.get("op") != "messages.append":
        return None
    batch, data = rec.get("batch"), rec.get("data")
    if (
        not isinstance(batch, str)
        or batch in decided
        or not isinstance(data, dict)
        or data.get("order_keys") is not None  # rows placed and settled one by one (placed.py)
        or id_size_problem(batch, "batch id")
    ):
        return None
    if done is not None:
        prepared: bulk_append.Prepared | None = done
    else:
        prepared = bulk_append.prepare(
            entry,
            data,
            batch,
            op_digest(rec["op"], data),
            arrival_time(rec, now),
            (InvalidOpError, *ledger.bad_data),
        )
    if prepared is not None:
        prepared.key = key
        decided[batch] = prepared.digest
    return prepared


def _apply_run(
    conn: Any,
    run: list[bulk_append.Prepared],
    now: float,
    on_reject: RejectFn,
    result: ChunkResult,
    decided: dict[str, str | None],
    ledger: Ledger,
) -> None:
    """Apply a run of prepared appends together in one SAVEPOINT; when the store refuses any
    of them, roll the run back and apply its ops one at a time (the refused one is then
    quarantined alone with its reason, the others applied as before)."""
    if not run:
        return
    later(conn, "SAVEPOINT bulk")  # sent with the run's first read
    try:
        written = bulk_append.apply_run(conn, run, now, ledger)
    except (InvalidOpError, bulk_append.RunConflict, *ledger.bad_data):
        written = None
    except BaseException:
        if conn.in_transaction and not getattr(conn, "closed", False):
            _release(conn, "bulk", rollback=True)
        raise
    if written is None:
        _release(conn, "bulk", rollback=True)
        # Ids the run drew from a sequence (PostgreSQL) go back: the ops below are numbered
        # as if they had never been in a run, as a replay in other chunks numbers them.
        ledger.give_back(conn)
        for op in run:
            del decided[op.batch]
        for op in run:
            _apply_entry(conn, op.entry, now, on_reject, result, decided, ledger, op.key)
        return
    _release(conn, "bulk", rollback=False)
    for op, rows in zip(run, written):
        result.applied += 1
        result.rows += rows
        result.batches.append(op.batch)


def _apply_entry(
    conn: Any,
    entry: EntryLike,
    now: float,
    on_reject: RejectFn,
    result: ChunkResult,
    decided: dict[str, str | None],
    ledger: Ledger,
    key: order.OrderKey,
) -> None:
    if entry.record is None:
        damage = entry.damage
        on_reject(entry, getattr(damage, "reason", "damaged"), str(damage))
        result.rejected += 1
        return
    rec = entry.record
    batch = rec["batch"]
    digest = op_digest(rec["op"], rec["data"])
    too_long = id_size_problem(batch, "batch id") if isinstance(batch, str) else None
    if too_long:
        # Refused before the ledger: no backend can key a row by it (PostgreSQL's index
        # refuses it, SQLSTATE 54000), so it is quarantined without a rejected_batches row.
        on_reject(entry, "invalid-batch", too_long)
        result.rejected += 1
        return
    if isinstance(batch, str):
        if batch in decided:
            prior = decided[batch]
            if prior is not None and prior != digest:
                # Same batch id, other content: not a retry. Counting it as a duplicate would
                # drop new content while its producer is told "applied"; quarantine it instead.
                on_reject(
                    entry,
                    "batch-id-reused",
                    f"batch id {batch!r} was already applied with other "
                    "content; a retry must resend the same op and data, "
                    "new content needs a new batch id",
                )
                result.rejected += 1
                return
            result.duplicates += (
                1  # already decided: applied (same content), or refused for its data
            )
            return
        decided[batch] = (
            digest  # decided now, whatever the outcome: a repeat later in the chunk is too
        )
    applier = APPLIERS.get(rec["op"])
    if applier is None:
        on_reject(
            entry, "unsupported-op", f"op {rec['op']!r} is not applied by this version of Quill"
        )
        result.rejected += 1
        return
    data = rec["data"]
    later(conn, "SAVEPOINT op")  # sent with the op's first statement
    try:
        if not isinstance(batch, str):
            raise InvalidOpError("invalid-batch", "batch id must be a string")
        if not isinstance(data, dict):
            raise InvalidOpError("invalid-data", "op data must be a JSON object")
        with order.applying(key):
            # decided before a delete of its session: applied as nothing (deletes.stale)
            rows = (
                0
                if deletes.stale(conn, rec["op"], data)
                else applier(conn, data, batch, arrival_time(rec, now))
            )
        if not ledger.record_applied(conn, batch, str(entry.position), now, digest):
            _release(conn, rollback=True)
            result.duplicates += 1
            return
    except (InvalidOpError, *ledger.bad_data) as exc:
        _release(conn, rollback=True)
        reason, detail = (
            (exc.reason, exc.detail)
            if isinstance(exc, InvalidOpError)
            else (
                getattr(exc, "quarantine_reason", "invalid-data"),
                f"{type(exc).__name__}: {exc}",
            )
        )
        if isinstance(batch, str):
            ledger.record_rejected(conn, batch, str(entry.position), reason, now)
        on_reject(entry, reason, detail)
        result.rejected += 1
        return
    except BaseException:
        if conn.in_transaction and not getattr(
            conn, "closed", False
        ):  # a lost connection has none left
            _release(conn, rollback=True)
        raise
    _release(conn, rollback=False)
    result.applied += 1
    result.rows += rows
    result.batches.append(batch)


def _release(conn: Any, name: str = "op", *, rollback: bool) -> None:
    """End savepoint ``name``, rolled back to first when ``rollback``. The ``RELEASE`` is
    queued (``later``): it cannot fail once the scope's last statement was answered."""
    if rollback:
        conn.execute(f"ROLLBACK TO {name}")
    later(conn, f"RELEASE {name}")
