"""``quill recover``: rebuild the store from the newest verified snapshot plus a spool replay
from the position that snapshot recorded, verify it, and swap it in.

Why this loses nothing: a spool segment is only deleted once a verified snapshot covers it
(``spool.retention``), so snapshot + remaining spool always hold every acknowledged batch;
replay is idempotent (batch ids), so overlap between the two is harmless.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS, Halt, RunDir, Settings, WriterStatus
from quill.home.layout import EVIDENCE_DIR
from quill.jobs.worker_jobs import snapshot as take_snapshot
from quill.jobs.worker_jobs import sound_snapshot
from quill.ops.recover import leftovers
from quill.ops.recover.replay import Progress, replay
from quill.spool import Position, SpoolReader
from quill.spool.segments import list_segments
from quill.store.errors import CorruptError, LeaseHeldError
from quill.store.factory import open_url
from quill.store.lease import Lease
from quill.store.sqlite.history import carry_job_runs
from quill.store.sqlite.salvage import salvage
from quill.store.sqlite.swap import integrity, stamp_generation, swap_in

SWAP_WAIT_S = 30.0


class RecoverError(Exception):
    """Recovery cannot proceed (healthy running store, failed verification, no swap)."""


def history_gap(cfg: Settings, snap_position: Position | None) -> str | None:
    """Why snapshot + spool would not hold the full history, or None when they do.

    The replay starts at the snapshot's position (or 1:0 without one); every segment after
    the one it starts in must exist. The segment it starts in may be gone only if a snapshot
    covers it — spool GC deletes a segment only once a verified snapshot covers all of it."""
    segments = list_segments(cfg.spool_dir)
    start = snap_position or Position(1, 0)
    if not segments:
        return None
    missing = [n for n in range(start.segment + 1, segments[-1] + 1) if n not in segments]
    if snap_position is None and segments[0] > 1:
        missing = list(range(1, segments[0])) + missing
    if missing:
        return (
            f"spool segments {missing[0]}..{missing[-1]} are gone and no snapshot covers them "
            f"(replay would start at {start}); rebuilding would silently drop those transcripts"
        )
    return None


def deleted_sessions(spool_dir: Path, max_line: int) -> set[str]:
    """Session ids named by any ``sessions.delete`` still in the spool: salvage must not
    bring back from the old file what a replayed delete removed. ``max_line``: the
    record-size limit (a longer line is no delete this store applied)."""
    first = list_segments(spool_dir)
    ids: set[str] = set()
    for entry in SpoolReader(spool_dir, max_line=max_line).read(
        Position(first[0], 0) if first else Position(1, 0), max_bytes=1 << 62
    ):
        rec = entry.record
        if rec and rec.get("op") == "sessions.delete" and isinstance(rec.get("data"), dict):
            ids.update(s for s in rec["data"].get("session_ids") or () if isinstance(s, str))
    return ids


def rebuild(
    cfg: Settings,
    progress: Progress | None = None,
    *,
    accept_loss: bool = False,
    halt: Halt | None = None,
) -> dict[str, Any]:
    """Build and verify a new store file next to the live one; returns figures incl. ``path``,
    ``leftovers`` and ``leftovers_said`` (work files of earlier, dead recovers removed first,
    ``ops.recover.leftovers.sweep``) and ``job_history``
    (``store.sqlite.history.carry_job_runs``: the damaged file's job runs, the halt ``halt``
    (default: the one recorded in ``run/``) and this recovery are recorded in the new file,
    so the incident stays in ``quill jobs history``).

    Raises ``RecoverError`` when snapshot + spool do not hold the full history (a restored
    snapshot in ``snapshots/`` fixes that), unless ``accept_loss``."""
    began = time.time()
    if halt is None:
        halt = RunDir(cfg.home).halt(cfg.state_db)
    # Earlier recovers killed mid-way left store-sized copies: remove those of dead ones.
    swept = leftovers.sweep(cfg.home)
    work = leftovers.work_path(cfg.home)
    try:
        result = _rebuild(cfg, work, progress, accept_loss=accept_loss, halt=halt, began=began)
    except BaseException:
        leftovers.remove_work(work)  # a failed rebuild leaves no half-built copy behind
        raise
    return {**result, "leftovers": swept._asdict(), "leftovers_said": leftovers.describe(swept)}


def _rebuild(
    cfg: Settings,
    work: Path,
    progress: Progress | None,
    *,
    accept_loss: bool,
    halt: Halt | None,
    began: float,
) -> dict[str, Any]:
    snap, damaged = sound_snapshot(cfg.snapshots_dir, cfg.home, copy_to=work)
    gap = history_gap(cfg, snap[1] if snap else None)
    if gap and not accept_loss:
        why = (
            f" (damaged snapshot(s) moved to {cfg.home / EVIDENCE_DIR}: {'; '.join(damaged)})"
            if damaged
            else ""
        )
        raise RecoverError(
            f"{gap}{why}. Put a verified snapshot back into {cfg.snapshots_dir}, or rerun "
            "with --accept-loss to rebuild from what is left"
        )
    result = replay(
        cfg.spool_dir,
        work,
        None,
        chunk_rows=cfg.chunk_rows,
        synchronous=cfg.synchronous,
        progress=progress,
        max_line=cfg.max_record_bytes,
        pack_min_bytes=cfg.pack_min_bytes,
    )
    if (
        gap and cfg.state_db.exists()
    ):  # history is missing from the spool: take what the old file still has
        store = open_url(
            None, work, "local", synchronous=cfg.synchronous, pack_min_bytes=cfg.pack_min_bytes
        )
        try:
            result["salvage"] = store.run_job(
                lambda conn: salvage(
                    cfg.state_db,
                    conn,
                    exclude=deleted_sessions(cfg.spool_dir, cfg.max_record_bytes),
                )
            )
            while store.index(DEFAULTS.index_slice_rows):
                pass
        finally:
            store.close()
    store = open_url(None, work, "local", synchronous=cfg.synchronous)
    try:
        result["job_history"] = store.run_job(
            carry_job_runs,
            cfg.state_db,
            halt=halt,
            started_at=began,
            now=time.time(),
            snapshots_dir=cfg.snapshots_dir,
            figures={
                "snapshot": str(snap[0]) if snap else None,
                "snapshot_position": str(snap[1]) if snap else None,
                **{k: result.get(k) for k in ("from", "to", "applied", "rejected", "rows")},
            },
        )
    finally:
        store.close()
    stamp_generation(work)
    check = integrity(work)
    if check != ["ok"]:
        raise CorruptError(
            f"the rebuilt store {work} failed integrity_check: {'; '.join(check[:5])}"
        )
    if result.get("salvage", {}).get("salvaged_messages") or result.get("salvage", {}).get(
        "filled_sessions"
    ):
        # Salvaged rows exist in no spool record: a verified snapshot of the rebuilt store must
        # cover them, or the next recovery (from an older snapshot + spool) would drop them again.
        result["salvage"]["snapshot"] = take_snapshot(
            str(work), str(cfg.snapshots_dir), cfg.snapshot_keep
        )["path"]
    return {
        "path": str(work),
        "snapshot": str(snap[0]) if snap else None,
        "damaged_snapshots": damaged,
        "history_gap": gap,
        "snapshot_position": str(snap[1]) if snap else None,
        **result,
    }


def recover(
    cfg: Settings, *, progress: Progress | None = None, accept_loss: bool = False
) -> dict[str, Any]:
    """Rebuild, then swap in: directly when no writer runs, else through the halted writer.

    Raises ``RecoverError`` when a healthy writer is running, or when the halted writer does
    not swap in time; ``CorruptError`` when the rebuilt store fails verification.
    """
    rd = RunDir(cfg.home)
    writer = WriterStatus.from_json(rd.live("writer"))
    halt = rd.halt(cfg.state_db) or (writer.halt if writer.halted else None)
    lease = Lease(rd.lock("writer"))
    try:
        lease.acquire()
        held = True
    except LeaseHeldError:
        held = False
    try:
        if not held and not halt:
            raise RecoverError(
                "the writer is running and the store is not halted; nothing to recover "
                "(stop `quill run` first to rebuild anyway)"
            )
        report = rebuild(cfg, progress, accept_loss=accept_loss, halt=halt)
        if held:
            report["evidence"] = str(
                swap_in(cfg.home / os.path.basename(report["path"]), cfg.state_db)
            )
            rd.clear_halt()
            report["swapped_by"] = "recover"
            return report
    finally:
        if held:
            lease.release()
    # A halted writer holds the lease with its connection closed: ask it to swap. The request
    # carries our identity; the writer honours it only while we are alive and waiting.
    rd.request_swap(report["path"])
    deadline = time.monotonic() + SWAP_WAIT_S
    try:
        while time.monotonic() < deadline:
            if not rd.swap_file.exists() and rd.halt(cfg.state_db) is None:
                report["swapped_by"] = "writer"
                return report
            time.sleep(0.1)
    finally:
        rd.clear_swap()
    raise RecoverError(
        f"the halted writer did not swap in {report['path']} within {SWAP_WAIT_S:g} s; "
        "stop `quill run` and run `quill recover` again"
    )
