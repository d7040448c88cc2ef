"""``messages.restore``: message rows written back exactly as an export recorded them.

``quill export --format quill`` (ops/export.py) writes a session as ops; its messages travel
in ``messages.restore`` so that importing the export into an empty store reproduces every
row's state (live, compacted, superseded, rewound) and copy lineage (``origin_id``), which
a replay of appends cannot (issue 14 §5). Payload (docs/ops.md)::

    {"session_id": "s1", "offset": 0, "source": "cli", "started_at": 1767225600.0,
     "rows": [{"message": {...OpenAI shape + extras...}, "state": "compacted", "origin": null}, ...]}

* ``offset`` = how many message rows the session holds before this op: a session's rows are
  restored in order, in chunks, and a chunk applies only at its place (else
  ``restore-out-of-order``: the session already has other rows, or a chunk is missing), so
  the op can never duplicate or interleave rows;
* ``source`` / ``started_at`` (optional) = those of a session that had no ``session.create``
  (a placeholder): they make the placeholder the op creates the same as the exported one;
* ``origin`` = the 0-based position (in the session's row order) of the row this one is a
  copy of, earlier than itself;
* the messages go through the same normaliser and blob store as ``messages.append``; usage
  is not derived from them (the export carries every usage row as ``usage.record``).
"""
from __future__ import annotations

import apsw

from .errors import InvalidOpError
from .op_common import atomic, ensure_session, opt, session_id
from .transcript_ops import _INSERT_STATE, INSERT_STATE_ID, _rows, next_id  # one normaliser and blob path for every write

STATES = ("live", "compacted", "superseded", "rewound")


def check_restore(data: dict) -> tuple[int, list[dict]]:
    """``(offset, rows)`` of a ``messages.restore`` if their shape is right (the checks that
    need no store; ``precheck`` runs them too), else ``InvalidOpError('invalid-field')``.
    Each row's message is checked by the applier's normaliser."""
    offset = opt(data, "offset", int)
    items = data.get("rows")
    if offset is None or offset < 0 or not isinstance(items, list) or not items:
        raise InvalidOpError("invalid-field", "messages.restore needs offset (≥ 0) and a non-empty rows list")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("state") not in STATES:
            raise InvalidOpError("invalid-field", f"rows[{i}] needs a message and a state in {STATES}")
        origin = item.get("origin")
        if origin is not None and (not isinstance(origin, int) or isinstance(origin, bool)
                                   or not 0 <= origin < offset + i):
            raise InvalidOpError("invalid-field", f"rows[{i}].origin must be an earlier position")
    return offset, items


@atomic
def messages_restore(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Insert ``data['rows']`` verbatim (state, origin) at position ``offset`` of the session.
    Returns rows inserted. Raises ``InvalidOpError``: ``invalid-field``,
    ``restore-out-of-order``, message reasons."""
    sid = session_id(data)
    offset, items = check_restore(data)
    started = opt(data, "started_at", (int, float))  # a REAL column: an int beyond 64 bits binds as a float
    ensure_session(conn, sid, arrived_at, opt(data, "source", str), None if started is None else float(started))
    held = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
    if held != offset:
        raise InvalidOpError("restore-out-of-order", f"session {sid!r} holds {held} rows; this chunk starts at {offset}")
    rows = _rows(conn, {"messages": [item.get("message") for item in items]}, arrived_at)
    ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
    for item, row in zip(items, rows):
        origin = item.get("origin")
        values = (sid, *row, arrived_at, batch_id, item["state"], ids[origin] if origin is not None else None)
        first = next_id(conn)
        conn.execute(*((_INSERT_STATE, values) if first is None else (INSERT_STATE_ID, (first, *values))))
        ids.append(conn.execute("SELECT max(id) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0])
    return len(rows)
