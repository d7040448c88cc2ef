"""``--purge``: remove deleted sessions' content from the spool, the quarantine and snapshots.

``sessions.delete`` removes a session's rows from the store; its original ops remain in spool
segments, quarantined records and snapshots until their retention (docs/ops.md, "Deleting a
conversation on request"). ``purge`` removes those copies, after the delete is applied:

1. **Plan** (two passes over the spool). A session may be purged only if it is absent from
   the store and an *applied* ``sessions.delete`` names it; its **bound** is the newest such
   delete's position. Delegate children created before the bound and absent from the store
   went with it (``store.apply.deletes``) and are purged with the same bound. Targets: every
   record before its session's bound whose ``data.session_id`` is that session (the delete
   ops themselves stay: they are the audit trail and carry ids, reason and actor only). A
   record after the bound is later news (a late append re-created the session) and stays.
2. **Spool**: seal the newest segment if it holds a target (producers move to a new one,
   ``spool.purge.seal``), then rewrite each segment holding targets with same-length
   tombstones (``spool.purge.rewrite``: temp file, fsync, read back and verify, rename,
   fsync dir). Offsets do not move, so the cursor, snapshot stamps, quarantine ids and every
   other record are untouched.
3. **Verify**: a third pass finds no target left.
4. **Quarantine**: entries of targets are removed with an audit line that holds no content,
   and content of earlier audit lines about them is dropped (``Quarantine.purge``).
5. **Live store**: the writer runs the ``scrub`` job (FTS optimize, VACUUM, TRUNCATE
   checkpoint) and the purge waits for its ``job_runs`` record; with no writer running, the
   purge takes the writer lease and runs the job itself (``ops.purge.scrub``). Always, also
   after a ``purge: true`` delete: its secure deletion leaves index terms in FTS5 segments
   and stale copies of cells that page splits and updates left before it. A checkpoint a
   reader still blocks fails the purge (``StorageError``: the plan file stays, re-run).
6. **Snapshots**: a fresh, compacted snapshot of the live store is taken first (so a verified
   recovery point always exists), then every older snapshot stamped at or before a bound (it
   still holds the session) is deleted and every later one is compacted in place
   (``jobs.worker_jobs.compact_snapshot``: deleted rows' bytes leave free pages and FTS).

Every step is idempotent, and a crash anywhere leaves each file old or new, never half
written: re-running ``quill spool purge ID…`` finishes the job. A store rebuilt from the
remaining snapshot + spool equals the live store: tombstones apply as nothing, and the
delete, replayed, detaches the same children (tests/test_purge.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS, SNAPSHOT_GLOB, RunDir
from quill.ops.client.errors import InvalidInputError, NotFoundError, StorageError
from quill.ops.purge.scrub import scrub_live_store
from quill.spool import Entry, Position, Quarantine, SpoolReader, record
from quill.spool import purge as spool_purge
from quill.spool.segments import fsync_dir, list_segments
from quill.store.errors import CantOpenError
from quill.store.read.reader import Reader

Step = Callable[[str], None]
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
    #: Positions of damaged lines before the newest bound whose body no longer parses: they
    #: may hold a purged session's content; reported, not guessed at.
    damaged: list[str] = field(default_factory=list)

    def wants(self, rec: dict[str, Any] | None, position: Position) -> bool:
        """Whether the record at ``position`` is content of a purged session before its bound."""
        if not rec or rec.get("op") in _KEPT_OPS or not isinstance(rec.get("data"), dict):
            return False
        sid = rec["data"].get("session_id")
        bound = self.bounds.get(sid) if isinstance(sid, str) else None
        return bound is not None and position < bound[0]


def _entries(spool_dir: Path) -> Iterator[Entry]:
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
    for e in _entries(spool_dir):
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
    out = Plan(bounds)
    newest = max(b[0] for b in bounds.values())
    for e in _entries(spool_dir):
        rec = _body(e)
        if out.wants(rec, e.position):
            out.targets.setdefault(e.position.segment, set()).add(e.position.offset)
        elif rec is None and e.position < newest:
            out.damaged.append(str(e.position))
    return out


def _body(e: Entry) -> dict[str, Any] | None:
    """The record of ``e``; for a damaged line its JSON body as far as it parses (the same
    rule the quarantine's purge judges it by), so a damaged line of a purged session is a
    target too."""
    return e.record if e.record is not None else record.decode_lenient(e.raw)


def _load_plan(path: Path) -> dict[str, tuple[Position, str]]:
    """The bounds an interrupted purge recorded (empty when none)."""
    try:
        saved = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    return {sid: (Position.parse(pos), batch) for sid, (pos, batch) in saved["bounds"].items()}


def _save_plan(path: Path, p: Plan) -> None:
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


def interrupted(
    spool_dir: Path, db_path: Path | None = None, *, reader: Any = None
) -> dict[str, Any] | None:
    """An unfinished purge while no purge holds the purge lock: ``PLAN_FILE`` present (the
    run was killed after its plan; the deleted content may still be in the spool, snapshots
    and the live store), or, given ``db_path`` (the SQLite store), a **pending** one
    (``ops.purge.pending``: an applied ``purge: true`` delete whose session's records are not
    all tombstoned, e.g. ``sessions delete --purge`` killed before its purge step). Returns
    ``{"sessions": [ids], "cause": "plan-file" | "pending", "next": the command that
    finishes it}`` or None (no purge asked for is unfinished). A plan file that cannot be
    read is reported with the same command (the re-run rewrites it). ``reader``: an open
    reader on the store instead of ``db_path`` (status and doctor pass theirs, inside their
    store guard); with neither, only the plan file is looked at. Store errors propagate."""
    from quill.ops.purge.pending import pending

    spool_dir = Path(spool_dir)
    if spool_purge.running(spool_dir):
        return None
    if (spool_dir / PLAN_FILE).exists():
        try:
            ids = sorted(_load_plan(spool_dir / PLAN_FILE))
        except (ValueError, KeyError, TypeError):
            ids = []
        cause = "plan-file"
    else:
        ids = (
            pending(spool_dir, Path(db_path) if db_path is not None else None, reader=reader)
            if db_path is not None or reader is not None
            else []
        )
        if not ids:
            return None
        cause = "pending"
    return {
        "sessions": ids,
        "cause": cause,
        "next": "quill spool purge " + (" ".join(ids) if ids else "ID…"),
    }


def _verify(spool_dir: Path, p: Plan) -> list[str]:
    """Positions of target records still present (empty when the spool is clean)."""
    return [str(e.position) for e in _entries(spool_dir) if p.wants(_body(e), e.position)]


def purge(
    spool_dir: Path,
    db_path: Path,
    snapshots_dir: Path,
    session_ids: list[str],
    *,
    actor: str = "unknown",
    snapshot_keep: int = DEFAULTS.snapshot_keep,
    on_step: Step | None = None,
    enqueue_scrub: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Purge ``session_ids`` (deleted and applied) from the spool, quarantine and snapshots
    (module doc). Returns figures: ``{"sessions", "records_purged", "segments_rewritten",
    "sealed", "quarantine_purged", "snapshot", "snapshots_removed", "snapshots_compacted",
    "store_scrub", "damaged", "leftovers_removed", "leftovers_in_use", "seconds"}``;
    ``store_scrub``: the figures of the ``scrub`` job the writer ran on the live store (step 5 of
    the module doc: seconds of its optimize and VACUUM), ``enqueue_scrub(**params)`` queues it
    for a running writer (``ops.purge.scrub``); ``damaged``: positions of spool lines before the
    delete too damaged to tell whose they are (left, may hold content); ``leftovers_in_use``:
    snapshot temp files of a live process (a snapshot job running now), left alone. Raises
    ``InvalidInputError``/``NotFoundError`` (``plan``), ``WaitTimeoutError``/``StorageError``
    (the scrub failed or a reader blocked its checkpoint: re-run),
    ``spool.purge.PurgeVerifyError`` or ``SpoolError`` (nothing half-done is left: re-run),
    ``CorruptError`` from a snapshot that fails its check."""

    began = time.monotonic()
    spool_dir, snapshots_dir = Path(spool_dir), Path(snapshots_dir)
    with spool_purge.exclusive(
        spool_dir
    ):  # one purge at a time per data dir (spool.purge.LOCK_FILE)
        figures = _purge_locked(
            spool_dir,
            db_path,
            snapshots_dir,
            session_ids,
            actor=actor,
            snapshot_keep=snapshot_keep,
            step=on_step or (lambda name: None),
            enqueue_scrub=enqueue_scrub,
        )
    figures["seconds"] = round(time.monotonic() - began, 3)
    return figures


def _purge_locked(
    spool_dir: Path,
    db_path: Path,
    snapshots_dir: Path,
    session_ids: list[str],
    *,
    actor: str,
    snapshot_keep: int,
    step: Step,
    enqueue_scrub: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """``purge``'s steps, run while holding the purge lock."""
    from quill.jobs.worker_jobs import (
        compact_snapshot,
        remove_temp_leftovers,
        snapshot,
        snapshot_position,
    )

    plan_file = spool_dir / PLAN_FILE
    # Every temp file an interrupted purge can leave: segment rewrites, the plan's own temp,
    # and the snapshot/compaction copies (they hold the store's freed pages).
    leftovers = spool_purge.remove_leftovers(spool_dir)
    plan_tmp = plan_file.with_name(plan_file.name + ".tmp")
    if plan_tmp.exists():
        plan_tmp.unlink()
        leftovers.append(plan_tmp.name)
    removed, in_use = remove_temp_leftovers(snapshots_dir)
    leftovers += removed
    p = plan(spool_dir, db_path, list(dict.fromkeys(session_ids)), _load_plan(plan_file))
    _save_plan(plan_file, p)
    step("planned")
    sealed = False
    newest = max(list_segments(spool_dir), default=0)
    if newest in p.targets:
        sealed = spool_purge.seal(spool_dir, newest)
        step("sealed")
    purged, rewritten = 0, []
    by = max(p.bounds.values())[1]  # purged_by: the (newest) delete this purge follows
    for segment in sorted(p.targets):
        result = spool_purge.rewrite(spool_dir, segment, p.targets[segment], by, on_step=step)
        if result["purged"]:
            purged += result["purged"]
            rewritten.append(segment)
        step(f"segment-{segment}")
    left = _verify(spool_dir, p)
    if left:
        raise spool_purge.PurgeVerifyError(
            int(left[0].split(":")[0]), f"records still present at {', '.join(left[:5])}"
        )
    quarantined = Quarantine(spool_dir).purge(lambda rec, pos: p.wants(rec, pos), actor=actor)
    step("quarantine")
    figures: dict[str, Any] = {
        "snapshot": None,
        "snapshots_removed": [],
        "snapshots_compacted": [],
        "store_scrub": None,
    }
    if Path(db_path).exists():
        # Before the fresh snapshot: every snapshot taken from here on copies a store whose
        # FTS segments, free space and freed pages no longer hold the deleted rows (optimize +
        # VACUUM, for every delete: secure deletion leaves index terms and stale cell copies),
        # and the main file and WAL lose their old pages (TRUNCATE checkpoint).
        scrubbed = figures["store_scrub"] = scrub_live_store(Path(db_path), enqueue_scrub)
        if scrubbed.get("wal_blocked_by_reader"):  # old pages still in state.db / -wal: not done
            raise StorageError(
                "the live store was rewritten but a reader blocked its TRUNCATE checkpoint: "
                "state.db and its WAL still hold the deleted rows' old pages",
                hint="re-run `quill spool purge " + " ".join(sorted(p.bounds)) + "` once "
                "long searches or snapshots have finished",
            )
        step("scrubbed")
    if Path(db_path).exists():
        # Never a compacted copy of a file the writer halted on (its data dir is state.db's folder).
        fresh = Path(
            snapshot(
                str(db_path),
                str(snapshots_dir),
                keep=snapshot_keep + 1,
                compact=True,
                halt_file=str(RunDir(Path(db_path).parent).halt_file),
            )["path"]
        )
        figures["snapshot"] = fresh.name
        step("snapshot")
        newest_bound = max(b[0] for b in p.bounds.values())
        for old in sorted(snapshots_dir.glob(SNAPSHOT_GLOB)):
            if old == fresh:
                continue
            if snapshot_position(old) <= newest_bound:
                old.unlink()  # taken before the delete: it holds the session
                figures["snapshots_removed"].append(old.name)
            else:
                compact_snapshot(old)
                figures["snapshots_compacted"].append(old.name)
            step(f"snapshot-{old.name}")
    plan_file.unlink(missing_ok=True)
    return {
        "sessions": sorted(p.bounds),
        "records_purged": purged,
        "segments_rewritten": rewritten,
        "sealed": sealed,
        "quarantine_purged": quarantined,
        **figures,
        "damaged": p.damaged,
        "leftovers_removed": leftovers,
        "leftovers_in_use": in_use,
    }
