"""System prompts and tool-definition arrays, stored once.

Agents send the same large system prompt and tool array with every session. ``session.create``
takes ``system_prompt`` (a string) and ``tools`` (a JSON array); each distinct value is stored
once in the content-addressed blob store (store/apply/blobs.py, keyed by the SHA-256 of its text;
a tool array's text is its canonical JSON: sorted keys, compact) and the session holds a
reference row in ``session_context``. A later ``session.create`` with a different value (a
tool reload, an edited prompt) adds a row in force for the messages after the session's
newest one at that point; the same value again adds nothing, so N sessions sharing one tool
array grow the store by about the array once, not N times (bench/context_store.py).
"""

from __future__ import annotations

import json
from typing import Any

import apsw

from quill.store.apply import blobs
from quill.store.errors import InvalidOpError, stored_json

KINDS = ("system_prompt", "tools")

#: Per-session rows are kept small (integer value ids, no batch id): they are the only cost
#: that grows with the number of sessions.
DDL = """
CREATE TABLE IF NOT EXISTS context_values (
    id     INTEGER PRIMARY KEY,
    sha256 TEXT NOT NULL UNIQUE           -- blobs.sha256: the text, stored once
);
CREATE TABLE IF NOT EXISTS session_context (
    id               INTEGER PRIMARY KEY,
    session_id       TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('system_prompt', 'tools')),
    value_id         INTEGER NOT NULL,    -- context_values.id
    -- in force for this session's messages after this id (NULL: all)
    after_message_id INTEGER
);
CREATE INDEX IF NOT EXISTS session_context_session ON session_context(session_id);
CREATE INDEX IF NOT EXISTS session_context_value ON session_context(value_id);
"""

__all__ = ["DDL", "KINDS", "context", "drop", "record", "validate"]


def _text(kind: str, value: Any) -> str:
    if kind == "system_prompt":
        if not isinstance(value, str):
            raise InvalidOpError("invalid-field", "system_prompt must be a string")
        return value
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise InvalidOpError("invalid-field", "tools must be an array of tool-definition objects")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def validate(data: dict) -> None:
    """Raise ``InvalidOpError('invalid-field')`` for a ``system_prompt``/``tools`` of the wrong
    shape."""
    for kind in KINDS:
        if data.get(kind) is not None:
            _text(kind, data[kind])


def record(conn: apsw.Connection, sid: str, data: dict, batch_id: str, arrived_at: float) -> int:
    """Store ``data['system_prompt']`` / ``data['tools']`` once and reference them from
    ``sid`` when they differ from the session's current ones, in force after the session's
    newest message; with ``data['context_from_start']`` true, a session's first value of a
    kind is in force from its start even when messages arrived before it (a producer whose
    pieces arrive in any order, the OTLP endpoint). Returns reference rows added.
    ``arrived_at`` (the op's arrival time) is a new blob's ``created_at``: every value written
    depends on the op alone, so a rebuild from snapshot + spool writes the same rows."""
    added = 0
    for kind in KINDS:
        if data.get(kind) is None:
            continue
        text = _text(kind, data[kind])
        sha = blobs.put(conn, text, now=arrived_at)
        conn.execute("INSERT OR IGNORE INTO context_values (sha256) VALUES (?)", (sha,))
        value_id = conn.execute(
            "SELECT id FROM context_values WHERE sha256 = ?", (sha,)
        ).fetchone()[0]
        latest = conn.execute(
            "SELECT value_id FROM session_context WHERE session_id = ? AND kind = ? "
            "ORDER BY id DESC LIMIT 1",
            (sid, kind),
        ).fetchone()
        if latest is not None and latest[0] == value_id:
            continue
        last = conn.execute(
            "SELECT id FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (sid,)
        ).fetchone()
        after = last[0] if last else None
        if latest is None and data.get("context_from_start") is True:
            after = None  # the first value of its kind: in force from the start, as asked
        conn.execute(
            "INSERT INTO session_context (session_id, kind, value_id, after_message_id) "
            "VALUES (?, ?, ?, ?)",
            (sid, kind, value_id, after),
        )
        added += 1
    return added


def context(conn: apsw.Connection, sid: str) -> dict[str, Any]:
    """``{"system_prompt": str | None, "tools": list | None, "history": [{kind, sha256,
    after_message_id}]}``: the session's current prompt and tools and every change."""
    rows = conn.execute(
        "SELECT c.kind, v.sha256, c.after_message_id FROM session_context c "
        "JOIN context_values v ON v.id = c.value_id WHERE c.session_id = ? ORDER BY c.id",
        (sid,),
    ).fetchall()
    out: dict[str, Any] = {
        "system_prompt": None,
        "tools": None,
        "history": [{"kind": k, "sha256": s, "after_message_id": a} for k, s, a in rows],
    }
    for kind, sha, _ in rows:
        text = blobs.get(conn, sha)
        tools = kind == "tools" and text is not None
        out[kind] = stored_json(text, f"tools blob {sha}") if tools else text
    return out


def drop(conn: apsw.Connection, sid: str) -> set[str]:
    """Delete ``sid``'s references; returns the SHA-256s no session references any more
    (their ``context_values`` rows are gone; the caller drops the blobs nothing else uses)."""
    values = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT value_id FROM session_context WHERE session_id = ?", (sid,)
        ).fetchall()
    ]
    conn.execute("DELETE FROM session_context WHERE session_id = ?", (sid,))
    freed: set[str] = set()
    for value_id in values:
        if (
            conn.execute(
                "SELECT 1 FROM session_context WHERE value_id = ? LIMIT 1", (value_id,)
            ).fetchone()
            is None
        ):
            freed.add(
                conn.execute(
                    "SELECT sha256 FROM context_values WHERE id = ?", (value_id,)
                ).fetchone()[0]
            )
            conn.execute("DELETE FROM context_values WHERE id = ?", (value_id,))
    return freed
