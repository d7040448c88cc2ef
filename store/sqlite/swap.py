"""Swapping a rebuilt store in place of a damaged one, keeping the old files as evidence.

The rebuild itself (newest verified snapshot + spool replay) lives in ``ops.recover.sqlite``; this
module owns the file-level steps, which must only run while no connection writes the store.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import apsw

from quill.home import evidence_dir
from quill.home.layout import private_dirs
from quill.store.errors import mapped
from quill.store.sqlite.connection import open_reader
from quill.store.sqlite.guard import new_generation


def integrity(db_path: Path) -> list[str]:
    """``PRAGMA integrity_check`` rows of a store (``["ok"]`` when healthy)."""
    conn = open_reader(db_path)
    try:
        with mapped():
            return [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def stamp_generation(db_path: Path) -> int:
    """Give a rebuilt store a fresh generation stamp (so a stale copy is told apart)."""
    conn = apsw.Connection(str(db_path))
    try:
        return new_generation(conn)
    finally:
        conn.close()


def swap_in(new: Path, db_path: Path) -> Path:
    """Atomically make ``new`` the store at ``db_path``. The old file and its ``-wal``/``-shm``
    move to ``evidence/state-<UTC time>/`` beside it (never deleted). Returns that folder.

    Precondition: no process has ``db_path`` open for writing (the caller holds the writer
    lease, or is the halted writer whose connection is closed).
    """
    db_path = Path(db_path)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    evidence = evidence_dir(db_path.parent, f"{stamp}-{os.getpid()}")
    private_dirs(evidence)
    for suffix in ("-wal", "-shm", ""):
        old = Path(str(db_path) + suffix)
        if old.exists():
            os.rename(old, evidence / (db_path.name + suffix))
    for suffix in ("-wal", "-shm"):
        Path(str(new) + suffix).unlink(missing_ok=True)  # the rebuilt file was closed cleanly
    os.rename(new, db_path)
    fd = os.open(db_path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return evidence
