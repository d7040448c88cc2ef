"""Reading a Quill export back (``quill import`` of a file ``quill export --format quill``
wrote, ``ops/transfer/export.py``): recognising its header, parsing its op lines, appending
the ops to the spool as they are.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

from quill.ops.importers.source import Source, opened
from quill.ops.transfer.export import HEADER_KEY
from quill.store.apply.deletes import DELETIONS_SEEN


def is_quill_export(path: Any) -> bool:
    """Whether a file (a path, or a ``Source``: one version read from one descriptor) starts
    with a Quill export header line."""
    try:
        with opened(path) as src, src.reader() as fh:
            first = fh.readline(4096)
        head = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and head.get(HEADER_KEY) == 1


def read_export(path: Any) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """``(line number, op, None)`` for each op of a Quill export after its header, or
    ``(line number, None, reason)`` for a line that is not one (bad JSON, a cut-off last line,
    a value that is not an op): the caller reports it and goes on, like every importer.
    ``path``: a path or a ``Source`` (every read from its one descriptor)."""
    with (
        opened(path) as src,
        io.TextIOWrapper(src.reader(), encoding="utf-8", errors="surrogateescape") as fh,
    ):
        for lineno, line in enumerate(fh, 1):
            if lineno == 1 or not line.strip():
                continue
            try:
                op = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, and a line of undecodable bytes
                yield lineno, None, f"not JSON: {exc}"
                continue
            if (
                not isinstance(op, dict)
                or not isinstance(op.get("op"), str)
                or not isinstance(op.get("data"), dict)
            ):
                yield (
                    lineno,
                    None,
                    "not a Quill op (an object with an 'op' string and a 'data' object)",
                )
                continue
            yield lineno, op, None


def _applied(store: Any, batch: Any) -> bool:
    """Whether ``store`` (a reader, or None) has applied the batch id ``batch``."""
    if store is None or not isinstance(batch, str):
        return False
    return (
        store.conn.execute("SELECT 1 FROM applied_batches WHERE batch_id = ?", (batch,)).fetchone()
        is not None
    )


#: ``_restore_state`` outcomes.
NEW, STORED, CONFLICT = "new", "stored", "conflict"


def _restore_state(store: Any, op: dict[str, Any]) -> str:
    """What ``store`` (a reader, or None) makes of a ``messages.restore`` chunk: ``STORED``
    when the session holds its rows already, the same messages at the same places
    (``normalize.COMPARED_COLUMNS``, in the session's row order: an export read back into the
    store it came from; its batch id is the export's own, never applied there);
    ``CONFLICT`` when the session holds other rows at or after the chunk's place (the writer
    could only refuse it as ``restore-out-of-order``: another store's session of the same
    id); else ``NEW``."""
    from quill.store import packed
    from quill.store.apply.message_rows import cut_rows
    from quill.store.apply.normalize import COMPARED_COLUMNS, ROW_COLUMNS
    from quill.store.errors import InvalidOpError

    data = op["data"]
    rows, offset, sid = data.get("rows"), data.get("offset"), data.get("session_id")
    if store is None or op["op"] != "messages.restore" or not rows or not isinstance(sid, str):
        return NEW
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return NEW  # the writer refuses it with its reason
    held = store.conn.execute(
        f"SELECT {packed.columns_sql(COMPARED_COLUMNS)} FROM messages WHERE session_id = ? "
        "ORDER BY seq LIMIT ? OFFSET ?",
        (sid, len(rows), offset),
    ).fetchall()
    if not held:
        return NEW
    if len(held) != len(rows):
        return CONFLICT
    at = [ROW_COLUMNS.index(c) for c in COMPARED_COLUMNS]
    try:  # rows as the writer would store them: binary payloads cut out as blob references
        messages = [i.get("message") if isinstance(i, dict) else None for i in rows]
        read, _ = cut_rows(messages, time.time())  # times are not compared
    except InvalidOpError:
        return NEW  # the writer refuses it with its reason
    same = all(tuple(row[i] for i in at) == tuple(h) for row, h in zip(read, held))
    return STORED if same else CONFLICT


def fenced(op: dict[str, Any], deletions: int) -> dict[str, Any]:
    """``op`` (an export line naming one session) as this import spools it: its data carries
    ``deletions_seen`` = ``deletions``, the times the store had deleted its session when the
    import looked (``Reader.deletions``), so a delete applied after that makes the writer apply
    it as nothing (``store.apply.deletes.stale``: no placeholder, no restored row, no usage
    row) and ``quill spool purge`` tombstones it. Once the session was deleted, the batch id is
    derived over the deletions too (as every importer's is): the export's own ids are in
    ``applied_batches`` from before the delete, so the import that sees the delete restores
    the whole session again instead of counting its rows as stored."""
    from quill.ops.transfer.ingest import stable_batch_id

    batch = op.get("batch")
    if deletions and isinstance(batch, str):
        batch = stable_batch_id(batch, {"deletions": deletions})
    return {**op, "batch": batch, "data": {**op["data"], DELETIONS_SEEN: deletions}}


def import_export(spool: Any, path: Any, store: Any = None) -> dict[str, Any]:
    """Append the ops of a Quill export to ``spool`` as they are (their batch ids make a
    repeat a no-op), each op of a session ``fenced`` by the deletions of that session the
    store holds now (0 without a store); returns an import report entry. With ``store`` (a
    reader of the data dir's store, ``import_spool.open_store_view``), an op whose batch id
    the store has applied already is not appended again — the writer would only skip it —
    and its message rows count as ``already_stored``, so a repeat says "0 new" and the spool
    does not grow.
    A line that is not an op, an op the spool refuses (``InvalidOpError``: unknown op, data it
    cannot encode), or a restore chunk whose session the store holds with other messages
    (``_restore_state``: the writer could only quarantine it) is a problem of that line
    (``problems``: line, kind ``skipped`` — ``conflict`` for the restore chunk — reason) and
    the rest of the file is appended.
    Raises ``quill.spool.SpoolError`` for other I/O failures (disk full …)."""
    from quill.spool.errors import InvalidOpError

    sessions: dict[str, None] = {}
    problems: list[dict[str, Any]] = []
    rows = stored = 0
    deletions: dict[str, int] = {}  # session id -> its deletions when this import looked
    for lineno, op, reason in read_export(path):
        sid = op["data"].get("session_id") if op is not None else None
        if isinstance(sid, str):
            if sid not in deletions:
                deletions[sid] = store.deletions(sid) if store is not None else 0
            op = fenced(op, deletions[sid])
        state = NEW if op is None or _applied(store, op.get("batch")) else _restore_state(store, op)
        if op is not None and (state == STORED or _applied(store, op.get("batch"))):
            stored += len(op["data"].get("rows") or []) if op["op"] == "messages.restore" else 0
            continue
        if state == CONFLICT:  # never spooled: the writer could only quarantine it
            reason = (
                f"session {op['data']['session_id']!r} in this store holds other messages "
                "where this export's rows would go; import it into another data dir, or "
                "delete that session first"
            )
        elif op is not None:
            try:
                spool.append(op["op"], op["data"], batch_id=op.get("batch"))
            except InvalidOpError as exc:
                reason = str(exc)
        if reason is not None:
            kind = "conflict" if state == CONFLICT else "skipped"
            problems.append({"line": lineno, "kind": kind, "reason": reason})
            continue
        sid = op["data"].get("session_id")
        if isinstance(sid, str):
            sessions.setdefault(sid)
        if op["op"] == "messages.restore":
            rows += len(op["data"].get("rows") or [])
    return {
        "path": str(path.path if isinstance(path, Source) else path),
        "format": "quill-export",
        "skipped": None,
        "sessions": len(sessions),
        "session_ids": list(sessions),
        "messages": rows + stored,
        "new": rows,
        "already_stored": stored,
        "rewound": 0,
        "compactions": 0,
        "new_from_compactions": 0,
        "problems": problems,
    }
