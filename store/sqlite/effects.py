"""Judging an interrupted store job by its effect on the file.

A writer killed after a VACUUM committed but before the job recorded its end leaves a
``running`` row; "died before it finished" would be wrong about a VACUUM that happened (and
the next run then skips with a free ratio of 0.0, so no row would ever say it happened). For
jobs whose effect the file shows, the runner records ``measure`` of the file in the start row
(``figures.before``); when the run is closed as interrupted, ``judge`` compares it with the
file now and says what happened, and from what.

Measured in pages, as SQLite sees the database (``page_count`` includes a committed VACUUM
still in the WAL, which the file size on disk does not show until a checkpoint).
"""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path
from typing import Any

import apsw

from quill.home import SNAPSHOT_GLOB, parse_snapshot_name

#: Store jobs whose interrupted runs are judged from the file: each runs a VACUUM, whose
#: committed effect is an empty freelist and a smaller page count (``judge``).
JUDGED_JOBS = frozenset({"vacuum", "scrub"})
#: The worker job whose interrupted runs are judged from ``snapshots/``.
SNAPSHOT_JOB = "snapshot"


def measure(conn: apsw.Connection) -> dict[str, int]:
    """The file as the connection sees it: ``page_size`` (bytes), ``page_count``,
    ``freelist_count`` (pages), ``file_bytes`` (size of the main file on disk). Raises
    apsw errors (the caller maps them)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    page_count = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return {
        "page_size": page_size,
        "page_count": page_count,
        "freelist_count": free,
        "file_bytes": os.stat(conn.filename).st_size,
    }


def judge(before: dict[str, Any], now: dict[str, Any]) -> tuple[str, str] | None:
    """``("ok", verdict)`` when the file shows a VACUUM completed since ``before``
    (``measure`` at the run's start): no free page is left and the database lost pages, at
    least the N it had free. Only a VACUUM gives pages back (``AUTO_VACUUM`` is INCREMENTAL and
    no ``incremental_vacuum`` runs), so this holds with N = 0 too: the vacuum job VACUUMs a
    store without free pages once it packed texts (``pack_stored`` frees the pages a VACUUM
    then returns). ``("interrupted", verdict)`` when nothing changed (same page count and
    N > 0 free pages still free). None when the figures are missing or the change proves
    neither."""
    try:
        b_pages, b_free, size = (
            int(before["page_count"]),
            int(before["freelist_count"]),
            int(before["page_size"]),
        )
        n_pages, n_free = int(now["page_count"]), int(now["freelist_count"])
    except (KeyError, TypeError, ValueError):
        return None
    if n_free == 0 and n_pages < b_pages and n_pages <= b_pages - b_free:
        return (
            "ok",
            f"completed (judged from effect: freelist {b_free} → 0, database shrank from "
            f"{b_pages * size} to {n_pages * size} bytes)",
        )
    if b_free > 0 and n_pages == b_pages and n_free == b_free:
        return (
            "interrupted",
            f"the process running it died before it finished (judged from effect: not done, "
            f"freelist still {n_free}, {n_pages} pages as at its start)",
        )
    return None


def _snapshot_time(name: str) -> float:
    """Epoch s a snapshot file name (``quill.home.snapshot_name``) was made at; ValueError if
    ``name`` is not one."""
    parts = Path(name).stem.split("-")  # snapshot, YYYYmmddTHHMMSS, ns, segment, offset
    if len(parts) != 5:
        raise ValueError(name)
    return calendar.timegm(time.strptime(parts[1], "%Y%m%dT%H%M%S")) + int(parts[2]) / 1e9


def judge_snapshot(
    snapshots_dir: str | Path, started_at: float, closed_at: float
) -> tuple[str, str] | None:
    """``("ok", verdict)`` when ``snapshots_dir`` holds a verified snapshot made between the
    run's start ``started_at`` and ``closed_at`` (epoch s): only a verified copy gets its final
    name, which carries the time it was made and the spool position it covers. None when there
    is none (the run died before, or its file was rotated away: not provable either way)."""
    made = []
    for path in Path(snapshots_dir).glob(SNAPSHOT_GLOB):
        try:
            at = _snapshot_time(path.name)
            seg, off = parse_snapshot_name(path.name)
        except ValueError:
            continue
        if started_at <= at <= closed_at:
            made.append((at, path.name, seg, off))
    if not made:
        return None
    _, name, seg, off = max(made)
    return (
        "ok",
        f"completed (judged from effect: verified snapshot {name} covering spool position "
        f"{seg}:{off})",
    )
