"""The plan of a purge (``ops.purge.procedure``'s module doc, step 1): which sessions are purged
up to which applied ``sessions.delete`` (their bounds, delegate children included), which
spool records are their content, and the plan file an interrupted purge leaves behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quill.ops.client.errors import InvalidInputError, NotFoundError
from quill.spool import Entry, Position, SpoolReader, record
from quill.spool import purge as spool_purge
from quill.spool.segments import fsync_dir, list_segments
from quill.store.apply.deletes import DELETIONS_SEEN
from quill.store.errors import CantOpenError
from quill.store.read.reader import Reader

#: The closure of a purge in progress (session id → bound), in the spool directory: no
#: reader, GC or stray-segment check looks at it; removed when the purge finishes.
PLAN_FILE = ".purge-plan.json"
#: Ops whose ``data.session_id`` is not content of that session being purged.
_KEPT_OPS = frozenset({"sessions.delete", spool_purge.PURGED_OP})


@dataclass
class Plan:
    """What a purge removes: ``bounds`` maps each session id to the position of the applied
    ``sessions.delete`` it is purged up to (and that delete's batch id); ``targets`` maps a
    segment number to the byte offsets of the records to tombstone there."""

    bounds: dict[str, tuple[Position, str]]
    targets: dict[int, set[int]] = field(default_factory=dict)
    #: How many times the store saw each purged session deleted (``Reader.deletions``).
    deletions: dict[str, int] = field(default_factory=dict)
    #: Positions of damaged lines before the newest bound whose body no longer parses: they
    #: may hold a purged session's content; reported, not guessed at.
    damaged: list[str] = field(default_factory=list)

    def wants(self, rec: dict[str, Any] | None, position: Position) -> bool:
        """Whether the record at ``position`` is content of a purged session: before its
        bound, or after it but decided before the delete (``deletions_seen`` lower than the
        session's deletions): the writer applies such an op as nothing
        (``store.apply.deletes.stale``: the count only grows, so one not applied yet will be
        too), and a tombstone applies as nothing, so the store and a rebuild are the same."""
        if not rec or rec.get("op") in _KEPT_OPS or not isinstance(rec.get("data"), dict):
            return False
        sid = rec["data"].get("session_id")
        bound = self.bounds.get(sid) if isinstance(sid, str) else None
        if bound is None:
            return False
        if position < bound[0]:
            return True
        seen = rec["data"].get(DELETIONS_SEEN)
        return (
            isinstance(seen, int)
            and not isinstance(seen, bool)
            and seen < self.deletions.get(sid, 0)
        )


def spool_entries(spool_dir: Path) -> Iterator[Entry]:
    reader = SpoolReader(spool_dir)
    segments = list_segments(spool_dir)
    pos = Position(segments[0], 0) if segments else Position(1, 0)
    while True:
        batch = list(reader.read(pos, max_bytes=32 << 20))
        if not batch:
            return
        yield from batch
        pos = batch[-1].next


def _store_facts(db_path: Path, ids: set[str]) -> tuple[Position | None, set[str]]:
    """(the store's cursor, the ids among ``ids`` that exist in the store)."""
    try:
        with Reader(db_path) as r:
            cursor = r.figures()["cursor"]
            present = {s for s in ids if r.get_session(s) is not None}
    except CantOpenError:
        return None, set()
    return (Position.parse(cursor) if cursor else None), present


def _deletions(db_path: Path, ids: set[str]) -> dict[str, int]:
    """``{session id: times the store saw it deleted}`` for ``ids`` (empty without a store)."""
    try:
        with Reader(db_path) as r:
            return {s: r.deletions(s) for s in ids}
    except CantOpenError:
        return {}


def plan(
    spool_dir: Path,
    db_path: Path,
    session_ids: list[str],
    carried: dict[str, tuple[Position, str]] | None = None,
) -> Plan:
    """Decide what to purge (module doc, step 1); ``carried``: bounds an interrupted run
    recorded (``PLAN_FILE``), kept for sessions still absent from the store. Raises
    ``InvalidInputError`` when a named session still exists in the store, ``NotFoundError`` when
    no applied ``sessions.delete`` names it."""
    cursor, present = _store_facts(db_path, set(session_ids))
    if present:
        raise InvalidInputError(
            f"session(s) {', '.join(sorted(present))} still exist in the store",
            hint="delete them first: `quill sessions delete ID --purge`",
        )
    deletes: dict[str, tuple[Position, str]] = {}
    delegates: list[tuple[str, str, Position]] = []  # (parent, child, position of the create)
    for e in spool_entries(spool_dir):
        rec = e.record
        if not rec or not isinstance(rec.get("data"), dict):
            continue
        data = rec["data"]
        if rec["op"] == "sessions.delete" and cursor is not None and e.position < cursor:
            for sid in data.get("session_ids") or []:
                if isinstance(sid, str):
                    deletes[sid] = (e.position, rec["batch"])
        elif (
            rec["op"] == "session.create"
            and data.get("parent_kind") == "delegate"
            and isinstance(data.get("parent_id"), str)
            and isinstance(data.get("session_id"), str)
        ):
            delegates.append((data["parent_id"], data["session_id"], e.position))
    missing = [s for s in session_ids if s not in deletes]
    if missing:
        raise NotFoundError(
            f"no applied sessions.delete names {', '.join(missing)} in the spool",
            hint="purge follows a delete: `quill sessions delete ID --purge`",
        )
    bounds = {s: deletes[s] for s in session_ids}
    frontier = list(bounds)
    while frontier:  # delegate children that went with a purged parent
        parent = frontier.pop()
        for p, child, at in delegates:
            if p == parent and child not in bounds and at < bounds[parent][0]:
                bounds[child] = bounds[parent]
                frontier.append(child)
    for sid, bound in (
        carried or {}
    ).items():  # an interrupted run's closure (its creates may be gone)
        bounds.setdefault(sid, bound)
    _, alive = _store_facts(db_path, set(bounds) - set(session_ids))
    for child in alive:  # pinned or archived delegates were kept: not ours to purge
        del bounds[child]
    out = Plan(bounds, deletions=_deletions(db_path, set(bounds)))
    newest = max(b[0] for b in bounds.values())
    for e in spool_entries(spool_dir):
        rec = record_body(e)
        if out.wants(rec, e.position):
            out.targets.setdefault(e.position.segment, set()).add(e.position.offset)
        elif rec is None and e.position < newest:
            out.damaged.append(str(e.position))
    return out


def record_body(e: Entry) -> dict[str, Any] | None:
    """The record of ``e``; for a damaged line its JSON body as far as it parses (the same
    rule the quarantine's purge judges it by), so a damaged line of a purged session is a
    target too."""
    return e.record if e.record is not None else record.decode_lenient(e.raw)


def load_plan(path: Path) -> dict[str, tuple[Position, str]]:
    """The bounds an interrupted purge recorded (empty when none)."""
    try:
        saved = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    return {sid: (Position.parse(pos), batch) for sid, (pos, batch) in saved["bounds"].items()}


def save_plan(path: Path, p: Plan) -> None:
    """Record the closure before anything is rewritten: once a delegate child's
    ``session.create`` is a tombstone, a re-run could no longer find that child from the
    spool. Session ids and positions only; temp file, fsync, rename."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(
            fd,
            json.dumps({"bounds": {s: [str(pos), b] for s, (pos, b) in p.bounds.items()}}).encode(),
        )
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
