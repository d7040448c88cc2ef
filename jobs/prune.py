"""Retention jobs that write the store (run on the writer between drain chunks):
auto-prune, delete-empty and the orphan sweep.

Rules (DESIGN.md "Jobs"; issue 6; field reports of prunes that deleted live work):
* pinned or archived sessions are never closed or deleted;
* a session is stale only if *both* its start and its newest message are older than the
  window — newest = the later of the producer timestamp and the arrival time, so an old
  transcript imported a minute ago is not stale;
* "empty" is an EXISTS probe over messages in any state (rewound and compacted rows count),
  never a counter;
* a session's owner is dead only if its pid is gone or now belongs to a process with another
  start time (psutil), on this host; anything else is treated as alive;
* children of a deleted session are detached (parent cleared), except delegate children,
  which go with their parent.
Each run handles at most ``max_sessions`` sessions so a long prune never stalls the drain;
the figures say how many remain for the next run.
"""
from __future__ import annotations

import socket
import time
from typing import Any

import apsw

from quill.store.connection import transaction
from quill.store.indexer import unindex
from quill.store.lease import holder_alive

#: Sources whose sessions machines open and may abandon (issue 6 default list).
AUTOMATIC_SOURCES = ("cli", "cron", "subagent", "tool", "api", "recovered")
DAY = 86400.0
_NEWEST = ("max(s.started_at, coalesce((SELECT max(max(m.ts, m.arrived_at)) FROM messages m "
           "WHERE m.session_id = s.id), s.started_at))")


def _in(values: tuple) -> str:
    return ", ".join("?" for _ in values)


def _delete_sessions(conn: apsw.Connection, ids: list[str]) -> dict[str, int]:
    """Delete sessions with their messages (unindexed from FTS in the same transaction);
    detach their non-delegate children; delete delegate children too (recursively)."""
    deleted_sessions = deleted_messages = detached = 0
    queue = list(ids)
    while queue:
        sid = queue.pop()
        msg_ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))]
        unindex(conn, msg_ids)
        conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        deleted_messages += len(msg_ids)
        queue += [r[0] for r in conn.execute(
            "SELECT id FROM sessions WHERE parent_id = ? AND parent_kind = 'delegate' AND pinned = 0 AND archived = 0",
            (sid,))]
        conn.execute("UPDATE sessions SET parent_id = NULL, parent_kind = NULL WHERE parent_id = ? "
                     "AND (parent_kind != 'delegate' OR pinned = 1 OR archived = 1)", (sid,))
        detached += conn.changes()
        conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        deleted_sessions += conn.changes()
    return {"sessions_deleted": deleted_sessions, "messages_deleted": deleted_messages, "children_detached": detached}


def auto_prune(conn: apsw.Connection, stale_after_s: float = 1 * DAY, retention_s: float = 90 * DAY,
               sources: list[str] | tuple[str, ...] = AUTOMATIC_SOURCES, max_sessions: int = 500,
               now: float | None = None) -> dict[str, Any]:
    """Pass 1: close open sessions of automatic ``sources`` idle past ``stale_after_s``
    (end reason ``stale_sweep``). Pass 2: delete ended sessions whose end and newest message
    are older than ``retention_s``. Figures: sessions closed/deleted, messages deleted,
    children detached, candidates remaining."""
    now = time.time() if now is None else now
    src = tuple(sources)
    keep = "s.pinned = 0 AND s.archived = 0"
    with transaction(conn):
        stale = [r[0] for r in conn.execute(
            f"SELECT s.id FROM sessions s WHERE s.ended_at IS NULL AND s.source IN ({_in(src)}) AND {keep} "
            f"AND {_NEWEST} < ? LIMIT ?", (*src, now - stale_after_s, max_sessions))]
        conn.executemany("UPDATE sessions SET ended_at = ?, end_reason = 'stale_sweep' WHERE id = ? AND ended_at IS NULL",
                         [(now, sid) for sid in stale])
        expired = [r[0] for r in conn.execute(
            f"SELECT s.id FROM sessions s WHERE s.ended_at IS NOT NULL AND s.ended_at < ? AND {keep} "
            f"AND {_NEWEST} < ? LIMIT ?", (now - retention_s, now - retention_s, max_sessions + 1))]
        figures = _delete_sessions(conn, expired[:max_sessions])
    return {"sessions_closed": len(stale), **figures, "more_remaining": len(expired) > max_sessions}


def delete_empty(conn: apsw.Connection, grace_s: float = 1 * DAY, max_sessions: int = 500,
                 now: float | None = None) -> dict[str, Any]:
    """Delete sessions with no message rows in any state, created more than ``grace_s`` ago
    (a producer may create a session before its first append), never pinned or archived."""
    now = time.time() if now is None else now
    with transaction(conn):
        empty = [r[0] for r in conn.execute(
            "SELECT s.id FROM sessions s WHERE s.created_at < ? AND s.pinned = 0 AND s.archived = 0 "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) LIMIT ?",
            (now - grace_s, max_sessions))]
        figures = _delete_sessions(conn, empty)
    return {"sessions_deleted": figures["sessions_deleted"], "children_detached": figures["children_detached"]}


def orphan_sweep(conn: apsw.Connection, host: str | None = None, max_sessions: int = 500,
                 now: float | None = None) -> dict[str, Any]:
    """Close open sessions whose owner process (recorded by ``session.create``'s ``owner``)
    on this host is dead — end reason ``orphan_sweep``, which a live writer may clear by
    appending again. A pid that is alive with the recorded start time is a live owner."""
    host = host or socket.gethostname()
    now = time.time() if now is None else now
    with transaction(conn):
        rows = conn.execute(
            "SELECT id, owner_pid, owner_started FROM sessions WHERE ended_at IS NULL AND owner_pid IS NOT NULL "
            "AND owner_host = ? AND pinned = 0 AND archived = 0 LIMIT ?", (host, max_sessions)).fetchall()
        dead = [sid for sid, pid, started in rows
                if not holder_alive({"pid": pid, "create_time": started})]
        conn.executemany("UPDATE sessions SET ended_at = ?, end_reason = 'orphan_sweep' WHERE id = ?",
                         [(now, sid) for sid in dead])
    return {"checked": len(rows), "sessions_closed": len(dead)}
