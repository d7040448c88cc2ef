"""The write-ahead log of a SQLite store: its size and checkpoints that never wait.

A checkpoint copies committed WAL frames into ``state.db``; TRUNCATE also resets the WAL to
0 bytes. Readers on an older snapshot hold frames back, so every checkpoint here runs with a
busy timeout of 0 and reports ``blocked_by_reader`` instead of stalling the writer.
"""

from __future__ import annotations

import os
from typing import Any

import apsw

from quill.store.errors import TransientError, mapped
from quill.store.sqlite.connection import WRITER_BUSY_MS

_CHECKPOINT_MODES = {
    "PASSIVE": apsw.SQLITE_CHECKPOINT_PASSIVE,
    "FULL": apsw.SQLITE_CHECKPOINT_FULL,
    "RESTART": apsw.SQLITE_CHECKPOINT_RESTART,
    "TRUNCATE": apsw.SQLITE_CHECKPOINT_TRUNCATE,
}


def wal_bytes(conn: apsw.Connection) -> int:
    """Size of the store's ``-wal`` file in bytes (0 when absent)."""
    try:
        return os.stat(conn.filename + "-wal").st_size
    except FileNotFoundError:
        return 0


def wal_checkpoint(conn: apsw.Connection, mode: str = "PASSIVE") -> dict[str, Any]:
    """Checkpoint the WAL without ever waiting: the writer's drain must not stall behind it.

    PASSIVE copies what it can. FULL/RESTART/TRUNCATE would wait (busy handler) for readers
    on an older snapshot; here the busy timeout is 0 for the call, so SQLite checkpoints as
    far as it can and returns SQLITE_BUSY when a reader holds back the rest (SQLite docs,
    ``sqlite3_wal_checkpoint_v2``) — reported as ``blocked_by_reader`` instead of a 5 s
    pause and a "database is locked" warning. TRUNCATE also resets the WAL file to 0 bytes.

    Figures: mode, WAL bytes before/after, frames in the log and checkpointed (None when
    blocked), ``blocked_by_reader``. Raises ``ValueError`` for an unknown mode."""
    mode = mode.upper()
    if mode not in _CHECKPOINT_MODES:
        raise ValueError(f"checkpoint mode must be one of {sorted(_CHECKPOINT_MODES)}")
    before = wal_bytes(conn)
    log_frames = done = None
    blocked = False
    conn.set_busy_timeout(0)
    try:
        with mapped():
            log_frames, done = conn.wal_checkpoint(mode=_CHECKPOINT_MODES[mode])
    except TransientError:  # SQLITE_BUSY: a reader (or the backup API) holds an older snapshot
        blocked = True
    finally:
        conn.set_busy_timeout(WRITER_BUSY_MS)
    return {
        "mode": mode,
        "wal_bytes_before": before,
        "wal_bytes_after": wal_bytes(conn),
        "log_frames": log_frames,
        "checkpointed_frames": done,
        "blocked_by_reader": blocked,
    }
