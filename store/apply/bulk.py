"""Applying a run of consecutive plain ``messages.append`` ops together (both writers).

Why: a chunk of 500 message rows is ~50 appends, and the op-at-a-time path pays, per op, two
SAVEPOINTs, an ext-id probe, an id probe, a tool-result probe, a usage id probe, one
``executemany`` and one ``applied_batches`` insert (a large share of a drain's Python time,
spread over such pieces; bench/RESULTS.md). Here a run of appends is validated
in Python first (``prepare``: no store access), then written with one ext-id probe and one
tool-result check per session, one id probe, one ``executemany`` of every message row and one
of every ``applied_batches`` row (PostgreSQL: one COPY of the rows), all inside one
SAVEPOINT. On PostgreSQL that turns ~10
round trips per op into ~1.3 (bench/RESULTS.md).

Invariant: the store after ``apply_run`` is row for row the store the op-at-a-time path
(``transcript_ops.messages_append`` per op, in spool order) would leave — same message ids,
arrival times, usage rows, session rows, blobs (on PostgreSQL the same rows with ids from the
same sequences; a refused run gives back the ids it drew, ``Ledger.give_back``, so the ids
after it do not depend on where the run began). How each step keeps it:

* order: each op's rows take the ``seq`` labels ``order.plan`` gives the run's ops of their
  session together: the next labels after its last row, or for an op acknowledged before
  rows another host applied first (a late op) labels in the gap before them, in the same
  order ``order.place`` gives op by op (the label values may differ: the gap is shared
  among the run's late rows at once). Labels are planned before any row of the run is
  written, with the session locked (PostgreSQL) or the store written by this one writer;
* ids: SQLite gives a new row max(id) + 1 (or the delete floor + 1, ``next_id``), so an op's
  rows take consecutive ids after the previous op's; PostgreSQL's identity sequence gives
  increasing ids, and within a session they follow commit order because the chunk holds the
  session's lock. Either way they are drawn up front (``Ledger.message_ids``) and written
  explicitly, so usage rows can name them without reading them back;
* ext-id dedupe: the ids each session held before the run, plus those the run's earlier ops
  (and earlier messages of the same op) added, exactly the ``seen`` set of each op;
* session rows, reopening, blobs and usage run per op in spool order (usage reads the session
  row as that op left it), with ``store.apply.usage.record_messages`` itself; only the session
  upserts and reopenings that cannot change the row are skipped (see ``apply_run``);
* the one-live-tool-result rule: checked per session on the union of the run's tool-result
  ids after all rows are in. Counts only grow in a run of appends, so the union passes
  exactly when every op's own check would have passed.
If any op's data is refused in the store phase (``InvalidOpError``, a usage error, a value
the database refuses), or a batch was decided by another host meanwhile (``RunConflict``),
``apply_run`` raises and the caller rolls the whole run back and applies its ops one at a
time, so the refused op is quarantined alone with its own reason (and a batch decided
elsewhere counts as a duplicate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from quill.store.apply import blobs, deletes, order, tool_names, usage
from quill.store.apply.message_checks import check_append
from quill.store.apply.message_rows import (
    ID_FLOOR_KEY,
    ask_held_ext_ids,
    check_tool_results,
    cut_rows,
    held_of,
    result_ids,
)
from quill.store.apply.normalize import ROW_COLUMNS
from quill.store.apply.rules import (
    ask_compressed,
    backdate_start,
    compressed_among,
    ensure_session,
    refuse_if_compressed,
    reopen_if_automatic,
)

_EXT = ROW_COLUMNS.index("ext_id")
_TS = ROW_COLUMNS.index("ts")
_MAX_ROWID = 2**63 - 1


@dataclass(slots=True)
class Prepared:
    """One validated ``messages.append`` op of a run: its spool entry, batch id, content digest
    (``apply.op_digest``), session id, ``source`` (or None), arrival time (epoch s), message
    rows (``ROW_COLUMNS`` order), the message dicts as sent, and the blob payloads cut out."""

    entry: Any
    batch: str
    digest: str
    sid: str
    source: str | None
    arrived_at: float
    rows: list[tuple]
    msgs: list
    found: dict[str, str]
    key: tuple[int, int, int] = (0, 0, 0)  # its order key (store.apply.order), set by the chunk
    revise: bool = False  # last copy wins for held ids (store.apply.revise): not run in bulk
    deletions_seen: int | None = None  # deletes.stale: an op decided before a delete: op by op


def prepare(
    entry: Any,
    data: dict,
    batch: str,
    digest: str,
    arrived_at: float,
    refused: tuple[type[BaseException], ...],
) -> Prepared | None:
    """The content check of ``messages_append`` on one op (``op_checks.check_append`` with
    usage left to the store phase, as the applier runs it), normalising its messages on the
    way. Returns the op ready for ``apply_run``, or None when the check fails with one of
    ``refused`` (the caller then applies the op alone, which refuses it with its reason).
    Other exceptions propagate. No store access."""
    found: dict[str, str] = {}

    def rows(messages: list) -> list[tuple]:
        out, cut = cut_rows(messages, arrived_at)
        found.update(cut)
        return out

    try:
        checked = check_append(data, rows, usage=False)
        seen = deletes.deletions_seen(data)
    except refused:
        return None
    return Prepared(
        entry,
        batch,
        digest,
        data["session_id"],
        data.get("source"),
        arrived_at,
        checked,
        data["messages"],
        found,
        revise=bool(data.get("revise")),
        deletions_seen=seen,
    )


def _stale(conn: Any, run: list[Prepared]) -> bool:
    """Whether an op of ``run`` was decided before a delete of its session (``deletes.stale``:
    its ``deletions_seen`` is lower than the session's deletions; one query per run, and none
    when no op carries the field). Nothing in a run of appends deletes a session."""
    fenced = [(op.sid, op.deletions_seen) for op in run if op.deletions_seen is not None]
    if not fenced:
        return False
    counts = deletes.deletion_counts(conn, [sid for sid, _ in fenced])
    return any(counts[sid] > seen for sid, seen in fenced)


def _ask_seen(conn: apsw.Connection, run: list[Prepared]) -> dict[str, list]:
    """Per session of the run: the reads (queued, ``store.apply.later``) of the ext ids it
    already holds among those the run sends (``held_of`` gives them)."""
    wanted: dict[str, set[str]] = {}
    for op in run:
        ids = wanted.setdefault(op.sid, set())
        ids.update(r[_EXT] for r in op.rows if r[_EXT] is not None)
    return {sid: ask_held_ext_ids(conn, sid, ids) for sid, ids in wanted.items()}


def _labels(
    run: list[Prepared], conn: Any, counts: list[int], last: dict[str, Any]
) -> list[list[int]] | None:
    """The ``seq`` labels of each op's ``counts[i]`` new rows (``order.plan`` per session:
    after the session's last row, or — an op acknowledged before rows another host's writer
    applied first — in the gap before them), or None when a session's ops are not in
    increasing key order (never on one spool, whose keys only grow): the op-at-a-time path
    places them. ``last``: per session, ``order.ask_last_row`` sent before the run wrote."""
    by_sid: dict[str, list[int]] = {}
    for i, op in enumerate(run):
        by_sid.setdefault(op.sid, []).append(i)
    out: list[list[int]] = [[] for _ in run]
    for sid, idx in by_sid.items():
        planned = order.plan(conn, sid, [(run[i].key, counts[i]) for i in idx], last[sid])
        if planned is None:
            return None
        for i, labels in zip(idx, planned):
            out[i] = labels
    return out


class RunConflict(Exception):
    """A batch of the run was decided by another writer meanwhile (its ``applied_batches``
    row is taken): the caller rolls the run back and applies its ops one at a time, which
    counts that one as a duplicate."""


def sqlite_ids(conn: apsw.Connection, n: int) -> list[int] | None:
    """The ids SQLite (or ``next_id``'s delete floor) gives the next ``n`` inserted messages,
    or None when they would pass SQLite's largest rowid."""
    top, floor = conn.execute(
        f"SELECT (SELECT max(id) FROM messages), (SELECT CAST(value AS INTEGER) FROM "
        f"state_meta WHERE key = '{ID_FLOOR_KEY}')"
    ).fetchone()
    top = top or 0
    first = floor + 1 if floor is not None and top < floor else top + 1
    return None if first + n >= _MAX_ROWID else list(range(first, first + n))


def ask_reads(conn: Any, run: list[Prepared]) -> tuple[dict[str, list], list, dict[str, Any]]:
    """The run's reads that need nothing but the run itself, queued (``store.apply.later``)
    to go in one round trip: per session the ext ids it holds among the run's
    (``_ask_seen``), the compression ends (``ask_compressed``) and per session its last row
    (``order.ask_last_row``). Nothing of the run is written before them, so they read what
    the op-at-a-time reads would. The same statements for the same run each time: a
    PostgreSQL chunk sends them ahead with its first round trip (``store.postgres.apply``)."""
    sids = {op.sid for op in run}
    return (
        _ask_seen(conn, run),
        ask_compressed(conn, sids),
        {sid: order.ask_last_row(conn, sid) for sid in sorted(sids)},
    )


def apply_run(conn: Any, run: list[Prepared], now: float, ledger: Any) -> list[int] | None:
    """Write ``run`` (consecutive appends in spool order, each batch undecided) inside the
    caller's transaction, and record each batch in ``applied_batches`` (``applied_at`` =
    ``now``, epoch s) through ``ledger`` (``store.apply.ledger.Ledger``: its ``message_ids``,
    ``batch_refs`` and ``record_applied_many``). Returns the rows each op inserted, or None —
    having written nothing — when the ledger has no ids for them, a session's ops are out of
    key order or a ``revise`` op sends a held id (``store.apply.revise``; the caller applies
    the ops one at a time). Raises ``InvalidOpError`` or a data error of
    ``ledger.bad_data`` when an op is refused, ``RunConflict`` when a batch was decided
    meanwhile: the caller must roll back what was written (it runs in a SAVEPOINT the caller
    owns)."""
    if _stale(conn, run):  # applied as nothing, op by op (deletes.stale)
        return None
    ledger.open_run()
    asked_seen, asked_compressed, asked_last = ask_reads(conn, run)
    seen = {sid: held_of(asked) for sid, asked in asked_seen.items()}
    fresh_of: list[tuple[list[tuple], list]] = []  # per op: its new rows and their messages
    for op in run:
        held = seen[op.sid]
        fresh, fresh_msgs = [], []
        for row, msg in zip(op.rows, op.msgs):
            ext = row[_EXT]
            if ext is not None:
                if ext in held:
                    if op.revise:  # a later copy of a held message: revised op by op
                        return None
                    continue
                held.add(ext)
            fresh.append(row)
            fresh_msgs.append(msg)
        fresh_of.append((fresh, fresh_msgs))
    filled = tool_names.fill_run(conn, [(op.sid, f) for op, (f, _) in zip(run, fresh_of)])
    fresh_of = [(rows, msgs) for rows, (_, msgs) in zip(filled, fresh_of)]
    # Before any id is taken (a PostgreSQL sequence is not rolled back); one query per run.
    fresh_sids = {op.sid for op, (f, _) in zip(run, fresh_of) if f}
    for sid in sorted(compressed_among(conn, fresh_sids, asked_compressed)):
        refuse_if_compressed(conn, sid, "messages.append")
    labels_of = _labels(run, conn, [len(f) for f, _ in fresh_of], asked_last)
    if labels_of is None:
        return None
    # numbered in op order, as the op-at-a-time path does (batches.ref at each op's insert);
    # the ids' values are needed here only when usage rows name them
    numbered = ledger.numbers(
        conn,
        sum(len(f) for f, _ in fresh_of),
        [op.batch for op, (f, _) in zip(run, fresh_of) if f],
        named=any(usage.carries_usage(m) for _, msgs in fresh_of for m in msgs),
    )
    if numbered is None:
        return None
    ids, refs = numbered
    next_id = 0  # index into ids
    values: list[tuple] = []
    written: list[int] = []
    tool_ids: dict[str, set[str]] = {}
    # A session's row changes at most at its first ensure and its first ensure with a source
    # (a placeholder takes the first source it is given), and an end cleared once stays
    # cleared: nothing in a run of appends ends a session. The others are no-ops, skipped.
    sourced: dict[str, bool] = {}  # session id -> an ensure of this run gave it a source
    reopened: set[str] = set()
    starts: dict[str, float] = {}  # session id -> its earliest new message time in this run
    for op, (fresh, fresh_msgs), labels in zip(run, fresh_of, labels_of):
        blobs.put_many(conn, op.found, now=op.arrived_at)
        if op.sid not in sourced or (op.source is not None and not sourced[op.sid]):
            ensure_session(conn, op.sid, op.arrived_at, op.source)
            sourced[op.sid] = sourced.get(op.sid, False) or op.source is not None
        if fresh and op.sid not in reopened:
            reopen_if_automatic(conn, op.sid)
            reopened.add(op.sid)
        if fresh:
            earliest = min(r[_TS] for r in fresh)
            starts[op.sid] = min(earliest, starts.get(op.sid, earliest))
        first = next_id
        for i, (row, seq) in enumerate(zip(fresh, labels)):
            values.append(
                (ids[first + i], op.sid, *row, op.arrived_at, refs[op.batch], "live", None)
                + (seq, seq, *op.key)
            )
        next_id += len(fresh)
        if any(usage.carries_usage(m) for m in fresh_msgs):
            added = usage.record_messages(
                conn,
                op.sid,
                list(zip(ids[first:next_id], fresh_msgs)),
                op.source,
                op.batch,
                op.arrived_at,
            )
            ledger.drew("usage", added)  # usage ids are the table's own: given back if refused
        tool_ids.setdefault(op.sid, set()).update(result_ids(fresh))
        written.append(len(fresh))
    for sid, earliest in starts.items():
        backdate_start(conn, sid, earliest)
    ledger.insert_rows(conn, values)
    for sid, call_ids in tool_ids.items():
        if call_ids:
            check_tool_results(conn, sid, call_ids)
    if not ledger.record_applied_many(
        conn, [(op.batch, str(op.entry.position), now, op.digest) for op in run]
    ):
        raise RunConflict("a batch of the run was decided by another writer")
    return written
