"""Read-only access to ``state.db``: transcripts, session listings, search, figures.

Every method opens nothing new: a ``Reader`` holds one read-only connection (WAL readers
never block the writer). Projections (DESIGN.md, "The store"):
* ``model``   – live rows only, in OpenAI message shape;
* ``display`` – live + compacted rows, in insertion order;
* ``audit``   – every row, with its state.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from . import query as fts_query
from .connection import open_reader
from .errors import CantOpenError, mapped
from .indexer import indexed_upto

PROJECTION_STATES = {
    "model": ("live",),
    "display": ("live", "compacted"),
    "audit": ("live", "compacted", "superseded", "rewound"),
}
SNIPPET_CHARS = 160
_SESSION_KEYS = ("id", "source", "title", "model", "cwd", "started_at", "ended_at", "end_reason",
                 "parent_id", "parent_kind", "archived", "pinned", "hidden", "message_count",
                 "last_active", "preview")
_MSG_COLS = ("id, session_id, ext_id, role, content, parts, tool_calls, tool_call_id, tool_name, "
             "reasoning, finish_reason, ts, extra, state")


def _states(projection: str) -> tuple[str, ...]:
    try:
        return PROJECTION_STATES[projection]
    except KeyError:
        raise ValueError(f"projection must be one of {sorted(PROJECTION_STATES)}") from None


def _placeholders(values: tuple) -> str:
    return ", ".join("?" for _ in values)


def message_dict(row: tuple, *, with_meta: bool = True) -> dict[str, Any]:
    """A ``messages`` row as an OpenAI-shaped dict; unknown fields come back verbatim.

    ``with_meta`` adds Quill's own keys: ``message_id``, ``session_id``, ``state``, ``ts``.
    """
    (mid, sid, ext_id, role, content, parts, tool_calls, tool_call_id, tool_name,
     reasoning, finish_reason, ts, extra, state) = row
    msg: dict[str, Any] = {"role": role, "content": json.loads(parts) if parts else content}
    if tool_calls:
        msg["tool_calls"] = json.loads(tool_calls)
    for key, value in (("tool_call_id", tool_call_id), ("name", tool_name), ("reasoning", reasoning),
                       ("finish_reason", finish_reason), ("id", ext_id)):
        if value is not None:
            msg[key] = value
    if extra:
        msg.update({k: v for k, v in json.loads(extra).items() if k not in msg})
    if with_meta:
        msg.update(message_id=mid, session_id=sid, state=state, ts=ts)
    return msg


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first occurrence of any term (case-insensitive)."""
    low = text.lower()
    hits = [i for t in terms if (i := low.find(t)) >= 0]
    start = max(0, min(hits) - width // 3) if hits else 0
    piece = " ".join(text[start:start + width].split())
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(text) else "")


