"""``messages.restore``: message rows written back exactly as an export recorded them.

``quill export --format quill`` (ops/transfer/export.py) writes a session as ops; its messages
travel in ``messages.restore`` so that importing the export into an empty store reproduces
every row's state (live, compacted, superseded, rewound) and copy lineage (``origin_id``),
which a replay of appends cannot. Payload (docs/ops.md)::

    {"session_id": "s1", "offset": 0, "source": "cli", "started_at": 1767225600.0,
     "rows": [{"message": {...OpenAI shape + extras...}, "state": "compacted",
               "origin": null}, ...]}

* ``offset`` = how many message rows the session holds before this op: a session's rows are
  restored in order, in chunks, and a chunk applies only at its place (else
  ``restore-out-of-order``: the session already has other rows, or a chunk is missing), so
  the op can never duplicate or interleave rows;
* ``source`` / ``started_at`` (optional) = those of a session that had no ``session.create``
  (a placeholder): they make the placeholder the op creates the same as the exported one;
* ``blob_refs`` (optional) = hashes of blobs the rows hold as references (``quill-blob:<sha>``)
  instead of inline: the export sends a payload once per session, so its later rows refer
  to a blob an earlier op (or this one) stored; one the store lacks refuses the op
  (``missing-blob``) instead of storing a reference nothing resolves;
* ``origin`` = the 0-based position (in the session's row order) of the row this one is a
  copy of, earlier than itself;
* the messages go through the same normaliser and blob store as ``messages.append``; usage
  is not derived from them (the export carries every usage row as ``usage.record``).
"""

from __future__ import annotations

import apsw

from quill.store.apply import batches, order
from quill.store.apply.message_checks import STATES, check_restore, restore_blob_refs
from quill.store.apply.message_rows import (
    _INSERT_STATE,
    INSERT_STATE_ID,
    _rows,
    next_id,
)  # one normaliser and blob path for every write
from quill.store.apply.rules import atomic, ensure_session, opt
from quill.store.errors import InvalidOpError

__all__ = ["STATES", "check_restore", "messages_restore"]


@atomic
def messages_restore(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Insert ``data['rows']`` verbatim (state, origin) at position ``offset`` of the session.
    Returns rows inserted. Raises ``InvalidOpError``: ``invalid-field`` and message reasons
    (``op_checks.check_restore``, run first; its messages are normalised and their blobs
    stored once, by ``_rows``), ``missing-blob`` and ``restore-out-of-order`` (need the
    store)."""
    offset, items, rows = check_restore(data, lambda messages: _rows(conn, messages, arrived_at))
    sid = data["session_id"]  # a valid id: check_restore
    started = opt(
        data, "started_at", (int, float)
    )  # a REAL column: an int beyond 64 bits binds as a float
    ensure_session(
        conn, sid, arrived_at, opt(data, "source", str), None if started is None else float(started)
    )
    held = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
    if held != offset:
        raise InvalidOpError(
            "restore-out-of-order",
            f"session {sid!r} holds {held} rows; this chunk starts at {offset}",
        )
    # after _rows stored this op's own payloads: a reference may name one of them
    for sha in restore_blob_refs(data):
        if conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)).fetchone() is None:
            raise InvalidOpError(
                "missing-blob",
                f"a row of session {sid!r} refers to blob {sha} the store does not hold "
                "(the export's earlier op carrying it was not applied)",
            )
    ids = [
        r[0]
        for r in conn.execute("SELECT id FROM messages WHERE session_id = ? ORDER BY seq", (sid,))
    ]
    key = order.current(arrived_at)
    batch = batches.ref(conn, batch_id) if rows else None
    for item, row in zip(items, rows):
        origin = item.get("origin")
        origin_id = ids[origin] if origin is not None else None
        seq = order.place(conn, sid, 1, key)[0]
        pos = order.positions_of(conn, [origin_id])[origin_id] if origin_id is not None else seq
        values = (sid, *row, arrived_at, batch, item["state"], origin_id, seq, pos, *key)
        first = next_id(conn)
        conn.execute(
            *((_INSERT_STATE, values) if first is None else (INSERT_STATE_ID, (first, *values)))
        )
        ids.append(
            conn.execute("SELECT max(id) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
        )
    return len(rows)
