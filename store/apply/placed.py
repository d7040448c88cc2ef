"""Appends that state each message's place: ``messages.append`` with ``order_keys``
(docs/ops.md), for producers that deliver one transcript in pieces, repeated and in any
order (an OTLP chat span repeats the whole history before it: ops/service/otlp_map.py).

A message (a producer id in a session) is one row however many deliveries carry it. Each
delivery states an order key (``store.apply.order``; a null entry is the op's own key) and a
time (the row ``ts`` it would be stored with: its ``timestamp``, else the op's arrival). The
row keeps the smallest of each over the deliveries applied:

* place: a delivery with an earlier key than the row's moves the row to that key's place
  (``_move``): its ``seq`` label, its stored key, and the ``pos`` of the rows displayed at it
  (itself and its compaction copies) change; its id, content and state never do;
* time: a delivery with an earlier time lowers the row's ``ts``;
* finish reason: the least any delivery gives (an output carries one; the next request
  repeats it as an input without it), filled into a row without one.

Each is a minimum over the set of deliveries, so the rows are the same whatever order the
deliveries come in or how they are grouped into ops (each rule is commutative and
idempotent); every delivery is a spool record, so a store rebuilt from a snapshot plus the
spool equals the live one. The row settled is the first stored with the producer id (its
smallest store id). Appends without ``order_keys`` skip a held id as before.
"""

from __future__ import annotations

from typing import Any

from quill.store.apply import batches, order
from quill.store.apply.message_rows import _INSERT_STATE, INSERT_STATE_ID, next_id
from quill.store.apply.normalize import ROW_COLUMNS

_EXT = ROW_COLUMNS.index("ext_id")
_TS = ROW_COLUMNS.index("ts")
_FINISH = ROW_COLUMNS.index("finish_reason")
_CHUNK = 500  # bound on SQL variables per IN (...) list

#: A held message: ``(store id, ts, order key, finish_reason)`` of the first row stored
#: with its id.
Held = tuple[int, float, order.OrderKey, str | None]
#: The deliveries of a held message in one op: ``(the held row, their smallest key, their
#: earliest time, their least finish reason or None)``.
Repeat = tuple[Held, order.OrderKey, float, str | None]


def _least(a: str | None, b: str | None) -> str | None:
    """The smaller of two optional values, None only when both are (a commutative fill)."""
    return b if a is None else a if b is None else min(a, b)


def _held(conn: Any, sid: str, ext_ids: list[str]) -> dict[str, Held]:
    """``{producer id: Held}`` for the ids of ``ext_ids`` that session ``sid`` holds."""
    out: dict[str, Held] = {}
    for start in range(0, len(ext_ids), _CHUNK):
        part = ext_ids[start : start + _CHUNK]
        for rid, ext, ts, us, tag, at, finish in conn.execute(
            "SELECT id, ext_id, ts, ack_us, ack_tag, ack_at, finish_reason FROM messages "
            f"WHERE session_id = ? AND ext_id IN ({', '.join('?' for _ in part)}) "
            "ORDER BY id DESC",
            (sid, *part),
        ):
            out[ext] = (rid, ts, (us, tag, at), finish)  # the last written: the smallest id
    return out


def split(
    conn: Any,
    sid: str,
    rows: list[tuple],
    msgs: list,
    stated: list[order.OrderKey | None],
    own: order.OrderKey,
) -> tuple[list[tuple], list, list[order.OrderKey], dict[str, Repeat]]:
    """An op's deliveries sorted out: ``(fresh rows, their messages, their keys, repeats)``.

    ``rows`` (``ROW_COLUMNS`` order), ``msgs`` and ``stated`` are aligned (``stated[i]``
    None: ``own``, the op's key). A row is fresh when no row of ``sid`` holds its producer
    id (rows without one always are); an id repeated within the op is one fresh row with the
    smallest key and time of its copies (and a finish reason if one has it). ``repeats``: per
    held id, the held row and what the op's copies give it (``Repeat``, ``settle``)."""
    keys = [k if k is not None else own for k in stated]
    held = _held(conn, sid, sorted({r[_EXT] for r in rows if r[_EXT] is not None}))
    fresh: list[tuple] = []
    fresh_msgs: list = []
    fresh_keys: list[order.OrderKey] = []
    at: dict[str, int] = {}  # producer id -> index in fresh
    repeats: dict[str, Repeat] = {}
    for row, msg, key in zip(rows, msgs, keys):
        ext, ts, finish = row[_EXT], row[_TS], row[_FINISH]
        if ext in held:
            _, k, t, f = repeats.get(ext, (held[ext], key, ts, finish))
            repeats[ext] = (held[ext], min(k, key), min(t, ts), _least(f, finish))
        elif ext is not None and ext in at:
            i = at[ext]
            fresh_keys[i] = min(fresh_keys[i], key)
            first = list(fresh[i])
            first[_TS] = min(first[_TS], ts)
            first[_FINISH] = _least(first[_FINISH], finish)
            fresh[i] = tuple(first)
        else:
            if ext is not None:
                at[ext] = len(fresh)
            fresh.append(row)
            fresh_msgs.append(msg)
            fresh_keys.append(key)
    return fresh, fresh_msgs, fresh_keys, repeats


