"""Transcript order within a session: by acknowledgement, the same on every host and replay.

A session's messages are ordered by ``messages.seq`` (1, 2, 3 … per session), and display
places a compaction copy at its original's place with ``messages.pos`` (the original's
``seq``; a row's own ``seq`` when it is no copy). ``seq`` follows each row's *order key*
``(ack_us, ack_tag, ack_at)``, then insertion order within one op:

* ``ack_us`` – the op's acknowledgement time in integer microseconds: its spool record's
  ``ts`` (taken by the producer as it appends, on its host's clock), raised to the previous
  record of the same spool when it is earlier (``Clock``). So one spool's records keep spool
  order whatever its host's clock does (a step back, concurrent producers), and two hosts'
  records interleave by the time each host's clock gave them;
* ``ack_tag`` – the tie-break between spools: the first 63 bits of BLAKE2b-64 of the spool
  id (``spool_tag``; 0 on a store fed by one spool, SQLite);
* ``ack_at`` – the record's spool position, ``segment << 40 | offset``.

The key is unique per op (a spool position is), and it is computed from the spool alone (the
records, their positions, the spool id, and the previous record's clamped time, kept in the
spool's cursor row), so a replay of the spools into an empty store, or from a snapshot,
writes the same ``seq``/``pos`` whatever order the hosts' records arrive in.

An op whose key is earlier than rows the session already holds (another host's writer applied
them first) is inserted before them, in the gap ``seq`` leaves there: rows appended at a
session's end are ``STRIDE`` apart, so ``place`` gives a late op labels between its two
neighbours and moves no row. Only when a gap is used up does it relabel, and then only a window
of rows after the insertion point, doubled until it reaches a gap with room (``_relabel``):
the cost of a late op depends on how crowded its gap is, never on the session's length.
So ``seq`` is an increasing label, not a dense 1..N rank: ``seq`` *order* is the order key's
order (and ``pos`` follows its row's ``seq``); a replay in another order gives the same order,
not necessarily the same labels. Ids never move (clients keep them); ids are arrival order,
``seq`` is transcript order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from quill.store.apply.later import later
from quill.store.errors import InvalidOpError

#: ``(ack_us, ack_tag, ack_at)``: see the module doc.
OrderKey = tuple[int, int, int]
#: The order key of the op being applied (set by ``store.apply.chunk`` around each applier).
_CURRENT: ContextVar[OrderKey | None] = ContextVar("quill_order_key", default=None)
_AT_BITS = 40  # a segment is at most 64 MiB (< 2**40 bytes)
_COLS = "(ack_us, ack_tag, ack_at)"
#: The gap between the labels of rows appended at a session's end (room for late rows).
STRIDE = 1 << 20
#: The largest gap a late row leaves after the row before it (so that a run of late rows into
#: one gap, each after the last, uses it up linearly rather than by halving).
_LATE_STEP = 1 << 12
#: The smallest gap a relabelled window is spread with.
_MIN_GAP = 1 << 6
#: Every label is below this (readers use 2**62 as "after every row"): 2**42 rows at ``STRIDE``.
LABEL_LIMIT = 1 << 62


#: A stated order key's ``time_us`` is below this (as a record's ``ack_us`` is, ``Clock``);
#: its tie-break and index below ``_STATED_LIMIT`` (signed 64-bit columns on both backends).
_STATED_US_LIMIT = 1 << 62
_STATED_LIMIT = 1 << 63


def stated_keys(data: dict[str, Any], n: int) -> list[OrderKey | None] | None:
    """A ``messages.append``'s ``order_keys`` (docs/ops.md): None when absent, else one entry
    per message (``n`` of them), each None (the op's own key) or a key
    ``[time_us, tie, index]`` of non-negative integers (``time_us`` < 2**62, the others
    < 2**63), returned as tuples. Raises ``InvalidOpError('invalid-field')``."""
    raw = data.get("order_keys")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != n:
        raise InvalidOpError(
            "invalid-field", f"order_keys must be a list of {n} keys, one per message"
        )
    out: list[OrderKey | None] = []
    for i, key in enumerate(raw):
        if key is None:
            out.append(None)
            continue
        if (
            not isinstance(key, list)
            or len(key) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in key)
            or key[0] >= _STATED_US_LIMIT
            or max(key[1:]) >= _STATED_LIMIT
        ):
            raise InvalidOpError(
                "invalid-field",
                f"order_keys[{i}] must be null or [time_us, tie, index]: integers >= 0, "
                "time_us < 2**62, the others < 2**63",
            )
        out.append((key[0], key[1], key[2]))
    return out


def spool_tag(spool_id: str) -> int:
    """The tie-break of a spool id: BLAKE2b-64 of its UTF-8 bytes, shifted to 63 bits (a
    non-negative SQL integer). ``''`` (a store fed by one spool) gives 0."""
    if not spool_id:
        return 0
    # Imported here: `quill push` loads this module for its checks (message_checks) and its
    # start-up skips hashlib (ops/cli/push_fast.py); only the writer tags ops.
    import hashlib

    digest = hashlib.blake2b(spool_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class Clock:
    """The clamped acknowledgement time along one spool (see the module doc).

    ``floor_us`` is the previous record's ``ack_us`` (0 before the first; stored in the
    spool's cursor row, ``spool_cursor.ack_us``, so it commits with the rows)."""

    def __init__(self, tag: int, floor_us: int | None):
        self.tag = tag
        self.floor_us = floor_us or 0

    def key(self, record: dict[str, Any] | None, position: Any) -> OrderKey:
        """The order key of the record at ``position`` (a ``(segment, offset)`` pair); a
        record without a usable ``ts`` (not a finite positive number) or a damaged one
        (``record`` None) takes the previous record's time. Advances the floor."""
        ts = record.get("ts") if isinstance(record, dict) else None
        us = self.floor_us
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts):
            if 0 < ts < 2**62 / 1e6:
                us = max(us, round(ts * 1_000_000))
        self.floor_us = us
        return (us, self.tag, (int(position[0]) << _AT_BITS) | int(position[1]))


