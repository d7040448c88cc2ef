"""``deletions_seen`` on the ops a caller decides on its view of a session (docs/ops.md,
``store.apply.deletes.stale``).

A delete of a session (a prune, ``quill sessions delete``, a purge) removes its rows; an op
decided before it and applied after it would otherwise bring the session back as a fragment:
``session.title`` / ``session.flags`` / ``session.end`` / ``session.read`` create the session
row they name when it is missing. An op that carries ``deletions_seen`` — how many deletions of
its session id the caller's view of the store knew of — is applied as nothing once the store
has deleted that id more times. Imports and the watcher stamp every op they spool
(``ops.transfer.import_sessions``); this module stamps the session operations a user or an agent
sends through ``quill.Client``, the HTTP API and ``quill push``, the same way.

Only an op on a session the store holds now is stamped: one on a session the store does not
hold (new, or not applied yet) has nothing a delete could have removed since, and is applied as
ever (a late op makes the session, as before).
"""

from __future__ import annotations

from typing import Any

#: The ops on an existing session that would re-create it after a delete (their appliers make
#: a missing session row): stamped with ``deletions_seen``.
FENCED_OPS = frozenset({"session.title", "session.flags", "session.end", "session.read"})


def needs_stamp(op: str, data: Any) -> bool:
    """Whether ``op`` with payload ``data`` is one ``stamp`` fences and carries no
    ``deletions_seen`` of its caller's own yet."""
    if not isinstance(op, str) or op not in FENCED_OPS or not isinstance(data, dict):
        return False  # decided before the store's modules are imported (``quill push``)
    from quill.store.apply.deletes import DELETIONS_SEEN

    return isinstance(data.get("session_id"), str) and DELETIONS_SEEN not in data


def stamp(reader: Any, op: str, data: Any) -> Any:
    """``data`` with ``deletions_seen`` = the deletions of its session id ``reader`` (a store
    ``Reader``, None before any store exists) knows of, when ``op`` is fenced (``needs_stamp``)
    and the session is in the store; else ``data`` unchanged. Raises the store error tree."""
    if reader is None or not needs_stamp(op, data):
        return data
    from quill.store.apply.deletes import DELETIONS_SEEN

    sid = data["session_id"]
    if reader.get_session(sid) is None:
        return data
    return {**data, DELETIONS_SEEN: reader.deletions(sid)}


def stamp_ops(cfg: Any, ops: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """``ops`` (``(op, data, batch id)``) with each fenced op stamped (``stamp``) on one
    read-only view of ``cfg``'s store, opened only when one needs it. Never fails the append
    it precedes: an append never depends on the store (docs/architecture.md), so with no
    store, or one that cannot be read now (busy, damaged, lost, unreachable), the ops go
    unstamped and are applied as they were before the fence existed."""
    if not any(needs_stamp(op, data) for op, data, _ in ops):
        return ops
    from quill.ops.client.stores import open_reader
    from quill.store.errors import StoreError

    try:
        with open_reader(cfg) as reader:
            return [(op, stamp(reader, op, data), batch) for op, data, batch in ops]
    except StoreError:  # CantOpenError (no store yet) and every unreadable store
        return ops
