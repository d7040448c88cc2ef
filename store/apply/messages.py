"""Transcript ops: ``messages.append``, ``messages.compact``, ``messages.rewind``,
``messages.replace`` (payloads in docs/ops.md).

Invariants kept here (docs/architecture.md "The store"):
* nothing is DELETEd: compaction and rewind only flip ``messages.state`` and insert rows;
* ids are insertion order; transcript order is ``seq``, placed by each op's order key
  (acknowledgement time, then spool: ``store.apply.order``), so "after", "head", "turn" and
  "watermark" below are in ``seq`` order;
* at most one *live* tool result per (session, tool_call_id): an op that would break it is
  rejected whole (``duplicate-tool-result``, naming the id);
* a copy made by a compaction carries ``origin_id`` = the first original's id, so every
  display read places it once, at the original's position;
* state flips never touch the FTS indexes (search filters by state).
Every applier runs its content check (``store.apply.checks``, shared with ``store.apply.precheck``),
writes, then checks what needs the store; ``op_common.atomic`` undoes everything on error.
The rows and their writes (insert, state flips, the tool-result check) are in
``store.apply.message_rows``.
"""

from __future__ import annotations

import apsw

from quill.store.apply import order, placed, revise, tool_names, usage
from quill.store.apply.message_checks import (
    check_append,
    check_compact,
    check_replace,
    check_rewind,
)
from quill.store.apply.message_rows import (
    _CHUNK,
    _insert,
    _live,
    _rows,
    _set_state,
    _target,
    check_tool_results,
    fresh_rows,
    result_ids,
)
from quill.store.apply.normalize import ROW_COLUMNS, identity, scrub
from quill.store.apply.rules import (
    atomic,
    backdate_start,
    ensure_session,
    opt,
    refuse_if_compressed,
    reopen_if_automatic,
    session_exists,
)
from quill.store.errors import InvalidOpError

_TS = ROW_COLUMNS.index("ts")  # a row's message time (its arrival time when it carries none)


