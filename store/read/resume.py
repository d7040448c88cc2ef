"""Conversation keys: which session to resume for a key, and sessions that lost theirs.

Rules:
* "The session to resume for key K" is the tip of the newest compression chain among the
  sessions created with ``key = K`` (or, for ``cwd``, started in that directory). Never a
  branch, delegate or hidden session: those are not candidates, and a chain's tip is
  reached over ``compression`` edges only (``lineage.compression_chain``). "Newest" = the
  chain whose tip was last active (newest message time, else its start), ties by id.
* An *orphan* is a message-bearing, visible session without a key, of a source that uses
  keys (some session of that source has one), that is not a delegate or branch child.
  Its predecessor is named only on unambiguous evidence: (1) a recorded compression/reset
  parent that has a key, or (2) exactly one keyed session of the same source that went
  quiet (its last activity) within ``window_s`` before the orphan started. Anything else
  is reported with the reason and left alone. Adoption (``ops``) sends ``session.create``
  with the key (and the predecessor as compression parent when none is recorded): the
  create only fills empty fields, so it goes through the spool like every change.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.read.lineage import compression_chain

#: Default quiet window for evidence (2): the predecessor's last activity at most this many
#: seconds before the orphan started (a crash between routing and create is seconds apart).
QUIET_WINDOW_S = 900.0

_ACTIVE = "coalesce((SELECT max(m.ts) FROM messages m WHERE m.session_id = s.id), s.started_at)"

__all__ = ["QUIET_WINDOW_S", "key_sessions", "orphans", "resume_target"]


def key_sessions(conn: apsw.Connection, key: str) -> list[str]:
    """Every session of the conversation ``key``: the sessions created with it and the
    compression chains through them (a continuation may not repeat the key), sorted."""
    ids: set[str] = set()
    for (sid,) in conn.execute(
        "SELECT id FROM sessions WHERE key = ? ORDER BY id", (key,)
    ).fetchall():
        ids.add(sid)
        ids.update(compression_chain(conn, sid))
    return sorted(ids)


def resume_target(
    conn: apsw.Connection, *, key: str | None = None, cwd: str | None = None
) -> dict[str, Any] | None:
    """``{"session_id", "chain", "last_active", "candidates"}`` of the session to resume for
    ``key`` (or ``cwd``), or None when no session has it. ``chain`` = root → tip ids.
    Raises ``ValueError`` unless exactly one of ``key``/``cwd`` is given."""
    if (key is None) == (cwd is None):
        raise ValueError("give exactly one of key or cwd")
    column, value = ("key", key) if key is not None else ("cwd", cwd)
    rows = conn.execute(
        f"SELECT s.id FROM sessions s WHERE s.{column} = ? AND s.hidden = 0 "
        "AND (s.parent_kind IS NULL OR s.parent_kind NOT IN ('branch', 'delegate')) ORDER BY s.id",
        (value,),
    ).fetchall()
    best: tuple[float, str, list[str]] | None = None
    for (sid,) in rows:
        chain = compression_chain(conn, sid)
        tip = chain[-1] if chain else sid
        row = conn.execute(
            f"SELECT s.hidden, {_ACTIVE} FROM sessions s WHERE s.id = ?", (tip,)
        ).fetchone()
        if row is None or row[0]:
            continue  # a hidden tip is never resumed
        candidate = (row[1] or 0.0, tip, chain)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    if best is None:
        return None
    return {
        "session_id": best[1],
        "chain": best[2],
        "last_active": best[0],
        "candidates": len(rows),
    }


def orphans(conn: apsw.Connection, *, window_s: float = QUIET_WINDOW_S) -> list[dict[str, Any]]:
    """Orphans (module doc), oldest first: ``{"session_id", "source", "started_at",
    "messages", "predecessor", "key", "evidence", "reason"}``. ``predecessor``/``key`` are
    set only when the evidence is unambiguous (``evidence``: ``parent_link`` or
    ``quiet_sibling``); otherwise ``reason`` says why it was left alone."""
    found = conn.execute(
        """SELECT s.id, s.source, s.started_at, s.parent_id, s.parent_kind,
                   (SELECT count(*) FROM messages m WHERE m.session_id = s.id)
            FROM sessions s
            WHERE s.key IS NULL AND s.hidden = 0
              AND (s.parent_kind IS NULL OR s.parent_kind NOT IN ('branch', 'delegate'))
              AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)
              AND EXISTS (SELECT 1 FROM sessions k WHERE k.source = s.source AND k.key IS NOT NULL)
            ORDER BY s.started_at, s.id"""
    ).fetchall()
    out = []
    for sid, source, started, parent, kind, count in found:
        item: dict[str, Any] = {
            "session_id": sid,
            "source": source,
            "started_at": started,
            "messages": count,
            "predecessor": None,
            "key": None,
            "evidence": None,
            "reason": None,
        }
        if parent is not None:
            prow = conn.execute("SELECT key FROM sessions WHERE id = ?", (parent,)).fetchone()
            if prow and prow[0] is not None:
                item.update(predecessor=parent, key=prow[0], evidence="parent_link")
            else:
                item["reason"] = f"its recorded {kind} parent {parent!r} has no key either"
            out.append(item)
            continue
        quiet = conn.execute(
            f"""SELECT s.id, s.key FROM sessions s
                WHERE s.source = ? AND s.key IS NOT NULL AND s.id != ? AND s.hidden = 0
                  AND {_ACTIVE} <= ? AND {_ACTIVE} >= ?
                ORDER BY s.id""",
            (source, sid, started, started - window_s),
        ).fetchall()
        if len(quiet) == 1:
            item.update(predecessor=quiet[0][0], key=quiet[0][1], evidence="quiet_sibling")
        elif not quiet:
            item["reason"] = (
                f"no keyed {source} session went quiet in the {window_s:g} s before it started"
            )
        else:
            item["reason"] = (
                f"ambiguous: {len(quiet)} keyed {source} sessions went quiet in the {window_s:g} s "
                f"before it started ({', '.join(q[0] for q in quiet[:5])})"
            )
        out.append(item)
    return out
