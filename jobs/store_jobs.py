"""Jobs that write ``state.db``: run only by the writer, on its one connection, between
drain chunks (DESIGN.md, "Processes"). Each takes the writer connection plus keyword
parameters and returns a dict of figures recorded in ``job_runs``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import apsw

from store.connection import transaction
from store.errors import mapped

_CHECKPOINT_MODES = {
    "PASSIVE": apsw.SQLITE_CHECKPOINT_PASSIVE,
    "FULL": apsw.SQLITE_CHECKPOINT_FULL,
    "RESTART": apsw.SQLITE_CHECKPOINT_RESTART,
    "TRUNCATE": apsw.SQLITE_CHECKPOINT_TRUNCATE,
}


def _wal_bytes(conn: apsw.Connection) -> int:
    try:
        return os.stat(conn.filename + "-wal").st_size
    except FileNotFoundError:
        return 0


def wal_checkpoint(conn: apsw.Connection, mode: str = "PASSIVE") -> dict[str, Any]:
    """Checkpoint the WAL. PASSIVE never waits for readers; TRUNCATE also resets the WAL file
    to zero bytes (use only when idle: it waits for readers). Figures: WAL bytes before/after,
    frames in the log and frames checkpointed."""
    if mode not in _CHECKPOINT_MODES:
        raise ValueError(f"checkpoint mode must be one of {sorted(_CHECKPOINT_MODES)}")
    before = _wal_bytes(conn)
    with mapped():
        log_frames, done = conn.wal_checkpoint(mode=_CHECKPOINT_MODES[mode])
    return {"mode": mode, "wal_bytes_before": before, "wal_bytes_after": _wal_bytes(conn),
            "log_frames": log_frames, "checkpointed_frames": done}


def fts_optimize(conn: apsw.Connection) -> dict[str, Any]:
    """Merge the FTS5 index b-trees into one (FTS5 'optimize'). Figures: seconds taken."""
    start = time.monotonic()
    with transaction(conn):
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    return {"seconds": round(time.monotonic() - start, 3)}


def record_job_run(conn: apsw.Connection, job: str, started_at: float, ended_at: float,
                   outcome: str, figures: dict | None = None, error: str | None = None) -> dict[str, Any]:
    """Record a run of a job that ran outside the writer (the job workers cannot write the
    store, so they send their run record here)."""
    with transaction(conn):
        conn.execute("INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     (job, started_at, ended_at, outcome, json.dumps(figures or {}), error))
    return {}