@atomic
def messages_append(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Append ``data['messages']`` to ``data['session_id']``, all or nothing.

    Messages whose producer ``id`` the session already holds (in any state), or that repeat
    an id earlier in the batch, are skipped: re-importing a grown transcript adds only the new
    ones. With ``revise`` true, a held message whose copy differs is rewritten in place
    instead (last copy wins: ``store.apply.revise``). With ``order_keys`` each message is
    placed by its own key, and a repeat settles the held row to the earliest place and time
    it is given (``store.apply.placed``). Appending reopens a session ended for an automatic
    reason. Returns rows inserted (plus rows revised).
    Raises ``InvalidOpError``: the content reasons of ``op_checks.check_append`` (invalid
    message → its reason; the usage of the messages inserted, ``_record_usage``),
    ``duplicate-tool-result`` and ``session-compressed`` (new rows for a session ended for
    compression, ``rules.refuse_if_compressed``) need the store.
    """
    rows = check_append(data, lambda messages: _rows(conn, messages, arrived_at), usage=False)
    sid, source = data["session_id"], data.get("source")
    stated = order.stated_keys(data, len(rows))
    keys, repeats, copies = None, {}, []
    if stated is None:
        fresh, fresh_msgs, copies = fresh_rows(conn, sid, rows, data["messages"])
    else:
        own = order.current(arrived_at)
        fresh, fresh_msgs, keys, repeats = placed.split(
            conn, sid, rows, data["messages"], stated, own
        )
    ensure_session(conn, sid, arrived_at, source)
    if fresh:  # a re-sent batch already held changes nothing, so it is not refused
        refuse_if_compressed(conn, sid, "messages.append")
        reopen_if_automatic(conn, sid)
        backdate_start(conn, sid, min(r[_TS] for r in fresh))
    lowered = placed.settle(conn, sid, repeats)
    if lowered is not None:
        backdate_start(conn, sid, lowered)
    fresh = tool_names.fill(conn, sid, fresh)
    if keys is None:
        written = _insert(conn, sid, fresh, None, arrived_at, batch_id)
    else:
        written = placed.insert(conn, sid, fresh, keys, arrived_at, batch_id)
    check_tool_results(conn, sid, result_ids(fresh))
    _record_usage(conn, sid, fresh_msgs, source, batch_id, arrived_at)
    if data.get("revise") and copies:
        written += revise.revise(conn, sid, copies, source, batch_id, arrived_at)
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
                "SELECT id FROM messages WHERE session_id = ? "
                "AND batch = (SELECT id FROM batches WHERE batch_id = ?) "
                "ORDER BY id DESC LIMIT ?",
                (sid, batch_id, len(msgs)),
            )
        ][::-1]
        usage.record_messages(conn, sid, list(zip(ids, msgs)), source, batch_id, arrived_at)


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
        idx = next((i for i in range(limit - 1, -1, -1) if _same(before[i][3:], want)), None)
        if idx is None:
            raise InvalidOpError(
                "tail-mismatch",
                f"carried tail message {k} (role {tail[k][1]!r}) has no "
                "byte-identical live original at or below the watermark",
            )
        matched.append(idx)
        limit = idx
    return matched[::-1]


def _same(stored: tuple, want: tuple) -> bool:
    """Whether a stored row's ``IDENTITY_COLUMNS`` values match a re-sent message's: equal,
    except that a re-sent tool result without a tool name matches whatever name the stored
    row holds (the writer names results from their calls: ``store.apply.tool_names``)."""
    stored = tuple(stored)
    if stored == want:
        return True
    return want[0] in ("tool", "function") and want[-1] is None and stored[:-1] == want[:-1]


def _named_like(
    conn: apsw.Connection, sid: str, rows: list[tuple], originals: list[tuple | None]
) -> list[tuple]:
    """``rows`` of a compaction with each unnamed tool result named as its matched original
    (``originals[i]``: the stored row ``rows[i]`` copies, ``_live``'s shape, or None), so a
    copy stays byte-identical; the others named from their calls (``tool_names.fill``)."""
    name_at = ROW_COLUMNS.index("tool_name")
    rows = [
        (*r[:name_at], o[-1], *r[name_at + 1 :]) if o is not None and r[name_at] is None else r
        for r, o in zip(rows, originals)
    ]
    return tool_names.fill(conn, sid, rows)


@atomic
def messages_compact(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Compact a session in place (in this session, not a new one in its compression chain).

    Live rows at or below the watermark become ``compacted``; ``data['messages']`` (the
    compacted set) is inserted as the new live rows; its last ``tail_count`` messages are the
    verbatim carried tail, whose byte-identical originals become ``superseded`` (so a word in
    the tail is found once). Live rows above the watermark (arrived during the summary) are
    cloned byte-exactly after the compacted set (a row acknowledged after this op, from another
    host, at its own place in acknowledgement order) and their originals become ``superseded``.
    Other compacted-set messages identical to a compacted row are linked to it (``origin_id``)
    so display shows them once. Returns rows inserted.
    Raises ``InvalidOpError``: ``invalid-field``/message reasons (``op_checks.check_compact``);
    needing the store: ``unknown-session``, ``unknown-message``, ``nothing-to-compact``,
    ``tail-mismatch``, ``duplicate-tool-result``, ``session-compressed`` (the session was ended
    for compression: ``rules.refuse_if_compressed``).
    """
    rows, tail_count = check_compact(data, lambda messages: _rows(conn, messages, arrived_at))
    sid = data["session_id"]
    refuse_if_compressed(conn, sid, "messages.compact")
    if not session_exists(conn, sid):
        raise InvalidOpError("unknown-session", f"no session {sid!r} to compact")
    watermark = _watermark(conn, sid, data)
    live = _live(conn, sid)
    mark = None if watermark is None else order.seq_of(conn, watermark)
    seqs = dict(
        conn.execute("SELECT id, seq FROM messages WHERE session_id = ? AND state = 'live'", (sid,))
    )
    before = [r for r in live if mark is None or seqs[r[0]] <= mark]
    after = [r for r in live if mark is not None and seqs[r[0]] > mark]
    if not before:
        raise InvalidOpError(
            "nothing-to-compact", f"session {sid!r} has no live rows at or below the watermark"
        )
    head, tail = rows[: len(rows) - tail_count], rows[len(rows) - tail_count :]
    tail_idx = _match_tail(before, tail)
    origins: list[int | None] = []
    used = set(tail_idx)
    matched: list[int | None] = []  # per row of ``rows``: the index of its original in before
    for row in head:  # a verbatim re-sent message outside the tail: link, keep the original visible
        want = identity(row)
        idx = next(
            (
                i
                for i in range(len(before) - 1, -1, -1)
                if i not in used and _same(before[i][3:], want)
            ),
            None,
        )
        if idx is not None:
            used.add(idx)
        origins.append(before[idx][1] if idx is not None else None)
        matched.append(idx)
    origins += [before[i][1] for i in tail_idx]
    rows = _named_like(
        conn, sid, rows, [None if i is None else before[i] for i in matched + tail_idx]
    )
    superseded = [before[i][0] for i in tail_idx] + [r[0] for r in after]
    tail_set = set(tail_idx)
    _set_state(conn, [r[0] for i, r in enumerate(before) if i not in tail_set], "compacted")
    _set_state(conn, superseded, "superseded")
    written = _insert(conn, sid, rows, origins, arrived_at, batch_id)
    if after:  # byte-exact clones with fresh ids, in order, after the compacted set
        cols = ", ".join(ROW_COLUMNS)
        key = order.current(arrived_at)
        for r in after:
            # A row acknowledged before this op (it arrived during the summary) goes right
            # after the compacted set; one acknowledged after it (another host's, applied
            # first) keeps its own place in acknowledgement order, beside its original.
            own = conn.execute(
                "SELECT ack_us, ack_tag, ack_at FROM messages WHERE id = ?", (r[0],)
            ).fetchone()
            at = max(key, tuple(own))
            conn.execute(
                f"INSERT INTO messages (session_id, {cols}, arrived_at, batch, state, "
                "origin_id, seq, pos, ack_us, ack_tag, ack_at) "
                f"SELECT session_id, {cols}, arrived_at, batch, 'live', "
                "coalesce(origin_id, id), ?, pos, ?, ?, ? FROM messages WHERE id = ?",
                (order.place(conn, sid, 1, at)[0], *at, r[0]),
            )
        written += len(after)
    check_tool_results(conn, sid)
    return written


def _user_turn(conn: apsw.Connection, sid: str, turn: int) -> int:
    users = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND state = 'live' AND role = 'user' "
            "ORDER BY seq",
            (sid,),
        )
    ]
    if turn == 0 or abs(turn) > len(users):
        raise InvalidOpError(
            "no-such-turn", f"session {sid!r} has {len(users)} live user turn(s); user_turn={turn}"
        )
    return users[turn - 1] if turn > 0 else users[turn]