@contextmanager
def applying(key: OrderKey) -> Iterator[None]:
    """Make ``key`` the order key of the rows the op applied inside the block inserts."""
    token = _CURRENT.set(key)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current(arrived_at: float) -> OrderKey:
    """The order key of the op being applied; for an applier called outside a chunk (tests,
    tools), ``(arrived_at in µs, 0, 0)``, whose ties keep insertion order."""
    key = _CURRENT.get()
    return key if key is not None else (round(arrived_at * 1_000_000), 0, 0)


def place(conn: Any, sid: str, n: int, key: OrderKey) -> list[int]:
    """Room for ``n`` rows with order key ``key`` in session ``sid``: the ``n`` increasing
    ``seq`` labels they take, after every row whose key is not later than ``key`` and before
    the first that is. Usually no row moves (a row at the end, or a late one into a gap with
    room); otherwise a window of later rows is relabelled (``seq``, and ``pos`` of the rows
    placed at them), keeping their order. Labels stay below ``LABEL_LIMIT``."""
    if n <= 0:
        return []
    top, *last = last_row(conn, sid)
    if top is None or key >= tuple(last):  # the usual case: one index probe
        base = top or 0
        return [base + STRIDE * (i + 1) for i in range(n)]
    # A late arrival: the last row not later than it and the row after it (the rows after
    # it are exactly the later ones, seq order being key order).
    ((lo, nxt),) = gaps(conn, sid, [key])
    step = min(_LATE_STEP, (nxt - lo) // (n + 1))
    if step >= 1:  # room in the gap: nothing moves
        return [lo + step * (i + 1) for i in range(n)]
    return _relabel(conn, sid, lo, n)


def gaps(conn: Any, sid: str, keys: list[OrderKey]) -> list[tuple[int, int | None]]:
    """For each of ``keys``, in one statement: ``(lo, nxt)``, the ``seq`` of the session's
    last row whose key is not later (0 when none is) and of the row right after it (None
    when ``lo`` is the last). Each ``lo`` is one probe of the key index on PostgreSQL
    (``messages_ack``: session, key, seq), wherever the gap is; without it (SQLite, whose one
    spool never sends a late op) the session's rows are read."""
    values = ", ".join("(CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), ?)" for _ in keys)
    rows = conn.execute(
        "SELECT f.i, f.lo, (SELECT min(n.seq) FROM messages AS n "
        "WHERE n.session_id = ? AND n.seq > f.lo) FROM (SELECT k.column4 AS i, "
        "coalesce((SELECT m.seq FROM messages AS m WHERE m.session_id = ? "
        "AND (m.ack_us, m.ack_tag, m.ack_at) <= (k.column1, k.column2, k.column3) "
        "ORDER BY m.ack_us DESC, m.ack_tag DESC, m.ack_at DESC, m.seq DESC LIMIT 1), 0) AS lo "
        f"FROM (VALUES {values}) AS k) AS f ORDER BY f.i",
        (sid, sid, *(x for i, key in enumerate(keys) for x in (*key, i))),
    ).fetchall()
    return [(r[1], r[2]) for r in rows]


def plan(
    conn: Any, sid: str, items: list[tuple[OrderKey, int]], last: Any = None
) -> list[list[int]] | None:
    """Labels for several ops of session ``sid`` at once (a bulk run, store/apply/bulk.py):
    ``items`` are ``(key, n)`` in increasing key order (else None: the caller places them one
    at a time). Returns each item's ``n`` labels, in the order ``place`` called op by op
    would give them, relabelling (``_relabel``) only a gap too crowded for the late rows sent
    into it. Late items cost one statement (``gaps``) for all of them, plus one per
    relabelled gap; the others take ``STRIDE`` steps after the session's last row. Nothing
    is inserted: the caller writes rows with these labels before anything else places rows
    in ``sid``. ``last``: ``ask_last_row(conn, sid)`` sent before (default: read now)."""
    if any(b[0] < a[0] for a, b in zip(items, items[1:])):
        return None
    out: list[list[int]] = [[] for _ in items]
    top, *last = last_row(conn, sid, last)
    # Keys increase along items, so the late ones (before the session's last row) come first.
    late = [i for i, (key, n) in enumerate(items) if top is not None and key < tuple(last)]
    tail = range(len(late), len(items))
    moved = False
    while late:
        bounds = gaps(conn, sid, [items[i][0] for i in late])
        j, again = 0, False
        while j < len(late):
            lo, nxt = bounds[j]
            k = j
            while k < len(late) and bounds[k][0] == lo:  # sent into one gap, in key order
                k += 1
            total = sum(items[i][1] for i in late[j:k])
            step = min(_LATE_STEP, (nxt - lo) // (total + 1)) if total else 1
            if step >= 1:
                labels = [lo + step * (x + 1) for x in range(total)]
            else:  # rows after ``lo`` move: the bounds of later gaps are read again
                labels = _relabel(conn, sid, lo, total)
                moved = again = True
            for i in late[j:k]:
                out[i], labels = labels[: items[i][1]], labels[items[i][1] :]
            j = k
            if again:
                break
        late = late[j:] if again else []
    if moved:  # a relabelled window that reached the session's end spread it out
        top = last_row(conn, sid)[0]
    base = top or 0
    for i in tail:
        n = items[i][1]
        out[i] = [base + STRIDE * (x + 1) for x in range(n)]
        base += STRIDE * n
    return out


def _relabel(conn: Any, sid: str, lo: int, n: int) -> list[int]:
    """Make room for ``n`` labels right after ``lo`` by spreading the ``k`` rows after it over
    the gap up to the next row, with ``k`` doubled (1, 2, 4, …) until the spread leaves at
    least ``_MIN_GAP`` between labels, or the window reaches the session's end (then rows are
    ``STRIDE`` apart again). Returns the ``n`` new labels."""
    k = 1
    while True:
        after = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (sid, lo, k + 1),
            )
        ]
        window, bound = after[:k], (after[k] if len(after) > k else None)
        if bound is None:
            step = STRIDE
        else:
            step = (bound - lo) // (n + len(window) + 1)
            if step < _MIN_GAP:
                k *= 2
                continue
        labels = [lo + step * (i + 1) for i in range(n + len(window))]
        _move(conn, sid, lo, dict(zip(window, labels[n:])))
        return labels[:n]


