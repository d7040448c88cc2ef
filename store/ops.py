"""Applying one spool op to the store, inside a transaction the caller opened.

Each function takes the writer connection, the op's ``data`` dict, the batch id and the
arrival time (seconds), validates everything before writing (so an invalid op raises
``InvalidOpError`` having changed nothing) and returns the number of message rows written.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import apsw

from .errors import InvalidOpError
from .normalize import ROW_COLUMNS, message_row, scrub

EDGE_KINDS = frozenset({"compression", "branch", "reset", "delegate"})
TITLE_MAX_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_INSERT_MESSAGE = (
    f"INSERT INTO messages (session_id, {', '.join(ROW_COLUMNS)}, arrived_at, batch_id) "
    f"VALUES (?, {', '.join('?' for _ in ROW_COLUMNS)}, ?, ?) "
    "ON CONFLICT (session_id, ext_id) WHERE ext_id IS NOT NULL DO NOTHING"
)


def _session_id(data: dict) -> str:
    sid = data.get("session_id")
    if not isinstance(sid, str) or not sid or len(sid) > 512:
        raise InvalidOpError("invalid-session-id", f"session_id must be a non-empty string (≤512 chars), got {sid!r}")
    return sid


def _opt(data: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise InvalidOpError("invalid-field", f"{key!r} has the wrong type ({type(value).__name__})")
    return value


def _ensure_session(conn: apsw.Connection, sid: str, arrived_at: float, source: str | None = None) -> None:
    conn.execute("INSERT OR IGNORE INTO sessions (id, source, created_at, started_at) VALUES (?, ?, ?, ?)",
                 (sid, source, arrived_at, arrived_at))


def session_create(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Create a session, or fill the fields an earlier op left empty (existing values win)."""
    sid = _session_id(data)
    kind = _opt(data, "parent_kind", str)
    if kind is not None and kind not in EDGE_KINDS:
        raise InvalidOpError("invalid-field", f"parent_kind must be one of {sorted(EDGE_KINDS)}")
    meta = _opt(data, "meta", dict)
    started = _opt(data, "started_at", (int, float))
    conn.execute(
        """INSERT INTO sessions (id, source, model, title, cwd, parent_id, parent_kind,
                                 started_at, meta, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET
               source = coalesce(sessions.source, excluded.source),
               model = coalesce(sessions.model, excluded.model),
               title = coalesce(sessions.title, excluded.title),
               cwd = coalesce(sessions.cwd, excluded.cwd),
               parent_id = coalesce(sessions.parent_id, excluded.parent_id),
               parent_kind = coalesce(sessions.parent_kind, excluded.parent_kind),
               started_at = CASE WHEN excluded.started_at < sessions.started_at
                                 THEN excluded.started_at ELSE sessions.started_at END,
               meta = coalesce(sessions.meta, excluded.meta)""",
        (sid, _opt(data, "source", str), _opt(data, "model", str), _clean_title(_opt(data, "title", str)),
         _opt(data, "cwd", str), _opt(data, "parent_id", str), kind,
         float(started) if started is not None else arrived_at,
         json.dumps(meta, ensure_ascii=False) if meta else None, arrived_at))
    return 0


def messages_append(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Append a batch of messages, all or nothing. Messages whose ``id`` the session already
    holds are skipped (idempotent re-import). Returns rows inserted."""
    sid = _session_id(data)
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise InvalidOpError("invalid-field", "messages.append needs a 'messages' list")
    rows = [(sid, *message_row(m, arrived_at), arrived_at, batch_id) for m in messages]
    _ensure_session(conn, sid, arrived_at, _opt(data, "source", str))
    before = conn.total_changes()
    conn.executemany(_INSERT_MESSAGE, rows)
    return conn.total_changes() - before


def session_end(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """End a session; the first end reason wins (a later end changes nothing)."""
    sid = _session_id(data)
    reason = _opt(data, "reason", str) or "ended"
    ended = _opt(data, "ended_at", (int, float))
    _ensure_session(conn, sid, arrived_at)
    conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                 (float(ended) if ended is not None else arrived_at, reason, sid))
    return 0


def _clean_title(title: str | None) -> str | None:
    if title is None:
        return None
    title = " ".join(_CONTROL.sub(" ", scrub(title)).split())[:TITLE_MAX_CHARS]
    return title or None


def session_title(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Set (or, with an empty title, clear) a session's title: control characters stripped,
    at most ``TITLE_MAX_CHARS``; refused when another session already has the title."""
    sid = _session_id(data)
    title = _clean_title(_opt(data, "title", str))
    if title is not None:
        clash = conn.execute("SELECT id FROM sessions WHERE title = ? AND id != ?", (title, sid)).fetchone()
        if clash:
            raise InvalidOpError("duplicate-title", f"title {title!r} is already used by session {clash[0]}")
    _ensure_session(conn, sid, arrived_at)
    conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, sid))
    return 0


def session_flags(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Set any of the ``archived``, ``pinned``, ``hidden`` flags (booleans)."""
    sid = _session_id(data)
    flags = {k: data[k] for k in ("archived", "pinned", "hidden") if k in data}
    if not flags or not all(isinstance(v, bool) for v in flags.values()):
        raise InvalidOpError("invalid-field", "session.flags needs boolean archived/pinned/hidden")
    _ensure_session(conn, sid, arrived_at)
    for key, value in flags.items():
        conn.execute(f"UPDATE sessions SET {key} = ? WHERE id = ?", (int(value), sid))
    return 0


def session_read(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Move the last-read watermark to ``message_id`` (or to the newest message)."""
    sid = _session_id(data)
    mid = _opt(data, "message_id", int)
    if mid is None:
        row = conn.execute("SELECT max(id) FROM messages WHERE session_id = ?", (sid,)).fetchone()
        mid = row[0]
    conn.execute("UPDATE sessions SET last_read_id = max(coalesce(last_read_id, 0), ?) WHERE id = ?", (mid, sid))
    return 0


Applier = Callable[[apsw.Connection, dict, str, float], int]

#: The ops this store version applies. Ops missing here (compaction, rewind, replace) are
#: quarantined as ``unsupported-op`` and can be replayed by a version that has them.
APPLIERS: dict[str, Applier] = {
    "session.create": session_create,
    "messages.append": messages_append,
    "session.end": session_end,
    "session.title": session_title,
    "session.flags": session_flags,
    "session.read": session_read,
}