def _check_head(conn: apsw.Connection, sid: str, data: dict) -> None:
    """The compare-and-swap guard: refuse (``stale-head``) unless the last live row in
    transcript order is ``expect_head_id`` (store id) or carries ``expect_head_ext_id``
    (producer id). Store ids are the applying store's own; a producer id is in the spool
    record, so it names the same row when the spool is replayed into another store."""
    expect, ext = opt(data, "expect_head_id", int), opt(data, "expect_head_ext_id", (str, int))
    if expect is None and ext is None:
        return
    sql = "SELECT id, ext_id FROM messages WHERE session_id = ? AND state = 'live' ORDER BY seq"
    top = conn.execute(sql + " DESC LIMIT 1", (sid,)).fetchone() or (None, None)
    head, wanted = (top[0], expect) if expect is not None else (top[1], scrub(str(ext)))
    if head != wanted:
        raise InvalidOpError(
            "stale-head", f"session {sid!r} live head is {head!r}, the op expected {wanted!r}"
        )


def _rewind_from(conn: apsw.Connection, sid: str, first: int | None) -> int:
    """Flip message ``first`` (an id; None: from the start) and every live row after it in
    transcript order to ``rewound``; returns rows flipped."""
    start = 0 if first is None else order.seq_of(conn, first)
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND state = 'live' AND seq >= ? "
            "ORDER BY seq",
            (sid, start),
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
    target must be a live ``user`` row. Optional ``expect_head_id`` (or ``expect_head_ext_id``)
    refuses the rewind unless the live head is that row (compare-and-swap). Returns rows
    flipped. Raises ``InvalidOpError``: ``invalid-field``, ``no-such-turn`` for turn 0
    (``op_checks.check_rewind``); needing the store: ``unknown-message``,
    ``not-a-user-message``, ``not-live``, ``no-such-turn``, ``stale-head``,
    ``session-compressed``.
    """
    check_rewind(data)
    sid = data["session_id"]
    refuse_if_compressed(conn, sid, "messages.rewind")
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
    ``not-live``, ``stale-head``, ``duplicate-tool-result``, ``session-compressed``.
    """
    rows = check_replace(data, lambda messages: _rows(conn, messages, arrived_at))
    sid = data["session_id"]
    refuse_if_compressed(conn, sid, "messages.replace")
    named = _target(conn, sid, data, "from_message_id", "from_ext_id")
    if named is not None and named[2] != "live":
        raise InvalidOpError(
            "not-live", f"message {named[0]} is {named[2]}; only live rows can be replaced"
        )
    _check_head(conn, sid, data)
    ensure_session(conn, sid, arrived_at)
    _rewind_from(conn, sid, named[0] if named else None)
    rows = tool_names.fill(conn, sid, rows)
    written = _insert(conn, sid, rows, None, arrived_at, batch_id)
    check_tool_results(conn, sid, result_ids(rows))
    _record_usage(conn, sid, data["messages"], opt(data, "source", str), batch_id, arrived_at)
    return written