class Reader:
    """A read-only view of a store file. Raises ``CantOpenError`` if it does not exist."""

    def __init__(self, db_path: Path):
        self.path = Path(db_path)
        self.conn: apsw.Connection = open_reader(self.path)
        with mapped():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:  # the writer created the file but has not committed the schema yet
            self.conn.close()
            raise CantOpenError(f"{self.path} has no Quill schema yet")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_messages(self, session_id: str, projection: str = "display", *, limit: int | None = None,
                     offset: int = 0) -> list[dict[str, Any]]:
        """Messages of a session in transcript order (a list of dicts, see ``message_dict``)."""
        states = _states(projection)
        sql = (f"SELECT {_MSG_COLS} FROM messages WHERE session_id = ? AND state IN ({_placeholders(states)}) "
               "ORDER BY id LIMIT ? OFFSET ?")
        with mapped():
            rows = self.conn.execute(sql, (session_id, *states, -1 if limit is None else limit, offset)).fetchall()
        return [message_dict(r, with_meta=projection != "model") for r in rows]

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """One session row with its display message count, or None."""
        rows = self._sessions("WHERE s.id = ?", (session_id,), 1)
        return rows[0] if rows else None

    def list_sessions(self, *, source: str | None = None, limit: int = 50,
                      include_hidden: bool = False) -> list[dict[str, Any]]:
        """Sessions newest first: id, source, title, model, times, counts, preview."""
        where, args = ["1=1"], []
        if source:
            where.append("s.source = ?")
            args.append(source)
        if not include_hidden:
            where.append("s.hidden = 0")
        return self._sessions("WHERE " + " AND ".join(where), tuple(args), limit)

    def _sessions(self, where: str, args: tuple, limit: int) -> list[dict[str, Any]]:
        sql = f"""
            SELECT s.id, s.source, s.title, s.model, s.cwd, s.started_at, s.ended_at, s.end_reason,
                   s.parent_id, s.parent_kind, s.archived, s.pinned, s.hidden,
                   (SELECT count(*) FROM messages m WHERE m.session_id = s.id
                      AND m.state IN ('live', 'compacted')) AS message_count,
                   (SELECT max(m.ts) FROM messages m WHERE m.session_id = s.id) AS last_active,
                   (SELECT substr(m.content, 1, 120) FROM messages m WHERE m.session_id = s.id
                      AND m.role = 'user' AND m.state IN ('live', 'compacted') ORDER BY m.id LIMIT 1) AS preview
            FROM sessions s {where}
            ORDER BY coalesce(last_active, s.started_at) DESC LIMIT ?"""
        with mapped():
            rows = self.conn.execute(sql, (*args, limit)).fetchall()
        out = []
        for row in rows:
            item = dict(zip(_SESSION_KEYS, row))
            for flag in ("archived", "pinned", "hidden"):
                item[flag] = bool(item[flag])
            out.append(item)
        return out

    def search(self, text: str, *, limit: int = 20, session_id: str | None = None,
               role: str | None = None, source: str | None = None,
               projection: str = "display") -> list[dict[str, Any]]:
        """Messages matching ``text``, newest first.

        Hits are dicts: ``session_id``, ``message_id``, ``role``, ``snippet``, ``ts``, ``title``.
        Covers the FTS index plus a scan of the not-yet-indexed tail, so a committed message is
        found before the indexer reaches it. Any user string is accepted (see ``query``).
        """
        match = fts_query.sanitize(text)
        terms = fts_query.terms(text)
        if not match:
            return []
        states = _states(projection)
        filters, args = [f"m.state IN ({_placeholders(states)})"], list(states)
        for column, value in (("m.session_id", session_id), ("m.role", role), ("s.source", source)):
            if value is not None:
                filters.append(f"{column} = ?")
                args.append(value)
        cond = " AND ".join(filters)
        cols = "m.id, m.session_id, m.role, m.content, m.tool_calls, m.ts, s.title"
        with mapped():
            upto = indexed_upto(self.conn)
            tail = self.conn.execute(
                f"SELECT {cols} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id > ? AND {cond} ORDER BY m.id DESC", (upto, *args)).fetchall()
            hits = [r for r in tail if all(t in ((r[3] or "") + " " + (r[4] or "")).lower() for t in terms)]
            if len(hits) < limit:
                hits += self.conn.execute(
                    f"SELECT {cols} FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                    f"JOIN sessions s ON s.id = m.session_id "
                    f"WHERE messages_fts MATCH ? AND f.rowid <= ? AND {cond} ORDER BY f.rowid DESC LIMIT ?",
                    (match, upto, *args, limit - len(hits))).fetchall()
        return [{"session_id": r[1], "message_id": r[0], "role": r[2], "ts": r[5], "title": r[6],
                 "snippet": snippet(r[3] or r[4] or "", terms)} for r in hits[:limit]]

    def job_runs(self, *, job: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Recent job runs, newest first: job, started_at, ended_at, outcome, figures, error."""
        sql = ("SELECT job, started_at, ended_at, outcome, figures, error FROM job_runs "
               + ("WHERE job = ? " if job else "") + "ORDER BY id DESC LIMIT ?")
        with mapped():
            rows = self.conn.execute(sql, ((job,) if job else ()) + (limit,)).fetchall()
        return [{"job": r[0], "started_at": r[1], "ended_at": r[2], "outcome": r[3],
                 "figures": json.loads(r[4] or "{}"), "error": r[5]} for r in rows]

    def figures(self) -> dict[str, Any]:
        """Counts and positions for ``quill status``: sessions, messages, cursor, FTS lag."""
        with mapped():
            c = self.conn
            cursor = c.execute('SELECT segment, "offset", updated_at FROM spool_cursor WHERE id = 1').fetchone()
            upto = indexed_upto(c)
            return {
                "sessions": c.execute("SELECT count(*) FROM sessions").fetchone()[0],
                "messages": c.execute("SELECT count(*) FROM messages").fetchone()[0],
                "fts_indexed_upto": upto,
                "fts_pending": c.execute("SELECT count(*) FROM messages WHERE id > ?", (upto,)).fetchone()[0],
                "cursor": f"{cursor[0]}:{cursor[1]}" if cursor else None,
                "cursor_updated_at": cursor[2] if cursor else None,
                "applied_batches": c.execute("SELECT count(*) FROM applied_batches").fetchone()[0],
            }
