"""Message rows and their writes, shared by the transcript ops (``store.apply.messages``), the
bulk append (``store.apply.bulk``), restore and deletes: validated rows with their binary
payloads cut out, the insert statements and next id, state flips, the live-tool-result
check, and the lookups of a session's live rows and of the row an op names.

Invariants: ids are insertion order and never reused (``next_id``, ``ID_FLOOR_KEY``); a
session's transcript order is ``seq``, placed by the op's order key (``store.apply.order``);
at most one *live* tool result per (session, tool_call_id) (``check_tool_results``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import apsw

from quill.store import packed
from quill.store.apply import batches, blobs, order
from quill.store.apply.later import later
from quill.store.apply.normalize import IDENTITY_COLUMNS, ROW_COLUMNS, message_row, scrub
from quill.store.apply.rules import opt
from quill.store.errors import InvalidOpError

TOOL_RESULT_ROLES = ("tool", "function")
_INSERT_STATE = (
    f"INSERT INTO messages (session_id, {', '.join(ROW_COLUMNS)}, "
    "arrived_at, batch, state, origin_id, seq, pos, ack_us, ack_tag, ack_at) "
    f"VALUES (?, {packed.marks_sql(ROW_COLUMNS)}, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: The same with an explicit id first (``next_id``; SQLite only).
INSERT_STATE_ID = _INSERT_STATE.replace("(session_id,", "(id, session_id,").replace(
    "VALUES (?,", "VALUES (?, ?,"
)
#: The columns of ``INSERT_STATE_ID``, in its order (a bulk run's rows: ``Ledger.insert_rows``).
STATE_ID_COLUMNS = (
    "id",
    "session_id",
    *ROW_COLUMNS,
    "arrived_at",
    "batch",
    "state",
    "origin_id",
) + ("seq", "pos", "ack_us", "ack_tag", "ack_at")
#: ``state_meta`` key: the highest message id a ``sessions.delete`` removed (session_delete.py).
ID_FLOOR_KEY = "message_id_floor"
_CHUNK = 500  # bound on SQL variables per IN (...) list


#: Message keys whose values never hold a binary payload (text columns and ids): not walked
#: by ``blobs.extract``. A plain-string ``content`` is text (searchable), never cut out.
_NO_BLOB_KEYS = frozenset(
    {"id", "role", "tool_calls", "tool_call_id", "name", "reasoning", "finish_reason", "timestamp"}
)


def _cut_blobs(msg: object, found: dict[str, str]) -> object:
    """``msg`` with large binary payloads in its parts and extras replaced by blob references
    (store/apply/blobs.py); the payloads are collected into ``found``."""
    if not isinstance(msg, dict):
        return msg
    out = dict(msg)
    for key, value in msg.items():
        if key in _NO_BLOB_KEYS or (key == "content" and not isinstance(value, (list, dict))):
            continue
        out[key], cut = blobs.extract(value)
        found.update(cut)
    return out


def _rows(conn: apsw.Connection, messages: list, arrived_at: float) -> list[tuple]:
    """Validated rows for ``messages`` (``normalize.message_row``: the message rules precheck
    applies too, ``op_checks.message_rows``); their binary payloads are stored once in
    ``blobs`` (inside the op's savepoint, so a refused op leaves no blob behind). The
    ``rows`` function the appliers hand to their ``op_checks`` check."""
    rows, found = cut_rows(messages, arrived_at)
    blobs.put_many(conn, found, now=arrived_at)
    return rows


def cut_rows(messages: list, arrived_at: float) -> tuple[list[tuple], dict[str, str]]:
    """``(rows, blobs)``: each message's row (``normalize.message_row``, ``ROW_COLUMNS`` order)
    with its large binary payloads cut out, and those payloads ``{sha256: payload}`` for
    ``blobs.put_many``. Pure (no store access). Raises ``InvalidOpError`` for an invalid message."""
    found: dict[str, str] = {}
    return [message_row(_cut_blobs(m, found), arrived_at) for m in messages], found


def next_id(conn: apsw.Connection) -> int | None:
    """The id the next inserted message must take, or None to let the database choose.

    Message ids are never reused: clients keep them (read marks, rewind targets, sync
    cursors). PostgreSQL's identity column never goes back. SQLite gives a rowid table's new
    row max(id) + 1 (sqlite.org/autoinc.html), so after a delete removed the newest rows it
    would hand their ids out again; the delete records the highest id it removed
    (``ID_FLOOR_KEY``) and the next insert starts above it. Both values come from ops, so a
    rebuild assigns the same ids."""
    if not isinstance(conn, apsw.Connection):
        return None
    top, floor = conn.execute(
        f"SELECT (SELECT max(id) FROM messages), (SELECT CAST(value AS INTEGER) FROM "
        f"state_meta WHERE key = '{ID_FLOOR_KEY}')"
    ).fetchone()
    return floor + 1 if floor is not None and (top or 0) < floor else None


def _insert(
    conn: apsw.Connection,
    sid: str,
    rows: Iterable[tuple],
    origins: Sequence[int | None] | None,
    arrived_at: float,
    batch_id: str,
) -> int:
    """Insert ``rows`` as live rows of ``sid`` (``origins``: each row's compaction original, a
    root row id, or None), placed in the session's order by the op's order key
    (``order.place``); a copy's display position is its original's; their batch is
    ``batch_id`` (numbered by ``batches.ref`` when there are rows). Returns rows inserted."""
    rows = list(rows)
    if not rows:
        return 0
    batch = batches.ref(conn, batch_id)
    origins = origins or [None] * len(rows)
    key = order.current(arrived_at)
    seqs = order.place(conn, sid, len(rows), key)
    opos = order.positions_of(conn, [o for o in origins if o is not None])
    values = [
        (sid, *r, arrived_at, batch, "live", o, s) + ((opos[o] if o is not None else s), *key)
        for r, o, s in zip(rows, origins, seqs)
    ]
    first = next_id(conn) if values else None
    if first is not None:  # the rows after the first follow it (max(id) + 1)
        conn.execute(INSERT_STATE_ID, (first, *values.pop(0)))
    conn.executemany(_INSERT_STATE, values)
    return len(rows)


def held_ext_ids(conn: apsw.Connection, sid: str, ext_ids: Iterable[str]) -> set[str]:
    """The producer ids among ``ext_ids`` that session ``sid`` holds (rows in any state),
    looked up ``_CHUNK`` at a time."""
    return held_of(ask_held_ext_ids(conn, sid, ext_ids))


def ask_held_ext_ids(conn: Any, sid: str, ext_ids: Iterable[str]) -> list:
    """``held_ext_ids``' reads, queued (``store.apply.later``): pass to ``held_of``."""
    wanted = sorted(set(ext_ids))
    return [
        later(
            conn,
            "SELECT ext_id FROM messages WHERE session_id = ? "
            f"AND ext_id IN ({', '.join('?' for _ in part)})",
            (sid, *part),
        )
        for part in (wanted[at : at + _CHUNK] for at in range(0, len(wanted), _CHUNK))
    ]


def held_of(asked: list) -> set[str]:
    """The producer ids ``ask_held_ext_ids``' reads found."""
    return {x for rows in asked for (x,) in rows}


def fresh_rows(
    conn: apsw.Connection, sid: str, rows: list[tuple], msgs: list
) -> tuple[list[tuple], list, list[tuple[tuple, dict]]]:
    """``(rows, msgs, copies)``: ``rows`` and ``msgs`` (aligned) without those whose
    producer id ``sid`` already holds (in any state) or an earlier row of ``rows`` has (rows
    without an id are kept), and ``copies``, the ``(row, msg)`` pairs of ids held before
    this op (``store.apply.revise``)."""
    ext = ROW_COLUMNS.index("ext_id")
    seen = held_ext_ids(conn, sid, {r[ext] for r in rows if r[ext] is not None})
    fresh, fresh_msgs, copies = [], [], []
    held = set(seen)
    for row, msg in zip(rows, msgs):
        if row[ext] is not None:
            if row[ext] in held:  # held before this op: a later copy of it, or a repeat
                copies.append((row, msg))
                continue
            if row[ext] in seen:
                continue  # repeated in this batch
            seen.add(row[ext])
        fresh.append(row)
        fresh_msgs.append(msg)
    return fresh, fresh_msgs, copies


def _set_state(conn: apsw.Connection, ids: Sequence[int], state: str) -> int:
    for start in range(0, len(ids), _CHUNK):
        part = ids[start : start + _CHUNK]
        conn.execute(
            f"UPDATE messages SET state = ? WHERE id IN ({', '.join('?' for _ in part)})",
            (state, *part),
        )
    return len(ids)


def check_tool_results(
    conn: apsw.Connection, sid: str, call_ids: Iterable[str] | None = None
) -> None:
    """Raise ``InvalidOpError('duplicate-tool-result')`` naming the first tool_call_id that has
    more than one live tool result in ``sid`` (checking ``call_ids`` only, or all when None)."""
    base = (
        f"SELECT tool_call_id FROM messages WHERE session_id = ? AND state = 'live' "
        f"AND tool_call_id IS NOT NULL AND role IN {TOOL_RESULT_ROLES!r}"
    )
    groups = " GROUP BY tool_call_id HAVING count(*) > 1 ORDER BY tool_call_id LIMIT 1"
    if call_ids is None:
        queries = [(base + groups, (sid,))]
    else:
        ids = sorted(set(call_ids))
        queries = [
            (
                base
                + f" AND tool_call_id IN ({', '.join('?' for _ in ids[i : i + _CHUNK])})"
                + groups,
                (sid, *ids[i : i + _CHUNK]),
            )
            for i in range(0, len(ids), _CHUNK)
        ]
    for sql, args in queries:
        bad = conn.execute(sql, args).fetchone()
        if bad:
            raise InvalidOpError(
                "duplicate-tool-result",
                f"session {sid!r} would have more than one live tool result "
                f"for tool_call_id {bad[0]!r}",
            )


def result_ids(rows: Iterable[tuple]) -> list[str]:
    """The ``tool_call_id`` of each tool-result row (role tool/function) among ``rows``."""
    role, call = ROW_COLUMNS.index("role"), ROW_COLUMNS.index("tool_call_id")
    return [r[call] for r in rows if r[role] in TOOL_RESULT_ROLES and r[call] is not None]


def _live(conn: apsw.Connection, sid: str) -> list[tuple]:
    """Live rows of ``sid`` in transcript order (``seq``):
    ``(id, origin_id, role, *IDENTITY_COLUMNS)``."""
    return conn.execute(
        f"SELECT id, coalesce(origin_id, id), role, {packed.columns_sql(IDENTITY_COLUMNS)} "
        "FROM messages "
        "WHERE session_id = ? AND state = 'live' ORDER BY seq",
        (sid,),
    ).fetchall()


def _target(
    conn: apsw.Connection, sid: str, data: dict, id_key: str, ext_key: str
) -> tuple[int, str, str] | None:
    """``(id, role, state)`` of the row named by ``data[id_key]`` (store id) or
    ``data[ext_key]`` (producer id; the newest live row with it, else the newest row)."""
    mid, ext = opt(data, id_key, int), opt(data, ext_key, (str, int))
    if mid is not None and ext is not None:
        raise InvalidOpError("invalid-field", f"give {id_key!r} or {ext_key!r}, not both")
    if mid is not None:
        row = conn.execute(
            "SELECT id, role, state FROM messages WHERE id = ? AND session_id = ?", (mid, sid)
        ).fetchone()
    elif ext is not None:
        row = conn.execute(
            "SELECT id, role, state FROM messages WHERE session_id = ? AND ext_id = ? "
            "ORDER BY state = 'live' DESC, seq DESC LIMIT 1",
            (sid, scrub(str(ext))),
        ).fetchone()
    else:
        return None
    if row is None:
        raise InvalidOpError(
            "unknown-message", f"session {sid!r} has no message {mid if mid is not None else ext!r}"
        )
    return row