def settle(conn: Any, sid: str, repeats: dict[str, Repeat]) -> float | None:
    """Apply ``repeats`` (``split``) to the held rows of ``sid``: an earlier time lowers a
    row's ``ts``, a finish reason fills a row without one, an earlier key moves the row
    (module doc). Rows are moved in key order (then producer id), so a replay labels them
    alike. Returns the earliest time lowered to, or None (the caller moves the session's
    start back to it)."""
    earliest = None
    for _ext, ((rid, ts, held_key, held_finish), key, t, finish) in sorted(
        repeats.items(), key=lambda r: (r[1][1], r[0])
    ):
        if t < ts:
            conn.execute("UPDATE messages SET ts = ? WHERE id = ?", (t, rid))
            earliest = t if earliest is None else min(earliest, t)
        if _least(held_finish, finish) != held_finish:
            conn.execute(
                "UPDATE messages SET finish_reason = ? WHERE id = ?",
                (_least(held_finish, finish), rid),
            )
        if key < held_key:
            _move(conn, sid, rid, key)
    return earliest


def _move(conn: Any, sid: str, rid: int, key: order.OrderKey) -> None:
    """Move row ``rid`` of ``sid`` to the place of ``key`` (earlier than its own key), and
    the rows displayed at it (``pos``) with it. ``order.place`` finds the place among the
    other rows (every row keyed not later than ``key`` stays before it), relabelling a
    window after it when the gap is full, which may relabel this row too: its label is read
    after."""
    [label] = order.place(conn, sid, 1, key)
    (old,) = conn.execute("SELECT seq FROM messages WHERE id = ?", (rid,)).fetchone()
    conn.execute(
        "UPDATE messages SET seq = ?, ack_us = ?, ack_tag = ?, ack_at = ? WHERE id = ?",
        (label, *key, rid),
    )
    # ``pos`` holds the seq of the row a row is displayed at (its own, or its original's):
    # labels are unique per session, so this matches the row and its copies, nothing else.
    conn.execute("UPDATE messages SET pos = ? WHERE session_id = ? AND pos = ?", (label, sid, old))


def insert(
    conn: Any,
    sid: str,
    rows: list[tuple],
    keys: list[order.OrderKey],
    arrived_at: float,
    batch_id: str,
) -> int:
    """Insert ``rows`` as live rows of ``sid`` in their order (ids follow it), each placed by
    its own key (``keys``, aligned). Keys that do not decrease are placed together
    (``order.plan``: one statement for those before the session's last row); otherwise each
    row is placed and written before the next; their batch is ``batch_id`` (numbered by
    ``batches.ref`` when there are rows). Returns rows inserted."""
    if not rows:
        return 0
    batch = batches.ref(conn, batch_id)

    def value(row: tuple, label: int, key: order.OrderKey) -> tuple:
        return (sid, *row, arrived_at, batch, "live", None, label, label, *key)

    planned = order.plan(conn, sid, [(k, 1) for k in keys])
    if planned is not None:
        _write(conn, [value(r, p[0], k) for r, p, k in zip(rows, planned, keys)])
    else:
        for row, key in zip(rows, keys):
            _write(conn, [value(row, order.place(conn, sid, 1, key)[0], key)])
    return len(rows)


def _write(conn: Any, values: list[tuple]) -> None:
    """``values`` (``message_rows._INSERT_STATE`` order) as new rows, ids in their order (the
    first takes ``next_id`` when it says so; the rest follow it)."""
    first = next_id(conn) if values else None
    if first is not None:
        conn.execute(INSERT_STATE_ID, (first, *values[0]))
        values = values[1:]
    conn.executemany(_INSERT_STATE, values)
