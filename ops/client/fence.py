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

from typing import Any, NamedTuple

#: The ops on an existing session that would re-create it after a delete (their appliers make
#: a missing session row): stamped with ``deletions_seen``.
FENCED_OPS = frozenset({"session.title", "session.flags", "session.end", "session.read"})
#: The op that names many sessions: stamped with ``deletions_seen`` as a map ``{session id:
#: deletions}`` for the named sessions the store holds, so a delete decided on a view older
#: than another delete of a session does not remove the session made again since (another
#: host's appends): ``store.apply.deletes.sessions_delete`` skips it.
DELETE_OP = "sessions.delete"


class FenceWarning(UserWarning):
    """``quill.Client`` appended an op on an existing session without ``deletions_seen``: the
    store could not be read to stamp it (``stamp_ops``). The op is durable and is applied; a
    delete of its session applied before it no longer fences it. The message says why."""


def needs_stamp(op: str, data: Any) -> bool:
    """Whether ``op`` with payload ``data`` is one ``stamp`` fences and carries no
    ``deletions_seen`` of its caller's own yet."""
    if not isinstance(op, str) or not isinstance(data, dict):
        return False
    if op == DELETE_OP:
        ids = data.get("session_ids")
        named = isinstance(ids, list) and bool(ids) and all(isinstance(s, str) for s in ids)
    elif op in FENCED_OPS:
        named = isinstance(data.get("session_id"), str)
    else:
        return False  # decided before the store's modules are imported (``quill push``)
    from quill.store.apply.checks import DELETIONS_SEEN

    return named and DELETIONS_SEEN not in data


def stamp(reader: Any, op: str, data: Any) -> Any:
    """``data`` with ``deletions_seen`` = the deletions of its session id ``reader`` (a store
    ``Reader``, None before any store exists) knows of, when ``op`` is fenced (``needs_stamp``)
    and the session is in the store; for ``sessions.delete`` a map ``{session id:
    deletions}`` of the named sessions the store holds (none held: unchanged); else ``data``
    unchanged. Raises the store error tree."""
    if reader is None or not needs_stamp(op, data):
        return data
    from quill.store.apply.checks import DELETIONS_SEEN

    if op == DELETE_OP:
        held = {
            sid: reader.deletions(sid)
            for sid in dict.fromkeys(data["session_ids"])
            if reader.get_session(sid) is not None
        }
        return {**data, DELETIONS_SEEN: held} if held else data
    sid = data["session_id"]
    if reader.get_session(sid) is None:
        return data
    return {**data, DELETIONS_SEEN: reader.deletions(sid)}


class Stamped(NamedTuple):
    """What ``stamp_ops`` returns: ``ops`` (as given, each fenced op stamped when it could be)
    and ``unfenced``: the indices (into ``ops``) of the ops that needed a stamp and went
    without one because the store could not be read, with ``why`` (a sentence naming the
    store and its error; ``""`` when ``unfenced`` is empty)."""

    ops: list[tuple[str, Any, Any]]
    unfenced: tuple[int, ...] = ()
    why: str = ""


def stamp_ops(cfg: Any, ops: list[tuple[str, Any, Any]]) -> Stamped:
    """``ops`` (``(op, data, batch id)``) with each fenced op stamped (``stamp``) on one
    read-only view of ``cfg``'s store, opened only when one needs it. Never fails the append
    it precedes: an append never depends on the store (docs/architecture.md), so never blocks
    an agent. With no store yet (nothing applied: no session to fence) the ops are returned as
    they are, which is exact. With a store that cannot be read now (busy, damaged, lost,
    unreachable) nothing is known of its deletions: the ops go unstamped and the result says
    so (``Stamped.unfenced``, ``why``) for the caller to tell its user (a ``FenceWarning``, a
    ``--json`` field, an HTTP ack field): such an op applied after a delete of its session
    makes the session again, as an op without the field always did."""
    needing = tuple(i for i, (op, data, _) in enumerate(ops) if needs_stamp(op, data))
    if not needing:
        return Stamped(ops)
    from quill.ops.client.stores import lost_store, open_reader, where
    from quill.store.errors import CantOpenError, StoreError

    try:
        with open_reader(cfg) as reader:
            return Stamped([(op, stamp(reader, op, data), batch) for op, data, batch in ops])
    except StoreError as exc:  # every unreadable store; CantOpenError is "no store yet" …
        if isinstance(exc, CantOpenError) and lost_store(cfg) is None:
            return Stamped(ops)
        why = (  # … unless its history is gone (a lost store is not an empty one)
            f"the store ({where(cfg)}) could not be read ({type(exc).__name__}: {exc}), so "
            f"{len(needing)} op(s) on existing sessions were appended without deletions_seen: "
            "applied after a delete of their session, they make it again"
        )
        return Stamped(ops, needing, why)
