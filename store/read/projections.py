"""The three projections of a session's transcript, on any connection (docs/architecture.md
"The store").

* ``model``   – live rows only, in OpenAI message shape (no Quill keys), in transcript order
  ``seq`` (acknowledgement order, store/apply/order.py): what the model is fed;
* ``display`` – live + compacted rows, one row per display position ``pos`` (a compaction
  copy shares its original's position, the original's ``seq``); the representative of a
  position is its live row, else its latest row (highest ``seq``); ordered by position, so
  a carried message appears once, where it first appeared;
* ``audit``   – every row with its state, in ``seq`` order.
Message ids name rows (cursors, read marks, rewind targets); they are arrival order, not
transcript order: every order and bound here is by ``seq``/``pos``.
Structured fields (parts, tool_calls, extra) are JSON-decoded exactly once, here.

Invariant: every display read — full, ``limit``/``offset`` pages, ``latest`` N, ``after_id``
keyset pages, search context, export — is a slice of the one ordered sequence ``read``
computes with ``SELECT … ORDER BY position`` over the same deduplication.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store import packed
from quill.store.apply import blobs
from quill.store.errors import stored_json
from quill.store.read import clipped

PROJECTION_STATES: dict[str, tuple[str, ...]] = {
    "model": ("live",),
    "display": ("live", "compacted"),
    "audit": ("live", "compacted", "superseded", "rewound"),
}
#: LIMIT value meaning "no limit" in both SQLite and PostgreSQL (SQLite's -1 is an error
#: in PostgreSQL, and SQLite refuses NULL).
NO_LIMIT = 2**62
MSG_COLS = (
    "id, session_id, ext_id, role, content, parts, tool_calls, tool_call_id, tool_name, "
    "reasoning, finish_reason, ts, extra, state"
)


def states(projection: str) -> tuple[str, ...]:
    """The message states a projection shows. Raises ``ValueError`` for an unknown name."""
    try:
        return PROJECTION_STATES[projection]
    except KeyError:
        raise ValueError(f"projection must be one of {sorted(PROJECTION_STATES)}") from None


def message_dict(row: tuple, *, with_meta: bool = True) -> dict[str, Any]:
    """A ``messages`` row (``MSG_COLS`` order) as an OpenAI-shaped dict; unknown fields come
    back verbatim. ``with_meta`` adds Quill's keys: ``message_id``, ``session_id``, ``state``,
    ``ts`` (epoch seconds)."""
    (
        mid,
        sid,
        ext_id,
        role,
        content,
        parts,
        tool_calls,
        tool_call_id,
        tool_name,
        reasoning,
        finish_reason,
        ts,
        extra,
        state,
    ) = row
    text = packed.unpack(content)  # SQLite stores a long text packed
    msg: dict[str, Any] = {
        "role": role,
        "content": stored_json(parts, f"parts of message {mid}") if parts else text,
    }
    if tool_calls:
        msg["tool_calls"] = stored_json(tool_calls, f"tool calls of message {mid}")
    for key, value in (
        ("tool_call_id", tool_call_id),
        ("name", tool_name),
        ("reasoning", reasoning),
        ("finish_reason", finish_reason),
        ("id", ext_id),
    ):
        if value is not None:
            msg[key] = value
    if extra:
        fields = stored_json(extra, f"extra fields of message {mid}")
        msg.update({k: v for k, v in fields.items() if k not in msg})
    if with_meta:
        msg.update(message_id=mid, session_id=sid, state=state, ts=ts)
    return msg


def _ordered_sql(projection: str, where_pos: str, cols: str = MSG_COLS, hint: str = "") -> str:
    """SQL yielding ``cols`` (default ``MSG_COLS``) + position of a session's projection, in
    projection order; ``hint`` follows the table name (SQLite's ``INDEXED BY``).
    Parameters: session id, *states, [position bound], limit, offset."""
    marks = ", ".join("?" for _ in states(projection))
    if projection != "display":
        return (
            f"SELECT {cols}, seq AS p FROM messages{hint} "
            f"WHERE session_id = ? AND state IN ({marks}) "
            f"{where_pos.format(col='seq')} "
            f"ORDER BY p {{order}} LIMIT ? OFFSET ?"
        )
    # Filtering by position before the window keeps whole partitions, so the dedupe is exact.
    return (
        f"SELECT {cols}, p FROM ("
        f"SELECT {cols}, pos AS p, row_number() OVER ("
        f"PARTITION BY pos ORDER BY state = 'live' DESC, seq DESC) AS rn "
        f"FROM messages{hint} WHERE session_id = ? AND state IN ({marks}) "
        f"{where_pos.format(col='pos')}"
        f") AS d WHERE rn = 1 ORDER BY p {{order}} LIMIT ? OFFSET ?"
    )


def _col(projection: str, table: str = "") -> str:
    """The position column of ``projection`` (``pos`` for display, else ``seq``)."""
    return f"{table}{'pos' if projection == 'display' else 'seq'}"


def position(conn: apsw.Connection, projection: str, message_id: int) -> int | None:
    """The position of ``message_id`` in a projection's order (its ``seq``, or for display its
    ``pos``), or None for an unknown id."""
    col = _col(projection)
    row = conn.execute(f"SELECT {col} FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row[0] if row else None


def _rows(
    conn: apsw.Connection,
    session_id: str,
    projection: str,
    *,
    limit: int | None,
    offset: int,
    latest: bool,
    pos_gt: int | None = None,
    pos_lt: int | None = None,
    clip: int | None = None,
    positions: list[int] | None = None,
) -> list[dict[str, Any]]:
    """The rows of ``read``; ``positions``, when given, receives each row's position."""
    bounds, args = [], []
    for value, op in ((pos_gt, ">"), (pos_lt, "<")):
        if value is not None:
            bounds.append(f"AND {{col}} {op} ?")
            args.append(value)
    if clip is not None:
        # Ids and states from the index alone (a SQLite row read for them would walk a large
        # value's overflow chain), then each row as ``clipped`` reads it.
        hint = clipped.index_hint(conn, "messages_session_state")
        sql = _ordered_sql(projection, " ".join(bounds), "id, state", hint)
    else:
        sql = _ordered_sql(projection, " ".join(bounds))
    sql = sql.format(order="DESC" if latest else "ASC")
    rows = conn.execute(
        sql, (session_id, *states(projection), *args, NO_LIMIT if limit is None else limit, offset)
    ).fetchall()
    if latest:
        rows.reverse()
    if positions is not None:
        positions.extend(r[-1] for r in rows)
    if clip is None:
        return inflate_rows(conn, [r[:-1] for r in rows], with_meta=projection != "model")
    plain, cuts = clipped.rows(conn, MSG_COLS, [(r[0], r[1]) for r in rows], clip)
    out = []
    for row, cut in zip(plain, cuts):
        msg = message_dict(row)  # blob references stay references: nothing large is read
        if cut:
            msg["clipped"] = cut
        out.append(msg)
    return out


