"""Session lineage: the one bounded walk of a compression chain (architecture.md "The store":
"Lineage is explicit" — one function, one bound, so no caller walks a chain unbounded).

A session's ``parent_kind`` names the edge to its parent: ``compression`` (the child
continues the parent's conversation), ``branch`` (a user fork), ``reset`` (a new conversation
on the same route), ``delegate`` (a subagent run). Only compression edges are continuations;
branch, reset and delegate children are never taken as the next link of a chain.
"""

from __future__ import annotations

import apsw

#: Longest chain walked (root→tip), and so the bound on queries per walk. Cycles stop earlier.
CHAIN_MAX = 1000

#: SQL condition: session ``s`` is the tip of its chain (no compression child).
IS_TIP_SQL = (
    "NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_id = s.id "
    "AND c.parent_kind = 'compression')"
)

_CONTINUATION = """
SELECT c.id FROM sessions c
WHERE c.parent_id = ? AND c.parent_kind = 'compression'
ORDER BY EXISTS (SELECT 1 FROM sessions g
                 WHERE g.parent_id = c.id AND g.parent_kind = 'compression') DESC,
         c.ended_at IS NULL DESC,
         (SELECT max(m.id) FROM messages m WHERE m.session_id = c.id) DESC,
         c.created_at DESC, c.id
"""


def _parent(conn: apsw.Connection, sid: str) -> tuple[str | None, str | None] | None:
    row = conn.execute(
        "SELECT parent_id, parent_kind FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    return (row[0], row[1]) if row else None


def root_of(conn: apsw.Connection, session_id: str, *, max_len: int = CHAIN_MAX) -> list[str]:
    """Compression ancestors of ``session_id``, root first, ending with ``session_id``
    (``[]`` for an unknown session). Stops at a non-compression edge, a cycle or ``max_len``."""
    if _parent(conn, session_id) is None:
        return []
    back, seen, cur = [session_id], {session_id}, session_id
    while len(back) < max_len:
        parent, kind = _parent(conn, cur) or (None, None)
        if (
            parent is None
            or kind != "compression"
            or parent in seen
            or _parent(conn, parent) is None
        ):
            break
        back.append(parent)
        seen.add(parent)
        cur = parent
    return back[::-1]


def compression_chain(
    conn: apsw.Connection, session_id: str, *, max_len: int = CHAIN_MAX
) -> list[str]:
    """The compression chain through ``session_id``, root → tip (session ids).

    Walks parents over ``compression`` edges to the root, then children over ``compression``
    edges to the tip. Where a session has several compression children, the continuation is
    the one that itself continues, else an open one, else the most recently written, else the
    newest. At most ``max_len`` sessions; a cycle ends the walk. ``[]`` for an unknown session.
    """
    chain = root_of(conn, session_id, max_len=max_len)
    if not chain:
        return []
    seen = set(chain)
    cur = session_id
    while len(chain) < max_len:
        nxt = next((r[0] for r in conn.execute(_CONTINUATION, (cur,)) if r[0] not in seen), None)
        if nxt is None:
            break
        chain.append(nxt)
        seen.add(nxt)
        cur = nxt
    return chain
