"""Applying one spool op to the store, inside a transaction the caller opened.

``APPLIERS`` maps each op kind to ``applier(conn, data, batch_id, arrived_at) -> rows
written``. Every applier validates before (or checks after) writing and is wrapped by
``op_common.atomic``, so an op that raises ``InvalidOpError`` changed nothing and is
quarantined by the writer with the error's reason. Each applier first runs its kind's content
check (``store.apply.checks.CHECKS``, which ``store.apply.precheck`` runs before a producer is
acknowledged); what it checks after that needs the store. Payloads: docs/ops.md.

This module holds the session ops; the transcript ops live in ``transcript_ops``.
"""

from __future__ import annotations

import apsw

from quill.store.apply import context
from quill.store.apply.checks import (
    EDGE_KINDS,
    TITLE_MAX_CHARS,
    check_create,
    check_end,
    check_flags,
    check_read,
    check_title,
    clean_title,
    key_field,
)
from quill.store.apply.deletes import conditions_hold, sessions_delete
from quill.store.apply.messages import (
    messages_append,
    messages_compact,
    messages_replace,
    messages_rewind,
)
from quill.store.apply.normalize import dumps
from quill.store.apply.reprice import usage_reprice
from quill.store.apply.restore import messages_restore
from quill.store.apply.rules import (
    AUTOMATIC_END_REASONS,
    DELIBERATE_END_REASONS,
    Applier,
    atomic,
    ensure_session,
    opt,
    session_id,
)
from quill.store.apply.usage import usage_record
from quill.store.errors import InvalidOpError, stored_json
from quill.store.read.lineage import root_of

__all__ = [
    "APPLIERS",
    "AUTOMATIC_END_REASONS",
    "DELIBERATE_END_REASONS",
    "EDGE_KINDS",
    "TITLE_MAX_CHARS",
    "check_create",
    "clean_title",
]


def _title_owner(conn: apsw.Connection, title: str, sid: str) -> str | None:
    row = conn.execute(
        "SELECT id FROM sessions WHERE title = ? AND id != ?", (title, sid)
    ).fetchone()
    return row[0] if row else None


def _same_lineage(conn: apsw.Connection, a: str, b: str) -> bool:
    """Whether sessions ``a`` and ``b`` (both stored) descend over compression edges from
    one root (``lineage.root_of``)."""
    root_a, root_b = root_of(conn, a), root_of(conn, b)
    return bool(root_a) and bool(root_b) and root_a[0] == root_b[0]


@atomic
def session_create(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Create a session, or fill the fields an earlier op left empty (existing values win;
    with ``revise`` true — an import reading a session again — the ``meta`` keys sent win
    and the other stored keys stay).

    Fields: source, model, title, cwd, system_prompt (string) and tools (array), stored once
    and referenced (store/apply/context.py), key (conversation identity: a chat id, a platform
    thread, a working directory; ``resume`` reads by it), parent_id + parent_kind (compression |
    branch | reset | delegate; both or neither), started_at (epoch s), meta (object), owner
    ({"host", "pid", "create_time", "boot_id", "start_ticks"}: the producing process as
    ``quill.home.process_identity`` gives it, which the orphan sweep checks). A
    title another session already holds is not applied (the session is still created) and is kept in
    ``meta['requested_title']``: imports must not lose a session over a title. A
    *placeholder* row (made by an op that arrived first, ``op_common.ensure_session``) is
    completed: this create's source wins over the one the early op carried. Raises
    ``InvalidOpError``: ``invalid-field``, ``title-too-long``, ``self-parent``.
    """
    check_create(data)  # every content rule on the fields below (store/apply/checks.py)
    sid = session_id(data)
    kind = opt(data, "parent_kind", str)
    parent = opt(data, "parent_id", str)
    meta = opt(data, "meta", dict) or {}
    started = opt(data, "started_at", (int, float))
    owner = opt(data, "owner", dict) or {}
    owner_pid, owner_started = owner.get("pid"), owner.get("create_time")  # checked by check_create
    revise = bool(opt(data, "revise", bool))
    if revise and meta:  # the keys sent win, the others stay (an import read again)
        held = conn.execute("SELECT meta FROM sessions WHERE id = ?", (sid,)).fetchone()
        if held and held[0]:
            was = held[0]
            meta = {
                **(was if isinstance(was, dict) else stored_json(was, f"meta of {sid}")),
                **meta,
            }
    title = clean_title(opt(data, "title", str))
    if title is not None and _title_owner(conn, title, sid):
        meta = {**meta, "requested_title": title}
        title = None
    conn.execute(
        """INSERT INTO sessions (id, source, model, title, cwd, parent_id, parent_kind,
                                 started_at, meta, created_at, owner_host, owner_pid,
                                 owner_started, owner_boot, owner_ticks, key)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET
               source = CASE WHEN sessions.placeholder = 1
                             THEN coalesce(excluded.source, sessions.source)
                             ELSE coalesce(sessions.source, excluded.source) END,
               placeholder = 0,
               key = coalesce(sessions.key, excluded.key),
               model = coalesce(sessions.model, excluded.model),
               title = coalesce(sessions.title, excluded.title),
               cwd = coalesce(sessions.cwd, excluded.cwd),
               parent_id = coalesce(sessions.parent_id, excluded.parent_id),
               parent_kind = CASE WHEN sessions.parent_id IS NULL THEN excluded.parent_kind
                                  ELSE sessions.parent_kind END,
               started_at = CASE WHEN excluded.started_at < sessions.started_at
                                 THEN excluded.started_at ELSE sessions.started_at END,
               meta = CASE WHEN ? = 1 THEN coalesce(excluded.meta, sessions.meta)
                           ELSE coalesce(sessions.meta, excluded.meta) END,
               owner_host = coalesce(excluded.owner_host, sessions.owner_host),
               owner_pid = coalesce(excluded.owner_pid, sessions.owner_pid),
               owner_started = coalesce(excluded.owner_started, sessions.owner_started),
               -- the proof goes with the pid it proves: a new owner without one clears it
               owner_boot = CASE WHEN excluded.owner_pid IS NULL THEN sessions.owner_boot
                                 ELSE excluded.owner_boot END,
               owner_ticks = CASE WHEN excluded.owner_pid IS NULL THEN sessions.owner_ticks
                                  ELSE excluded.owner_ticks END""",
        (
            sid,
            opt(data, "source", str),
            opt(data, "model", str),
            title,
            opt(data, "cwd", str),
            parent,
            kind,
            float(started) if started is not None else arrived_at,
            dumps(meta) if meta else None,
            arrived_at,
            owner.get("host") if isinstance(owner.get("host"), str) else None,
            owner_pid,
            owner_started,
            owner.get("boot_id") if owner_pid is not None else None,
            owner.get("start_ticks") if owner_pid is not None else None,
            key_field(data),
            int(revise),
        ),
    )
    context.record(conn, sid, data, batch_id, arrived_at)
    return 0


@atomic
def session_end(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """End a session; the first end wins (a later end, whatever its reason, changes nothing).

    ``reason`` defaults to ``ended``. Reasons in ``AUTOMATIC_END_REASONS`` are cleared when a
    live writer appends to the session again; every other reason is deliberate and stays.
    ``actor`` (optional string) says who ended it (a job: ``job:auto_prune``). ``only_if``
    (optional, ``op_checks.parse_conditions``): the end is skipped unless the session
    exists and meets them at apply time — jobs use it so a decision made before newer records
    arrived does not close a session that has since come back to life.
    Raises ``InvalidOpError``: ``invalid-field``, ``invalid-session-id`` (both ``check_end``).
    """
    sid, reason, ended, cond = check_end(data)
    if "only_if" in data and not conditions_hold(conn, sid, cond):
        return 0
    ensure_session(conn, sid, arrived_at)
    conn.execute(
        "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
        (float(ended) if ended is not None else arrived_at, reason, sid),
    )
    return 0


@atomic
def session_title(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Set a session's title (sanitised by ``clean_title``); an empty or all-control title
    clears it. Titles are unique among titled sessions; a title held by another session of the
    same compression chain (root, earlier or later continuation) moves to this one, the
    holder left untitled, as the reference does. Raises ``InvalidOpError``:
    ``duplicate-title`` (naming the holder; the one rule needing the store), ``title-too-long``,
    ``invalid-field`` (``check_title``)."""
    sid, title = check_title(data)
    owner = _title_owner(conn, title, sid) if title is not None else None
    if owner is not None and not _same_lineage(conn, owner, sid):
        raise InvalidOpError(
            "duplicate-title", f"title {title!r} is already used by session {owner}"
        )
    ensure_session(conn, sid, arrived_at)
    if owner is not None:  # a continuation taking its chain's title: the title moves
        conn.execute("UPDATE sessions SET title = NULL WHERE id = ?", (owner,))
    conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, sid))
    return 0


