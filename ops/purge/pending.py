"""Purges asked for and not finished: what ``quill doctor`` and ``quill status`` report.

A ``sessions.delete`` with ``purge: true`` asks for the session's copies outside the store
to go (``ops.purge.procedure``). ``quill sessions delete --purge`` appends it, waits for the
writer to apply it, then purges; a kill anywhere after the append (before the purge wrote its
plan file, or a delete pushed with ``purge: true`` by another client that never ran the purge)
leaves the content in the spool with nothing on disk saying so. So the spool itself is the
evidence: a purge is **pending** for session S when an *applied* ``sessions.delete`` with
``purge: true`` names S (position before the store's cursor), S is absent from the store
(a purge refuses a session that exists), and a record before that delete still carries
``data.session_id`` = S and is not a tombstone or a delete (the records a purge keeps,
``ops.purge.plan._KEPT_OPS``). A completed purge tombstoned all of them, so it is not pending.

Cost: one read of every segment file with a byte filter (only lines naming
``sessions.delete`` and ``purge``, then only lines naming a pending session's id as a JSON
string, are decoded); no store write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool import Position, record
from quill.spool.lines import OverLimit, iter_lines
from quill.spool.purge import PURGED_OP
from quill.spool.segments import list_segments, segment_name
from quill.store.errors import CantOpenError
from quill.store.read.reader import Reader


def _lines(spool_dir: Path) -> Any:
    """(Position, raw line) for every line of every segment, oldest first; a segment that
    vanished (GC) is skipped. Bounded memory: of a line over the default record-size limit
    only its head is given (``spool.lines``), which names its op and session."""
    for n in list_segments(spool_dir):
        try:
            for offset, line in iter_lines(spool_dir / segment_name(n), DEFAULTS.max_record_bytes):
                yield Position(n, offset), line.head if isinstance(line, OverLimit) else line
        except FileNotFoundError:
            continue


def _store(db_path: Path) -> Reader | None:
    """A reader on ``db_path``, None when it has no Quill schema yet (nothing applied)."""
    try:
        return Reader(db_path)
    except CantOpenError:
        return None


def pending(spool_dir: Path, db_path: Path | None = None, *, reader: Any = None) -> list[str]:
    """Session ids with a pending purge (module doc), sorted; empty when none or when there is
    no store yet (nothing is applied then). The store is ``reader`` (an open ``Reader``: its
    store errors propagate, for the caller's guard, ``ops.status.guard.read_store``) or the
    SQLite file ``db_path`` (opened here; raises the store error tree when it is damaged)."""
    spool_dir = Path(spool_dir)
    if not spool_dir.exists():
        return []
    if reader is not None:
        return _pending(spool_dir, reader)
    if db_path is None or not Path(db_path).exists():
        return []
    opened = _store(Path(db_path))
    if opened is None:
        return []
    with opened as r:
        return _pending(spool_dir, r)


def _pending(spool_dir: Path, r: Any) -> list[str]:
    cursor = r.figures()["cursor"]
    if not cursor:
        return []
    cursor_pos = Position.parse(cursor)
    bounds: dict[str, Position] = {}
    for pos, line in _lines(spool_dir):
        if pos >= cursor_pos:
            break
        if b"sessions.delete" not in line or b"purge" not in line:
            continue
        rec = record.decode_lenient(line)
        if not rec or rec.get("op") != "sessions.delete" or not isinstance(rec.get("data"), dict):
            continue
        if rec["data"].get("purge") is True:
            for sid in rec["data"].get("session_ids") or []:
                if isinstance(sid, str):
                    bounds[sid] = pos  # the newest applied purge delete of sid
    bounds = {s: b for s, b in bounds.items() if r.get_session(s) is None}
    if not bounds:
        return []
    needles = {json.dumps(s).encode(): s for s in bounds}
    left: set[str] = set()
    newest = max(bounds.values())
    for pos, line in _lines(spool_dir):
        if pos >= newest or len(left) == len(bounds):
            break
        if not any(n in line for n in needles):
            continue
        rec = record.decode_lenient(line)
        if (
            not rec
            or rec.get("op") in ("sessions.delete", PURGED_OP)
            or not isinstance(rec.get("data"), dict)
        ):
            continue
        sid = rec["data"].get("session_id")
        if isinstance(sid, str) and sid in bounds and pos < bounds[sid]:
            left.add(sid)
    return sorted(left)
