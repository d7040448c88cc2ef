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
   record after the bound is later news (a late append re-created the session) and stays,
   except one decided before the delete (``deletions_seen`` lower than the session's
   deletions: an import that read the store before it), which the writer applies as nothing
   (``store.apply.deletes.stale``) and which is a target too (``Plan.wants``).
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

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS, SNAPSHOT_GLOB, RunDir
from quill.ops.client.errors import StorageError
from quill.ops.purge.plan import (
    PLAN_FILE,
    Plan,
    load_plan,
    plan,
    record_body,
    save_plan,
    spool_entries,
)
from quill.ops.purge.scrub import scrub_live_store
from quill.spool import Quarantine, purge_lock
from quill.spool import purge as spool_purge
from quill.spool.segments import list_segments

Step = Callable[[str], None]


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
    if purge_lock.running(spool_dir):
        return None
    if (spool_dir / PLAN_FILE).exists():
        try:
            ids = sorted(load_plan(spool_dir / PLAN_FILE))
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
    return [
        str(e.position) for e in spool_entries(spool_dir) if p.wants(record_body(e), e.position)
    ]


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
    with purge_lock.exclusive(
        spool_dir
    ):  # one purge at a time per data dir (spool.purge_lock.LOCK_FILE)
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
    p = plan(spool_dir, db_path, list(dict.fromkeys(session_ids)), load_plan(plan_file))
    save_plan(plan_file, p)
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
