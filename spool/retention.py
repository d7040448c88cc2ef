"""Spool retention: which segments may be deleted.

A segment is deleted only when all three hold (docs/architecture.md, "The spool"):
1. it is fully **applied**: the store's cursor is past its last byte;
2. it is fully **covered by a verified snapshot**: the newest verified snapshot's recorded
   cursor is past its last byte, so recovery (snapshot + replay) never needs it;
3. it is **older than the retention window** (default 7 days, by its mtime = last append).
The newest segment is never deleted: producers append to it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool.segments import Position, fsync_dir, list_segments, segment_name


def _covered(pos: Position | None, segment: int, size: int) -> bool:
    return pos is not None and (
        pos.segment > segment or (pos.segment == segment and pos.offset >= size)
    )


def collected_before(spool_dir: Path) -> int | None:
    """The oldest segment number still in ``spool_dir`` when it is past 1 (segments
    ``1..n-1`` were collected: their records are no longer in this spool), else None (the
    spool holds every record it was ever given, or has no segment yet). Segment numbers
    start at 1 and never go back."""
    segments = list_segments(Path(spool_dir))
    return segments[0] if segments and segments[0] > 1 else None


def collectable(
    spool_dir: Path,
    applied: Position | None,
    snapshot: Position | None,
    retention_s: float = DEFAULTS.spool_retention_s,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Segments that may be deleted: ``[{"segment", "bytes", "age_s"}]``, oldest first."""
    now = time.time() if now is None else now
    segments = list_segments(Path(spool_dir))
    out = []
    for n in segments[:-1]:
        st = os.stat(Path(spool_dir) / segment_name(n))
        age = now - st.st_mtime
        if (
            _covered(applied, n, st.st_size)
            and _covered(snapshot, n, st.st_size)
            and age >= retention_s
        ):
            out.append({"segment": n, "bytes": st.st_size, "age_s": round(age)})
    return out


def collect(
    spool_dir: Path,
    applied: Position | None,
    snapshot: Position | None,
    retention_s: float = DEFAULTS.spool_retention_s,
    now: float | None = None,
) -> dict[str, Any]:
    """Delete the collectable segments; returns ``{"deleted": [...], "bytes_freed": int}``."""
    gone = collectable(spool_dir, applied, snapshot, retention_s, now)
    # Oldest first: a producer handle still on segment N that finds N+1 gone relies on N
    # having been unlinked before it (spool/producer.py, the stale-segment check).
    for seg in gone:
        (Path(spool_dir) / segment_name(seg["segment"])).unlink(missing_ok=True)
    if gone:
        fsync_dir(Path(spool_dir))
    return {"deleted": [s["segment"] for s in gone], "bytes_freed": sum(s["bytes"] for s in gone)}