def _move(conn: Any, sid: str, lo: int, moves: dict[int, int]) -> None:
    """Relabel the rows of ``sid`` whose ``seq`` is a key of ``moves`` (every row in
    ``(lo, max(moves)]``) to its value, and ``pos`` with them. The old labels are first negated
    so that no row is matched twice while old and new labels overlap."""
    if not moves:
        return
    hi = max(moves)
    for col in ("seq", "pos"):
        conn.execute(
            f"UPDATE messages SET {col} = -{col} WHERE session_id = ? AND {col} > ? AND {col} <= ?",
            (sid, lo, hi),
        )
        pairs = sorted(moves.items())
        for start in range(0, len(pairs), 400):
            part = pairs[start : start + 400]
            values = ", ".join("(CAST(? AS BIGINT), CAST(? AS BIGINT))" for _ in part)
            conn.execute(
                f"UPDATE messages SET {col} = v.column2 FROM (VALUES {values}) AS v "
                f"WHERE messages.session_id = ? AND messages.{col} = v.column1",
                (*(x for old, new in part for x in (-old, new)), sid),
            )


def last_row(conn: Any, sid: str, asked: Any = None) -> tuple[int | None, int, int, int]:
    """``(seq, ack_us, ack_tag, ack_at)`` of the session's last row in ``seq`` order
    (``(None, 0, 0, 0)`` for no rows). Invariant: ``seq`` order is key order (every row is
    placed by its key), so this row holds the session's latest key. ``asked``: the rows of
    ``ask_last_row(conn, sid)``, sent with nothing of ``sid`` written since (default: read
    now)."""
    row = (asked if asked is not None else ask_last_row(conn, sid)).fetchone()
    return tuple(row) if row else (None, 0, 0, 0)


