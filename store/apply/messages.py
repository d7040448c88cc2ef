"""Transcript ops: ``messages.append``, ``messages.compact``, ``messages.rewind``,
``messages.replace`` (payloads in docs/ops.md).

Invariants kept here (docs/architecture.md "The store"):
* nothing is DELETEd: compaction and rewind only flip ``messages.state`` and insert rows;
* ids are insertion order, and insertion order is transcript order;
* at most one *live* tool result per (session, tool_call_id): an op that would break it is
  rejected whole (``duplicate-tool-result``, naming the id);
* a copy made by a compaction carries ``origin_id`` = the first original's id, so every
  display read places it once, at the original's position;
* state flips never touch the FTS indexes (search filters by state).
Every applier runs its content check (``store.apply.checks``, shared with ``store.apply.precheck``),
writes, then checks what needs the store; ``op_common.atomic`` undoes everything on error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import apsw

from quill.store.apply import blobs, usage
from quill.store.apply.checks import check_append, check_compact, check_replace, check_rewind
from quill.store.apply.normalize import IDENTITY_COLUMNS, ROW_COLUMNS, identity, message_row, scrub
from quill.store.apply.rules import atomic, ensure_session, opt, reopen_if_automatic, session_exists
from quill.store.errors import InvalidOpError

TOOL_RESULT_ROLES = ("tool", "function")
_INSERT_STATE = (
    f"INSERT INTO messages (session_id, {', '.join(ROW_COLUMNS)}, "
    "arrived_at, batch_id, state, origin_id) "
    f"VALUES (?, {', '.join('?' for _ in ROW_COLUMNS)}, ?, ?, ?, ?)"
)
#: The same with an explicit id first (``next_id``; SQLite only).
INSERT_STATE_ID = _INSERT_STATE.replace("(session_id,", "(id, session_id,").replace(
    "VALUES (?,", "VALUES (?, ?,"
)
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
    rows = list(rows)
    origins = origins or [None] * len(rows)
    values = [(sid, *r, arrived_at, batch_id, "live", o) for r, o in zip(rows, origins)]
    first = next_id(conn) if values else None
    if first is not None:  # the rows after the first follow it (max(id) + 1)
        conn.execute(INSERT_STATE_ID, (first, *values.pop(0)))
    conn.executemany(_INSERT_STATE, values)
    return len(rows)


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


@atomic
def messages_append(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Append ``data['messages']`` to ``data['session_id']``, all or nothing.

    Messages whose producer ``id`` the session already holds (in any state), or that repeat
    an id earlier in the batch, are skipped: re-importing a grown transcript adds only the new
    ones. Appending reopens a session ended for an automatic reason. Returns rows inserted.
    Raises ``InvalidOpError``: the content reasons of ``op_checks.check_append`` (invalid
    message → its reason; the usage of the messages inserted, ``_record_usage``),
    ``duplicate-tool-result`` (needs the store).
    """
    rows = check_append(data, lambda messages: _rows(conn, messages, arrived_at), usage=False)
    sid, source = data["session_id"], data.get("source")
    ext = ROW_COLUMNS.index("ext_id")
    wanted = sorted({r[ext] for r in rows if r[ext] is not None})
    seen: set[str] = set()
    for start in range(0, len(wanted), _CHUNK):
        part = wanted[start : start + _CHUNK]
        seen.update(
            x
            for (x,) in conn.execute(
                "SELECT ext_id FROM messages WHERE session_id = ? "
                f"AND ext_id IN ({', '.join('?' for _ in part)})",
                (sid, *part),
            )
        )
    fresh, fresh_msgs = [], []
    for row, msg in zip(rows, data["messages"]):
        if row[ext] is not None:
            if row[ext] in seen:
                continue
            seen.add(row[ext])
        fresh.append(row)
        fresh_msgs.append(msg)
    ensure_session(conn, sid, arrived_at, source)
    if fresh:
        reopen_if_automatic(conn, sid)
    written = _insert(conn, sid, fresh, None, arrived_at, batch_id)
    check_tool_results(conn, sid, result_ids(fresh))
    _record_usage(conn, sid, fresh_msgs, source, batch_id, arrived_at)
    return written


def _record_usage(
    conn: apsw.Connection,
    sid: str,
    msgs: list[dict],
    source: str | None,
    batch_id: str,
    arrived_at: float,
) -> None:
    """Usage carried by the messages ``_insert`` just wrote: this op's rows are the session's
    rows of ``batch_id`` (a batch id is one op), in id order = ``msgs`` order."""
    if any(usage.carries_usage(m) for m in msgs):
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM messages WHERE session_id = ? AND batch_id = ? "
                "ORDER BY id DESC LIMIT ?",
                (sid, batch_id, len(msgs)),
            )
        ][::-1]
        usage.record_messages(conn, sid, list(zip(ids, msgs)), source, batch_id, arrived_at)


