"""Retention jobs (run on the writer between drain chunks): auto-prune, delete-empty and
the orphan sweep. They never change rows themselves: each *decides* on the writer's connection,
then appends ops to the spool (``session.end``, ``sessions.delete``), which the writer applies
like any other op. So the spool is the one log of every change, a store rebuilt from a
snapshot + replay drops what the live store dropped, and the op records who (``actor``) did
what and why (``reason``) (docs/architecture.md, "The spool is the log of every change").

Rules (docs/architecture.md "Jobs"; a prune must never delete live work):
* pinned or archived sessions are never closed or deleted;
* a session is stale only if *both* its start and its newest message are older than the
  window — newest = the later of the producer timestamp and the arrival time, so an old
  transcript imported a minute ago is not stale;
* "empty" is an EXISTS probe over messages in any state (rewound and compacted rows count),
  never a counter;
* a session's owner is dead only if its pid is gone or now belongs to a process with another
  start time (psutil), on this host; anything else is treated as alive;
* only sessions of the configured ``sources`` (``prune.sources``) are ever closed or
  deleted, by every job here; sessions of other sources (imports) are never touched;
* children of a deleted session are detached (parent cleared), except delegate children,
  which go with their parent when they meet the same conditions (``session_delete.doomed``:
  an active delegate of an expired parent is kept, detached).
Every op carries the facts the decision rested on as ``only_if`` conditions, re-checked when
the op is applied (``store.apply.deletes``): records that arrived between the decision and
the op win, a second run that decides the same thing again is a no-op, and replay decides
exactly as the live writer did. Each run appends ops for at most ``max_sessions`` sessions so
a long prune never stalls the drain; the figures say whether more remain.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import apsw
import psutil

from quill.home import BOOT_SHIFT_S, DEFAULTS, boot_id, holder_alive
from quill.spool import Spool
from quill.store.apply.deletes import doomed as delete_closure

DAY = 86400.0
_NEWEST = (
    "max(s.started_at, coalesce((SELECT max(max(coalesce(m.ts, 0), m.arrived_at)) FROM messages m "
    "WHERE m.session_id = s.id), s.started_at))"
)
_KEEP = "s.pinned = 0 AND s.archived = 0"
#: Every selection below is ``_KEEP AND s.source IN (sources)``, and every op's ``only_if``
#: carries ``unpinned`` + ``sources``: the writer re-checks both facts at apply time.


def _in(values: tuple) -> str:
    """Placeholders for ``IN (…)``; ``NULL`` for no values (matches nothing; ``IN ()`` is not
    portable SQL)."""
    return ", ".join("?" for _ in values) or "NULL"


def _message_count(conn: apsw.Connection, ids: list[str]) -> int:
    total = 0
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        total += conn.execute(
            f"SELECT count(*) FROM messages WHERE session_id IN ({_in(tuple(part))})", part
        ).fetchone()[0]
    return total


def _deleted(conn: apsw.Connection, ids: list[str], cond: dict[str, Any]) -> tuple[int, int]:
    """(sessions, messages) a ``sessions.delete`` of ``ids`` under ``cond`` deletes if applied
    now: the named sessions and the delegate children that meet ``cond`` too."""
    closure: list[str] = []
    for sid in ids:
        closure += [s for s in delete_closure(conn, sid, cond) if s not in closure]
    return len(closure), _message_count(conn, closure)


def _end_ops(
    spool: Spool, ids: list[str], reason: str, actor: str, now: float, only_if: dict[str, Any]
) -> None:
    for sid in ids:
        spool.append(
            "session.end",
            {
                "session_id": sid,
                "reason": reason,
                "ended_at": now,
                "actor": actor,
                "only_if": {"open": True, "unpinned": True, **only_if},
            },
        )


def _delete_op(
    conn: apsw.Connection,
    spool: Spool,
    ids: list[str],
    reason: str,
    actor: str,
    only_if: dict[str, Any],
) -> tuple[int, int]:
    """Append one ``sessions.delete`` of ``ids`` (if any) with ``only_if`` (plus ``unpinned``);
    returns what it will delete (``_deleted``), counted before the op is appended."""
    if not ids:
        return 0, 0
    cond = {"unpinned": True, **only_if}
    figures = _deleted(conn, ids, cond)
    spool.append(
        "sessions.delete", {"session_ids": ids, "reason": reason, "actor": actor, "only_if": cond}
    )
    return figures


def auto_prune(
    conn: apsw.Connection,
    spool: Spool,
    stale_after_s: float = DEFAULTS.stale_after_s,
    retention_s: float = DEFAULTS.retention_s,
    sources: list[str] | tuple[str, ...] = DEFAULTS.prune_sources,
    max_sessions: int = 500,
    now: float | None = None,
) -> dict[str, Any]:
    """Pass 1: close open sessions of automatic ``sources`` idle past ``stale_after_s`` (one
    ``session.end`` op each, reason ``stale_sweep``). Pass 2: delete ended sessions whose end
    and newest message are older than ``retention_s`` (one ``sessions.delete`` op, reason
    ``retention``). Both passes take only sessions of ``sources``, never pinned or archived,
    and say so in their ``only_if``. Figures (what the appended ops will do when the writer
    applies them, if nothing changes first): sessions closed/deleted (delegate children that
    go along included), their messages, whether more candidates remain."""
    now = time.time() if now is None else now
    src = tuple(sources)
    idle_cut, keep_cut = now - stale_after_s, now - retention_s
    stale = [
        r[0]
        for r in conn.execute(
            "SELECT s.id FROM sessions s WHERE s.ended_at IS NULL "
            f"AND s.source IN ({_in(src)}) AND {_KEEP} "
            f"AND {_NEWEST} < ? ORDER BY s.id LIMIT ?",
            (*src, idle_cut, max_sessions),
        )
    ]
    _end_ops(
        spool,
        stale,
        "stale_sweep",
        "job:auto_prune",
        now,
        {"inactive_before": idle_cut, "sources": list(src)},
    )
    expired = [
        r[0]
        for r in conn.execute(
            "SELECT s.id FROM sessions s WHERE s.ended_at IS NOT NULL AND s.ended_at < ? "
            f"AND s.source IN ({_in(src)}) "
            f"AND {_KEEP} AND {_NEWEST} < ? ORDER BY s.id LIMIT ?",
            (keep_cut, *src, keep_cut, max_sessions + 1),
        )
    ]
    sessions, messages = _delete_op(
        conn,
        spool,
        expired[:max_sessions],
        "retention",
        "job:auto_prune",
        {"ended_before": keep_cut, "inactive_before": keep_cut, "sources": list(src)},
    )
    return {
        "sessions_closed": len(stale),
        "sessions_deleted": sessions,
        "messages_deleted": messages,
        "more_remaining": len(expired) > max_sessions,
    }


def delete_empty(
    conn: apsw.Connection,
    spool: Spool,
    grace_s: float = 1 * DAY,
    max_sessions: int = 500,
    sources: list[str] | tuple[str, ...] = DEFAULTS.prune_sources,
    now: float | None = None,
) -> dict[str, Any]:
    """Delete sessions of ``sources`` with no message rows in any state, *ended* more than
    ``grace_s`` ago, never pinned or archived: one ``sessions.delete`` op, reason ``empty``.
    An open session is never deleted, however old: its producer may create it long before
    its first append (a chat opened and left); an abandoned one is ended by
    ``orphan_sweep``/``auto_prune``'s stale close first. Figures: sessions to delete (an
    empty delegate child going with its parent included)."""
    now = time.time() if now is None else now
    cut, src = now - grace_s, tuple(sources)
    empty = [
        r[0]
        for r in conn.execute(
            "SELECT s.id FROM sessions s WHERE s.created_at < ? "
            "AND s.ended_at IS NOT NULL AND s.ended_at < ? "
            f"AND s.source IN ({_in(src)}) AND {_KEEP} "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) "
            "ORDER BY s.id LIMIT ?",
            (cut, cut, *src, max_sessions),
        )
    ]
    sessions, _ = _delete_op(
        conn,
        spool,
        empty,
        "empty",
        "job:delete_empty",
        {"empty": True, "ended_before": cut, "inactive_before": cut, "sources": list(src)},
    )
    return {"sessions_deleted": sessions}


def orphan_sweep(
    conn: apsw.Connection,
    spool: Spool,
    host: str | None = None,
    max_sessions: int = 500,
    sources: list[str] | tuple[str, ...] = DEFAULTS.prune_sources,
    now: float | None = None,
) -> dict[str, Any]:
    """Close open sessions of ``sources`` whose owner process (recorded by ``session.create``'s
    ``owner``) on this host is dead — one ``session.end`` op each, reason ``orphan_sweep``, which
    a live writer may clear by appending again. The op only applies while the session still
    names that same owner. Returns ``{"checked", "sessions_closed", "other_boot"}``.

    An owner is judged with the proof the leases use (``home.holder_alive``), never by its
    pid and host name alone (a pid is recycled; a cloned machine keeps its host name):

    * with ``boot_id`` and ``start_ticks``: of this boot, alive only as the very process that
      started at that tick; of another boot, dead when it started before this boot began
      (``owner_started`` earlier than the kernel's boot time, less ``BOOT_SHIFT_S``): every
      process of an earlier boot of this machine did, and none of them outlived it. One that
      started after this boot began is no process of this machine (a clone sharing the host
      name): not judged here (``other_boot``; the stale sweep ends it if it stays idle,
      ``auto_prune``). The one case this cannot tell apart — a same-named clone's process
      started before this machine booted — is closed too, and an end by the sweep is
      automatic: the owner's next append reopens the session, nothing is lost;
    * without them (a producer that sent only ``create_time``): alive while a process with that
      pid started at that time (to the clock tick; ``holder_alive``'s rule for such records)."""
    host = host or socket.gethostname()
    now = time.time() if now is None else now
    src = tuple(sources)
    rows = conn.execute(
        "SELECT id, owner_pid, owner_started, owner_boot, owner_ticks FROM sessions s "
        "WHERE ended_at IS NULL AND owner_pid IS NOT NULL "
        f"AND owner_host = ? AND s.source IN ({_in(src)}) AND {_KEEP} ORDER BY id LIMIT ?",
        (host, *src, max_sessions),
    ).fetchall()
    here, booted = boot_id(), psutil.boot_time() - BOOT_SHIFT_S
    dead, other_boot = [], 0
    for sid, pid, started, boot, ticks in rows:
        if boot is not None and ticks is not None:
            if boot != here:
                if started is not None and started < booted:  # an earlier boot: gone
                    dead.append((sid, pid, started))
                else:
                    other_boot += 1
                continue
            alive = holder_alive({"pid": pid, "start_ticks": ticks, "boot_id": boot})
        else:
            alive = holder_alive({"pid": pid, "create_time": started})
        if not alive:
            dead.append((sid, pid, started))
    for sid, pid, started in dead:
        cond = {
            "owner_pid": pid,
            "sources": list(src),
            **({"owner_started": started} if started is not None else {}),
        }
        _end_ops(spool, [sid], "orphan_sweep", "job:orphan_sweep", now, cond)
    return {"checked": len(rows), "sessions_closed": len(dead), "other_boot": other_boot}
