"""Spool verification and replay: reading the whole spool, outside the running writer.

Replay applies spool records into a store with the writer's own drain loop (``workers.drain``:
cursor and batch ids committed with the rows), so it is idempotent: replaying a range twice,
or a range the store already holds, changes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool import Position, Quarantine, SpoolReader
from quill.spool.integrity import assess
from quill.spool.segments import list_segments, segment_name
from quill.store.factory import open_url
from quill.workers.drain import Drain

Progress = Callable[[int], None]  # called with bytes consumed since the last call


def total_bytes(spool_dir: Path, start: Position) -> int:
    """Bytes from ``start`` to the end of the spool (for progress bars)."""
    total = 0
    for n in list_segments(spool_dir):
        if n >= start.segment:
            size = os.stat(spool_dir / segment_name(n)).st_size
            total += size - (start.offset if n == start.segment else 0)
    return max(total, 0)


def verify(
    spool_dir: Path,
    progress: Progress | None = None,
    *,
    cursor: Position | None = None,
    max_line: int = DEFAULTS.max_record_bytes,
) -> dict[str, Any]:
    """Check every record's checksum and shape and every producer's sequence numbers, and
    classify what is missing (``spool.integrity.assess``, the one classification status and
    doctor use), against the store's ``cursor`` when known (None: segments only). Returns
    ``{"records", "damaged": [{position, reason, detail}], "torn_writes": [{position,
    reason, detail}], "end", "partial_tail"}`` plus the assessment (``verdict``,
    ``lost``, ``summary``, ``missing_segments``, ``truncated``, ``missing_by_producer``,
    ``missing_records``); ``torn_writes`` are lines proven to be a producer's
    never-acknowledged partial write (reason ``torn-write``, ``spool.torn``), not damage;
    ``partial_tail`` is True when the newest segment ends without a newline (a write in
    progress, or a torn one). ``max_line``: the longest line read whole (``[spool]
    max_record_bytes``); longer ones are listed in ``over_limit``."""
    found = assess(spool_dir, cursor=cursor, scan=True, progress=progress, max_line=max_line)
    reader = SpoolReader(spool_dir, max_line=max_line)
    end = reader.end()
    return {
        "records": found.records,
        "damaged": found.damaged,
        "torn_writes": found.torn_writes,
        "end": str(end),
        "partial_tail": reader.has_partial_tail(end),
        **found.as_dict(),
    }


def replay(
    spool_dir: Path,
    db_path: Path,
    start: Position | None,
    *,
    chunk_rows: int = 500,
    synchronous: str = "NORMAL",
    progress: Progress | None = None,
    quarantine: Quarantine | None = None,
    max_line: int = DEFAULTS.max_record_bytes,
    pack_min_bytes: int = DEFAULTS.pack_min_bytes,
) -> dict[str, Any]:
    """Apply the spool from ``start`` (default: the store's own cursor, else the beginning)
    into the store at ``db_path`` (created if missing). The caller must hold the writer lease
    when ``db_path`` is the live store. Damaged or invalid records go to ``quarantine``
    (default: the spool's own, i.e. the live store's; a replay into another file passes
    ``Quarantine.for_store(db_path)`` so its refusals stay beside that file). ``max_line``:
    the record-size limit (``[spool] max_record_bytes``): a longer line is quarantined as
    ``over-limit`` without being read whole. ``pack_min_bytes``: ``[store] pack_min_bytes``
    (``store.packed``), the form of the rows it writes; what readers get does not depend on it.

    Returns figures: ``{"from", "to", "applied", "duplicates", "rejected", "already_resolved",
    "rows", "seconds"}``: ``rejected`` counts the records quarantined, ``already_resolved`` the
    refused records whose quarantine entry the audit says was already retried or dropped.
    """
    began = time.monotonic()
    store = open_url(None, db_path, "local", synchronous=synchronous, pack_min_bytes=pack_min_bytes)
    live = Quarantine(spool_dir)
    # A scratch store's quarantine also honours the live audit: an entry an operator retried
    # or dropped is not re-opened beside a scratch copy either (same positions, same records).
    quarantine = quarantine.consult(live) if quarantine is not None else live
    reader = SpoolReader(spool_dir, max_line=max_line)
    # The caller checked the spool's gaps (recover's history_gap) or asked for this replay.
    drain = Drain(store, reader, quarantine, chunk_rows, max_bytes=32 << 20, check_gaps=False)
    try:
        if start is None:
            # The caller chose this replay knowing the spool's start (recover checks the
            # history gap itself): a fresh file starts at the oldest segment left.
            first = min(list_segments(spool_dir), default=1)
            start = drain.start(Position(first, 0), accepted=first)
        else:
            drain.cursor = start
        totals = drain.until_empty(progress)
        while store.index(DEFAULTS.index_slice_rows):
            pass
    finally:
        store.close()
    resolved = drain.already_resolved
    return {
        "from": str(start),
        "to": str(drain.cursor),
        "applied": totals["applied"],
        "duplicates": totals["duplicates"],
        "rejected": totals["rejected"] - resolved,
        "rows": totals["rows"],
        "already_resolved": resolved,
        "quarantine": str(quarantine.dir),
        "seconds": round(time.monotonic() - began, 3),
    }