def inflate_rows(
    conn: apsw.Connection, rows: list[tuple], *, with_meta: bool = True
) -> list[dict[str, Any]]:
    """``message_dict`` for each ``MSG_COLS`` row, with blob references in parts and extras
    replaced by the stored payloads (store/apply/blobs.py), so reads return what was written."""
    # Every payload the rows reference in one query, not one per reference.
    cache = blobs.get_many(conn, blobs.referenced(t for r in rows for t in (r[5], r[12])))
    out = []
    for r in rows:
        msg = message_dict(r, with_meta=with_meta)
        if blobs.has_refs(r[5]) or blobs.has_refs(r[12]):  # parts, extra
            msg = blobs.inflate(conn, msg, cache)
        out.append(msg)
    return out


def read(
    conn: apsw.Connection,
    session_id: str,
    projection: str = "display",
    *,
    limit: int | None = None,
    offset: int = 0,
    latest: bool = False,
    after_id: int | None = None,
    before_id: int | None = None,
    clip: int | None = None,
) -> list[dict[str, Any]]:
    """A session's messages in ``projection`` (list of dicts, see ``message_dict``; model rows
    carry no Quill keys), oldest first.

    ``limit``/``offset`` page from the start; ``latest=True`` takes the last ``limit`` rows
    (skipping ``offset`` from the end) and still returns them oldest first; ``after_id`` /
    ``before_id`` (message ids) keep only rows positioned after / before that message.
    ``clip`` (characters, for pages that show the start of each text): texts longer than
    ``clip`` come back as their first ``clip`` characters, structured fields over
    ``clipped.STRUCT_MAX_BYTES`` as absent, blob references uninflated, each cut named in
    the message's ``clipped`` (``{field: full size in bytes}``); every view then carries
    Quill's keys. Cost per row does not grow with the row's size, but for a packed text's
    checksum (``store/read/clipped.py``).
    Raises ``ValueError`` for an unknown projection, a negative limit/offset or ``clip`` < 1.
    """
    states(projection)
    if (limit is not None and limit < 0) or offset < 0:
        raise ValueError("limit and offset must be ≥ 0")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int) or clip < 1):
        raise ValueError("clip must be a whole number of characters ≥ 1")
    gt = lt = None
    if after_id is not None:
        pos = position(conn, projection, after_id)
        gt = pos if pos is not None else 2**62
    if before_id is not None:
        pos = position(conn, projection, before_id)
        lt = pos if pos is not None else -1
    return _rows(
        conn,
        session_id,
        projection,
        limit=limit,
        offset=offset,
        latest=latest,
        pos_gt=gt,
        pos_lt=lt,
        clip=clip,
    )


