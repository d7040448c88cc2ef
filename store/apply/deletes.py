"""``sessions.delete`` and the ``only_if`` conditions jobs attach to the ops they append.

The spool is the log of every change (docs/architecture.md): a job that prunes or closes
sessions does not touch rows itself; it decides, then appends ops that the writer applies
like any other. Between the decision (at the writer's cursor) and the op's place in the spool,
producers may have appended more records, so a job attaches the facts its decision rested on
as ``only_if`` conditions, and the applier re-checks them against the state *at the op's spool
position*. That state is the same in the live store and in any rebuild (snapshot + replay),
so application is deterministic and a stale decision is skipped instead of destroying new work.
"""

from __future__ import annotations

import re
from typing import Any

import apsw

from quill.store.apply import blobs, context
from quill.store.apply.checks import DELETIONS_SEEN, check_delete
from quill.store.apply.message_rows import ID_FLOOR_KEY
from quill.store.apply.rules import atomic, opt
from quill.store.errors import InvalidOpError
from quill.store.sqlite.indexer import FTS_TABLES, fts_state, unindex

_REF_LIKE = f"%{blobs.REF_PREFIX}%"
_REF_RE = re.compile(re.escape(blobs.REF_PREFIX) + r"([0-9a-f]{64})")


def conditions_hold(conn: apsw.Connection, sid: str, cond: dict[str, Any]) -> bool:
    """True if session ``sid`` exists and meets every condition in ``cond`` (see
    ``op_checks._CONDITIONS``)."""
    row = conn.execute(
        "SELECT started_at, ended_at, pinned, archived, owner_pid, owner_started, source "
        "FROM sessions WHERE id = ?",
        (sid,),
    ).fetchone()
    if row is None:
        return False
    started, ended, pinned, archived, owner_pid, owner_started, source = row
    if cond.get("unpinned") and (pinned or archived):
        return False
    if "sources" in cond and source not in cond["sources"]:  # a NULL source is in no list
        return False
    if cond.get("open") and ended is not None:
        return False
    if "ended_before" in cond and (ended is None or ended >= cond["ended_before"]):
        return False
    if "owner_pid" in cond and owner_pid != cond["owner_pid"]:
        return False
    if "owner_started" in cond and owner_started != cond["owner_started"]:
        return False
    if "inactive_before" in cond:
        newest = conn.execute(
            "SELECT max(max(coalesce(ts, 0), arrived_at)) FROM messages WHERE session_id = ?",
            (sid,),
        ).fetchone()[0]
        if max(started or 0, newest or 0) >= cond["inactive_before"]:
            return False
    if (
        cond.get("empty")
        and conn.execute("SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (sid,)).fetchone()
    ):
        return False
    return True


def deletions_seen(data: dict) -> int | None:
    """``data[DELETIONS_SEEN]`` (an integer ≥ 0), None when absent. Raises
    ``InvalidOpError('invalid-field')`` for any other value."""
    seen = opt(data, DELETIONS_SEEN, int)
    if seen is not None and seen < 0:
        raise InvalidOpError("invalid-field", f"{DELETIONS_SEEN!r} must be ≥ 0, got {seen}")
    return seen


def deletion_counts(conn: Any, sids: list[str]) -> dict[str, int]:
    """``{session id: times deleted}`` for ``sids`` (0 for an id never deleted)."""
    out = dict.fromkeys(sids, 0)
    ids = sorted(set(sids))
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        out.update(
            conn.execute(
                "SELECT session_id, deletions FROM session_deletions "
                f"WHERE session_id IN ({', '.join('?' for _ in part)})",
                part,
            ).fetchall()
        )
    return out


def stale(conn: Any, op: str, data: dict) -> bool:
    """Whether op ``op`` was decided on a view of the store older than a delete of its session:
    it carries ``DELETIONS_SEEN`` lower than the times ``data['session_id']`` was deleted by
    now. Such an op is applied as nothing (docs/ops.md, ``deletions_seen``): a copy an
    import read before a prune or a purge removed the session — a revision above all — never
    brings a deleted message's text back, nor a fragment of the session. An op without the
    field is applied as ever (producers that do not send it; spools written before it).
    ``sessions.delete`` is never stale as a whole: it names many sessions and its applier
    skips each one deleted since its caller looked (``sessions_delete``). Raises
    ``InvalidOpError('invalid-field')`` for a malformed field."""
    if op == "sessions.delete":
        return False
    seen = deletions_seen(data)
    sid = data.get("session_id")
    if seen is None or not isinstance(sid, str):
        return False
    return deletion_counts(conn, [sid])[sid] > seen


def doomed(conn: apsw.Connection, sid: str, cond: dict[str, Any]) -> list[str]:
    """The sessions a ``sessions.delete`` of ``sid`` under conditions ``cond`` deletes, in
    delete order: ``sid`` itself if it meets ``cond``, then its delegate children (recursively)
    that are neither pinned nor archived *and* meet the same ``cond`` — a condition the job
    decided on the parent (ended, inactive, empty, of a pruned source) must hold for every
    session it deletes, so an active delegate is kept (and detached), never taken along.
    Jobs call this for their figures, the applier to delete: both count the same sessions."""
    if not conditions_hold(conn, sid, cond):
        return []
    out, seen, queue = [], {sid}, [sid]
    while queue:
        cur = queue.pop()
        out.append(cur)
        for (child,) in conn.execute(
            "SELECT id FROM sessions WHERE parent_id = ? AND parent_kind = 'delegate' "
            "AND pinned = 0 AND archived = 0 ORDER BY id",
            (cur,),
        ).fetchall():
            if child not in seen and (not cond or conditions_hold(conn, child, cond)):
                seen.add(child)
                queue.append(child)
    return out


def _delete_one(conn: apsw.Connection, sid: str, cond: dict[str, Any]) -> tuple[int, int, int]:
    """Delete ``sid`` and the delegate children ``doomed`` names, each with its messages
    (unindexed in the same transaction), usage rows and the blobs no other message
    references; detach every other child of a deleted session (``parent_id``/``parent_kind``
    cleared: pinned, archived and kept delegates stay, parentless). Returns (sessions,
    messages, detached)."""
    sessions = messages = detached = 0
    victims = doomed(conn, sid, cond)
    gone = set(victims)
    for sid in victims:
        msg_ids = [
            r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))
        ]
        if isinstance(
            conn, apsw.Connection
        ):  # SQLite's FTS5 tables; PostgreSQL indexes the rows themselves
            unindex(conn, msg_ids)
        shas = _blob_refs(conn, sid) | context.drop(conn, sid)
        if msg_ids and isinstance(
            conn, apsw.Connection
        ):  # ids never come back (transcript_ops.next_id)
            conn.execute(
                f"INSERT INTO state_meta (key, value) VALUES ('{ID_FLOOR_KEY}', ?) "
                "ON CONFLICT (key) DO UPDATE "
                "SET value = max(CAST(value AS INTEGER), excluded.value)",
                (max(msg_ids),),
            )
        conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        conn.execute("DELETE FROM usage WHERE session_id = ?", (sid,))
        _drop_unreferenced(conn, shas)
        messages += len(msg_ids)
        # Invariant: no session is left naming a deleted parent.
        for (child,) in conn.execute(
            "SELECT id FROM sessions WHERE parent_id = ? ORDER BY id", (sid,)
        ).fetchall():
            if child not in gone:
                conn.execute(
                    "UPDATE sessions SET parent_id = NULL, parent_kind = NULL WHERE id = ?",
                    (child,),
                )
                detached += 1
        conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        if conn.changes():
            sessions += 1
            conn.execute(
                "INSERT INTO session_deletions (session_id, deletions) VALUES (?, 1) "
                "ON CONFLICT (session_id) "
                "DO UPDATE SET deletions = session_deletions.deletions + 1",
                (sid,),
            )
    return sessions, messages, detached