def ask_last_row(conn: Any, sid: str) -> Any:
    """``last_row``'s read, queued (``store.apply.later``): pass to it or to ``plan``."""
    return later(
        conn,
        "SELECT seq, ack_us, ack_tag, ack_at FROM messages WHERE session_id = ? "
        "ORDER BY seq DESC LIMIT 1",
        (sid,),
    )


def positions_of(conn: Any, ids: list[int]) -> dict[int, int]:
    """``{id: pos}`` of the rows ``ids`` (compaction origins: their display position)."""
    out: dict[int, int] = {}
    wanted = sorted(set(ids))
    for start in range(0, len(wanted), 500):
        part = wanted[start : start + 500]
        out.update(
            conn.execute(
                f"SELECT id, pos FROM messages WHERE id IN ({', '.join('?' for _ in part)})",
                part,
            ).fetchall()
        )
    return out


def seq_of(conn: Any, message_id: int) -> int | None:
    """The ``seq`` of message ``message_id``, or None for an unknown id."""
    row = conn.execute("SELECT seq FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row[0] if row else None


#: Every session's ``seq`` renumbered 1..N in id order and ``pos`` recomputed from it: for rows
#: whose order is their id order (rows written before v9; a salvage, which renumbers ids into
#: transcript order itself, store/sqlite/salvage.py).
RESEQUENCE_BY_ID = """
UPDATE messages SET seq = r.rn FROM (SELECT id AS rid, row_number() OVER (
    PARTITION BY session_id ORDER BY id) AS rn FROM messages) AS r WHERE r.rid = messages.id;
UPDATE messages SET pos = coalesce(
    (SELECT o.seq FROM messages AS o WHERE o.id = messages.origin_id), seq);
"""

#: v9 of the schema: the order columns, filled for existing rows in their id order (the order
#: they were read in before), with key 0 so that they precede every later op.
MIGRATION = (
    """
ALTER TABLE messages ADD COLUMN seq INTEGER;
ALTER TABLE messages ADD COLUMN pos INTEGER;
ALTER TABLE messages ADD COLUMN ack_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN ack_tag INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN ack_at INTEGER NOT NULL DEFAULT 0;"""
    + RESEQUENCE_BY_ID
    + """CREATE INDEX IF NOT EXISTS messages_seq ON messages(session_id, seq);
CREATE INDEX IF NOT EXISTS messages_pos ON messages(session_id, pos);
DROP INDEX IF EXISTS messages_display;
ALTER TABLE spool_cursor ADD COLUMN ack_us INTEGER;
"""
)