def neighbors(
    conn: apsw.Connection, session_id: str, projection: str, message_id: int
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The messages just before and just after ``message_id`` in ``projection`` order (None at
    either end) — the same rows a full ``read`` shows around it. Cost: two index probes and
    two one-position reads, whatever the session's length."""
    pos = position(conn, projection, message_id)
    if pos is None:
        return None, None
    sts = states(projection)
    col = _col(projection)
    marks = ", ".join("?" for _ in sts)
    out: list[dict[str, Any] | None] = []
    for agg, op in (("max", "<"), ("min", ">")):
        near = conn.execute(
            f"SELECT {agg}({col}) FROM messages WHERE session_id = ? "
            f"AND state IN ({marks}) AND {col} {op} ?",
            (session_id, *sts, pos),
        ).fetchone()[0]
        rows = (
            []
            if near is None
            else _rows(
                conn,
                session_id,
                projection,
                limit=1,
                offset=0,
                latest=False,
                pos_gt=near - 1,
                pos_lt=near + 1,
            )
        )
        out.append(rows[0] if rows else None)
    return out[0], out[1]


def representative(conn: apsw.Connection, message_id: int) -> int:
    """The id display shows for ``message_id``'s position (live copy, else newest row);
    ``message_id`` itself when its position has no visible row."""
    row = conn.execute(
        "SELECT r.id FROM messages m JOIN messages r ON r.session_id = m.session_id "
        "AND r.pos = m.pos "
        "WHERE m.id = ? AND r.state IN ('live', 'compacted') "
        "ORDER BY r.state = 'live' DESC, r.seq DESC LIMIT 1",
        (message_id,),
    ).fetchone()
    return row[0] if row else message_id


def neighbor_positions_sql(projection: str) -> tuple[str, tuple[str, ...]]:
    """Two SQL columns over a row aliased ``m``: the positions just before and just after
    ``m``'s own position in its session's ``projection`` order (NULL at an end), and their
    parameters. For display the positions are ``pos``, so ``m`` may be any row of its
    position (the messages_session_state and messages_seq indexes serve the probes)."""
    sts = states(projection)
    marks = ", ".join("?" for _ in sts)
    mine, theirs = _col(projection, "m."), _col(projection, "n.")
    sql = ", ".join(
        f"(SELECT {agg}({theirs}) FROM messages n WHERE n.session_id = m.session_id "
        f"AND n.state IN ({marks}) AND {theirs} {op} {mine})"
        for agg, op in (("max", "<"), ("min", ">"))
    )
    return sql, (*sts, *sts)


def neighbors_many(
    conn: apsw.Connection, projection: str, hits: list[tuple[str, int]]
) -> dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """``neighbors`` for a page of ``(session_id, message_id)`` hits in two queries, whatever
    the page size: one finds each hit's adjacent positions (``neighbor_positions_sql``), one
    reads the rows at them (``neighbor_rows``). Returns ``{message_id: (before, after)}``."""
    if not hits:
        return {}
    cols, cargs = neighbor_positions_sql(projection)
    marks = ", ".join("?" for _ in hits)
    near = conn.execute(
        f"SELECT m.id, m.session_id, {cols} FROM messages m WHERE m.id IN ({marks})",
        (*cargs, *[mid for _sid, mid in hits]),
    ).fetchall()
    return neighbor_rows(conn, projection, near)


def neighbor_rows(
    conn: apsw.Connection, projection: str, near: list[tuple[int, str, int | None, int | None]]
) -> dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """The rows at the positions ``near`` names — ``(message_id, session_id, position before,
    position after)`` each — in one query: for display, each position's representative (live
    first, then the newest row: the rule ``_ordered_sql`` applies). Returns ``{message_id:
    (before, after)}`` as ``message_dict``s with blobs inflated (None at an end)."""
    sts = states(projection)
    marks = ", ".join("?" for _ in sts)
    col = _col(projection)
    wanted = {(sid, p) for _mid, sid, lo, hi in near for p in (lo, hi) if p is not None}
    rows: dict[tuple[str, int], tuple] = {}
    if wanted:
        pairs = sorted(wanted)
        values = ", ".join("(?, ?)" for _ in pairs)
        found = conn.execute(
            f"WITH w(wsid, wpos) AS (VALUES {values}) "
            f"SELECT {MSG_COLS}, {col}, seq FROM w JOIN messages "
            f"ON session_id = wsid AND {col} = wpos WHERE state IN ({marks})",
            (*[v for pair in pairs for v in pair], *sts),
        ).fetchall()
        for r in found:  # representative per position: live first, then the latest seq
            key = (r[1], r[-2])
            best = rows.get(key)
            if best is None or ((r[13] == "live"), r[-1]) > ((best[13] == "live"), best[-1]):
                rows[key] = r
    picked = sorted({id(r): r for r in rows.values()}.values(), key=lambda r: r[0])
    dicts = dict(
        zip(
            (r[0] for r in picked),
            inflate_rows(conn, [r[:-2] for r in picked], with_meta=projection != "model"),
        )
    )
    out: dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
    for mid, sid, lo, hi in near:
        before = rows.get((sid, lo)) if lo is not None else None
        after = rows.get((sid, hi)) if hi is not None else None
        out[mid] = (
            None if before is None else dicts[before[0]],
            None if after is None else dicts[after[0]],
        )
    return out


#: SQL column over a row aliased ``m``: the id display shows for ``m``'s position
#: (``representative``'s rule), NULL when the position has no visible row.
REPRESENTATIVE_SQL = (
    "(SELECT r.id FROM messages r WHERE r.session_id = m.session_id "
    "AND r.pos = m.pos "
    "AND r.state IN ('live', 'compacted') "
    "ORDER BY r.state = 'live' DESC, r.seq DESC LIMIT 1)"
)


def representatives(conn: apsw.Connection, message_ids: list[int]) -> dict[int, int]:
    """``representative`` for many ids in one query: ``{message_id: display id}``."""
    if not message_ids:
        return {}
    marks = ", ".join("?" for _ in message_ids)
    rows = conn.execute(
        f"SELECT m.id, {REPRESENTATIVE_SQL} FROM messages m WHERE m.id IN ({marks})", message_ids
    ).fetchall()
    return {mid: rep if rep is not None else mid for mid, rep in rows}