def _blob_refs(conn: apsw.Connection, sid: str) -> set[str]:
    """SHA-256s of the blobs (store/apply/blobs.py) that ``sid``'s message rows reference."""
    shas: set[str] = set()
    for parts, extra in conn.execute(
        "SELECT parts, extra FROM messages WHERE session_id = ? AND (parts LIKE ? OR extra LIKE ?)",
        (sid, _REF_LIKE, _REF_LIKE),
    ):
        for text in (parts, extra):
            if blobs.has_refs(text):
                shas.update(_REF_RE.findall(text))
    return shas


def _drop_unreferenced(conn: apsw.Connection, shas: set[str]) -> None:
    """Delete the blobs in ``shas`` that no remaining message references (a deleted
    conversation's attachments go with it; one shared with another session stays)."""
    for sha in sorted(shas):
        like = f"%{blobs.REF_PREFIX}{sha}%"
        if (
            conn.execute(
                "SELECT 1 FROM messages WHERE parts LIKE ? OR extra LIKE ? LIMIT 1", (like, like)
            ).fetchone()
            is None
            and conn.execute(
                "SELECT 1 FROM context_values WHERE sha256 = ? LIMIT 1", (sha,)
            ).fetchone()
            is None
        ):
            conn.execute("DELETE FROM blobs WHERE sha256 = ?", (sha,))