@atomic
def session_flags(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Set any of the ``archived``, ``pinned``, ``hidden`` flags (booleans; absent = unchanged).
    Raises ``InvalidOpError('invalid-field')`` when none is given or one is not a boolean
    (``check_flags``: nothing here needs the store)."""
    sid, flags = check_flags(data)
    ensure_session(conn, sid, arrived_at)
    for key, value in flags.items():  # key comes from the fixed tuple above, never from data
        conn.execute(f"UPDATE sessions SET {key} = ? WHERE id = ?", (int(value), sid))
    return 0


@atomic
def session_read(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Move the last-read watermark forward to ``message_id`` (a store id of this session),
    or to the newest message when absent. It never moves back. Listings derive ``unread``
    (display rows above the watermark). Raises ``InvalidOpError``: ``invalid-field``
    (``check_read``), ``unknown-message`` (needs the store)."""
    sid, mid = check_read(data)
    if (
        mid is not None
        and not conn.execute(
            "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (mid, sid)
        ).fetchone()
    ):
        raise InvalidOpError("unknown-message", f"session {sid!r} has no message {mid}")
    if mid is None:
        top = conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND state IN ('live', 'compacted') "
            "ORDER BY seq DESC LIMIT 1",
            (sid,),
        ).fetchone()
        mid = top[0] if top else None
    if mid is not None:  # the mark only moves forward, in transcript order (seq)
        conn.execute(
            "UPDATE sessions SET last_read_id = ? WHERE id = ? AND (last_read_id IS NULL OR "
            "(SELECT seq FROM messages WHERE id = ?) >= "
            "coalesce((SELECT seq FROM messages WHERE id = last_read_id), 0))",
            (mid, sid, mid),
        )
    return 0


#: The ops this store version applies (every kind in ``spool.record.OP_KINDS``, plus the
#: ``spool.purged`` tombstones that only ``spool.purge`` writes).
APPLIERS: dict[str, Applier] = {
    "session.create": session_create,
    "messages.append": messages_append,
    "session.end": session_end,
    "messages.compact": messages_compact,
    "messages.rewind": messages_rewind,
    "messages.replace": messages_replace,
    "session.title": session_title,
    "session.flags": session_flags,
    "session.read": session_read,
    "sessions.delete": sessions_delete,
    "usage.record": usage_record,
    "usage.reprice": usage_reprice,
    "messages.restore": messages_restore,
    # A purged record (spool/purge.py): the original batch was applied; its content is gone.
    # Applied as nothing, and recorded in applied_batches like any op.
    "spool.purged": lambda conn, data, batch_id, arrived_at: 0,
}