def _live(conn: apsw.Connection, sid: str) -> list[tuple]:
    """Live rows of ``sid`` in order: ``(id, origin_id, role, *IDENTITY_COLUMNS)``."""
    return conn.execute(
        f"SELECT id, coalesce(origin_id, id), role, {', '.join(IDENTITY_COLUMNS)} FROM messages "
        "WHERE session_id = ? AND state = 'live' ORDER BY id",
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
            "ORDER BY state = 'live' DESC, id DESC LIMIT 1",
            (sid, scrub(str(ext))),
        ).fetchone()
    else:
        return None
    if row is None:
        raise InvalidOpError(
            "unknown-message", f"session {sid!r} has no message {mid if mid is not None else ext!r}"
        )
    return row


def _watermark(conn: apsw.Connection, sid: str, data: dict) -> int | None:
    named = _target(conn, sid, data, "watermark", "watermark_ext_id")
    return named[0] if named else None


def _match_tail(before: list[tuple], tail: list[tuple]) -> list[int]:
    """Indexes into ``before`` of the byte-identical originals of ``tail`` (matched from the
    end, in order). Raises ``InvalidOpError('tail-mismatch')`` when one has no original."""
    matched: list[int] = []
    limit = len(before)
    for k in range(len(tail) - 1, -1, -1):
        want = identity(tail[k])
        idx = next((i for i in range(limit - 1, -1, -1) if tuple(before[i][3:]) == want), None)
        if idx is None:
            raise InvalidOpError(
                "tail-mismatch",
                f"carried tail message {k} (role {tail[k][1]!r}) has no "
                "byte-identical live original at or below the watermark",
            )
        matched.append(idx)
        limit = idx
    return matched[::-1]