def _lower_fts_watermark(conn: apsw.Connection) -> None:
    """Message ids are ``INTEGER PRIMARY KEY`` without AUTOINCREMENT: deleting the newest rows
    lets SQLite hand their ids out again. Those ids were unindexed with the rows, so the FTS
    watermark must drop to the highest id that remains, or a reused id would be taken as
    indexed and never be searchable."""
    top = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
    conn.execute(
        "UPDATE state_meta SET value = ? "
        "WHERE key = 'fts_indexed_upto' AND CAST(value AS INTEGER) > ?",
        (str(top), top),
    )


@atomic
def sessions_delete(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Delete sessions with all their messages (every state) and usage records, as decided by
    a job or a user.

    Payload: ``session_ids`` (1..10,000), ``reason`` (≤64 printable chars, default
    ``deleted``), ``actor`` (who decided, e.g. ``job:auto_prune``, ``user:alice``), optional
    ``only_if`` conditions (``op_checks._CONDITIONS``) checked per session at apply time: a session
    that fails them, or no longer exists, is skipped (so the op is idempotent). Delegate
    children go with their parent unless pinned or archived or failing the same ``only_if``
    (then kept, like any other child: ``doomed``); other children are detached
    (``parent_id``/``parent_kind`` cleared). Returns 0 (rows written counts inserted rows). Raises
    ``InvalidOpError('invalid-field')`` (``op_checks.check_delete``). ``purge`` (bool,
    optional): the request also purges the sessions' copies outside the store
    (``ops.purge.procedure``); here it turns on secure deletion for this op's rows. The op stays
    in the spool (and ``applied_batches`` records its position), so who deleted what and why is
    on record. ``deletions_seen`` (optional, ``{session id: deletions}``): the times each
    named session had been deleted in its caller's view; a session deleted more times by now
    was made again after that view (another host appended since) and is skipped, as
    ``stale`` skips any other op decided before a delete.
    """
    ids, cond, seen = check_delete(data)
    if seen:
        now = deletion_counts(conn, list(seen))
        ids = [sid for sid in ids if sid not in seen or now[sid] <= seen[sid]]
    purge = opt(data, "purge", bool) or False
    sqlite = isinstance(conn, apsw.Connection)
    if purge and sqlite:
        _secure_delete(conn, True)
    try:
        for sid in ids:
            _delete_one(conn, sid, cond)
    finally:
        if purge and sqlite:
            _secure_delete(conn, False)
    if sqlite:
        _lower_fts_watermark(conn)
    return 0


def _secure_delete(conn: apsw.Connection, on: bool) -> None:
    """SQLite's ``secure_delete`` (deleted cells are zeroed, not left in the page) and FTS5's
    ``secure-delete`` (deleted entries are removed from the index b-trees, not masked) for the
    rows of a ``purge: true`` delete only: both cost write time, so routine deletes (prune)
    leave them off. Neither changes what any read returns. Neither is complete: FTS5 keeps
    terms in its segments and earlier page splits and updates left stale cell copies, so
    only the purge's ``scrub`` job (optimize + VACUUM) leaves no bytes; this narrows the
    window until it runs."""
    conn.execute(f"PRAGMA secure_delete = {1 if on else 0}")
    if fts_state(conn) == "ok":
        for table in FTS_TABLES:  # names come from the indexer's fixed tuple
            conn.execute(
                f"INSERT INTO {table}({table}, rank) VALUES ('secure-delete', {1 if on else 0})"
            )
