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

import os
from typing import Any

import apsw

#: Store jobs whose interrupted runs are judged from the file: each runs a VACUUM, whose
#: committed effect is an empty freelist and a smaller page count.
JUDGED_JOBS = frozenset({"vacuum", "scrub"})


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
    (``measure`` at the run's start): the freelist went from N > 0 to 0 and the database lost
    at least those N pages. ``("interrupted", verdict)`` when nothing changed (same page count
    and N > 0 free pages still free). None when the figures are missing or the change proves
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
    if b_free > 0 and n_free == 0 and n_pages <= b_pages - b_free:
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