@atomic
def messages_compact(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Compact a session in place (in this session, not a new one in its compression chain).

    Live rows at or below the watermark become ``compacted``; ``data['messages']`` (the
    compacted set) is inserted as the new live rows; its last ``tail_count`` messages are the
    verbatim carried tail, whose byte-identical originals become ``superseded`` (so a word in
    the tail is found once). Live rows above the watermark (arrived during the summary) are
    cloned byte-exactly after the compacted set and their originals become ``superseded``.
    Other compacted-set messages identical to a compacted row are linked to it (``origin_id``)
    so display shows them once. Returns rows inserted.
    Raises ``InvalidOpError``: ``invalid-field``/message reasons (``op_checks.check_compact``);
    needing the store: ``unknown-session``, ``unknown-message``, ``nothing-to-compact``,
    ``tail-mismatch``, ``duplicate-tool-result``.
    """
    rows, tail_count = check_compact(data, lambda messages: _rows(conn, messages, arrived_at))
    sid = data["session_id"]
    if not session_exists(conn, sid):
        raise InvalidOpError("unknown-session", f"no session {sid!r} to compact")
    watermark = _watermark(conn, sid, data)
    live = _live(conn, sid)
    before = [r for r in live if watermark is None or r[0] <= watermark]
    after = [r for r in live if watermark is not None and r[0] > watermark]
    if not before:
        raise InvalidOpError(
            "nothing-to-compact", f"session {sid!r} has no live rows at or below the watermark"
        )
    head, tail = rows[: len(rows) - tail_count], rows[len(rows) - tail_count :]
    tail_idx = _match_tail(before, tail)
    origins: list[int | None] = []
    used = set(tail_idx)
    for row in head:  # a verbatim re-sent message outside the tail: link, keep the original visible
        want = identity(row)
        idx = next(
            (
                i
                for i in range(len(before) - 1, -1, -1)
                if i not in used and tuple(before[i][3:]) == want
            ),
            None,
        )
        if idx is not None:
            used.add(idx)
        origins.append(before[idx][1] if idx is not None else None)
    origins += [before[i][1] for i in tail_idx]
    superseded = [before[i][0] for i in tail_idx] + [r[0] for r in after]
    tail_set = set(tail_idx)
    _set_state(conn, [r[0] for i, r in enumerate(before) if i not in tail_set], "compacted")
    _set_state(conn, superseded, "superseded")
    written = _insert(conn, sid, rows, origins, arrived_at, batch_id)
    if after:  # byte-exact clones with fresh ids, in order, after the compacted set
        cols = ", ".join(ROW_COLUMNS)
        for start in range(0, len(after), _CHUNK):
            part = [r[0] for r in after[start : start + _CHUNK]]
            conn.execute(
                f"INSERT INTO messages (session_id, {cols}, "
                "arrived_at, batch_id, state, origin_id) "
                f"SELECT session_id, {cols}, arrived_at, batch_id, 'live', "
                "coalesce(origin_id, id) FROM messages "
                f"WHERE id IN ({', '.join('?' for _ in part)}) ORDER BY id",
                part,
            )
        written += len(after)
    check_tool_results(conn, sid)
    return written


def _user_turn(conn: apsw.Connection, sid: str, turn: int) -> int:
    users = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages "
            "WHERE session_id = ? AND state = 'live' AND role = 'user' ORDER BY id",
            (sid,),
        )
    ]
    if turn == 0 or abs(turn) > len(users):
        raise InvalidOpError(
            "no-such-turn", f"session {sid!r} has {len(users)} live user turn(s); user_turn={turn}"
        )
    return users[turn - 1] if turn > 0 else users[turn]


def _check_head(conn: apsw.Connection, sid: str, data: dict) -> None:
    expect = opt(data, "expect_head_id", int)
    if expect is None:
        return
    head = conn.execute(
        "SELECT max(id) FROM messages WHERE session_id = ? AND state = 'live'", (sid,)
    ).fetchone()[0]
    if head != expect:
        raise InvalidOpError(
            "stale-head", f"session {sid!r} live head is {head}, the op expected {expect}"
        )


def _rewind_from(conn: apsw.Connection, sid: str, first: int) -> int:
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages "
            "WHERE session_id = ? AND state = 'live' AND id >= ? ORDER BY id",
            (sid, first),
        )
    ]
    return _set_state(conn, ids, "rewound")


def _rewind_branch(conn: apsw.Connection, sid: str, data: dict) -> int:
    """``ext_ids`` form of rewind: the live rows of ``sid`` with these producer ids become
    ``rewound`` (an abandoned branch of a tree-shaped transcript, e.g. Claude Code's
    ``parentUuid`` tree, or turns a Codex ``thread_rolled_back`` dropped). Ids the session
    does not hold live are ignored (already rewound, compacted, or never sent), so the op is
    idempotent. No other target field may be given."""
    ids = data["ext_ids"]  # a non-empty list of ids, the only target: op_checks.check_rewind
    _check_head(conn, sid, data)
    wanted = sorted({scrub(str(x)) for x in ids})  # ids as message_row stores them
    flipped: list[int] = []
    for start in range(0, len(wanted), _CHUNK):
        part = wanted[start : start + _CHUNK]
        flipped += [
            r[0]
            for r in conn.execute(
                f"SELECT id FROM messages WHERE session_id = ? AND state = 'live' "
                f"AND ext_id IN ({', '.join('?' for _ in part)})",
                (sid, *part),
            )
        ]
    return _set_state(conn, sorted(flipped), "rewound")


@atomic
def messages_rewind(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Rewind to a user message: it and every live row after it become ``rewound``.

    The target is ``message_id`` (store id), ``ext_id`` (producer id) or ``user_turn`` (1 = the
    first live user message, -1 = the last; 0 and out-of-range are refused). The fourth form,
    ``ext_ids`` (a list), flips exactly those live rows instead (see ``_rewind_branch``). The
    target must be a live ``user`` row. Optional ``expect_head_id`` refuses the rewind unless the
    live head is that id (compare-and-swap). Returns rows flipped. Raises ``InvalidOpError``:
    ``invalid-field``, ``no-such-turn`` for turn 0 (``op_checks.check_rewind``); needing the
    store: ``unknown-message``, ``not-a-user-message``, ``not-live``, ``no-such-turn``,
    ``stale-head``.
    """
    check_rewind(data)
    sid = data["session_id"]
    if "ext_ids" in data:
        return _rewind_branch(conn, sid, data)
    turn = opt(data, "user_turn", int)
    named = _target(conn, sid, data, "message_id", "ext_id")
    if named is None:
        target = _user_turn(conn, sid, turn)
    else:
        target, role, state = named
        if role != "user":
            raise InvalidOpError(
                "not-a-user-message",
                f"message {target} is a {role!r} message; rewind targets user messages",
            )
        if state != "live":
            raise InvalidOpError(
                "not-live", f"message {target} is {state}; only a live message can be rewound to"
            )
    _check_head(conn, sid, data)
    return _rewind_from(conn, sid, target)


@atomic
def messages_replace(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Edit / regenerate: live rows from ``from_message_id`` / ``from_ext_id`` on (or every
    live row when neither is given) become ``rewound``, then ``data['messages']`` is appended
    as live rows (producer ids are not deduplicated here: an edit may reuse its id).
    Returns rows inserted. Raises ``InvalidOpError``: ``invalid-field``, message and usage
    reasons (``op_checks.check_replace``); needing the store: ``unknown-message``,
    ``not-live``, ``stale-head``, ``duplicate-tool-result``.
    """
    rows = check_replace(data, lambda messages: _rows(conn, messages, arrived_at))
    sid = data["session_id"]
    named = _target(conn, sid, data, "from_message_id", "from_ext_id")
    if named is not None and named[2] != "live":
        raise InvalidOpError(
            "not-live", f"message {named[0]} is {named[2]}; only live rows can be replaced"
        )
    _check_head(conn, sid, data)
    ensure_session(conn, sid, arrived_at)
    _rewind_from(conn, sid, named[0] if named else 0)
    written = _insert(conn, sid, rows, None, arrived_at, batch_id)
    check_tool_results(conn, sid, result_ids(rows))
    _record_usage(conn, sid, data["messages"], opt(data, "source", str), batch_id, arrived_at)
    return written
