"""Salvaging readable rows from a damaged store into a rebuilt one.

Recovery rebuilds from snapshot + spool, which holds every acknowledged batch unless spool
segments were lost outside Quill's rules. For that case the damaged file may still hold rows
nobody else has: ``salvage`` copies every *readable* session and message whose batch the
rebuilt store does not know, reading in id ranges so one damaged page costs only the rows on
it (a failing range is split until single rows; unreadable ones are counted, not guessed).
Salvaged messages keep their batch id and state and get ``extra.salvaged_from`` so they can
be told apart; they are appended after the rebuilt rows (new ids, order kept among them).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from .connection import open_reader, transaction
from .normalize import ROW_COLUMNS

_MSG_COLS = ("session_id", *ROW_COLUMNS, "arrived_at", "state", "batch_id")
_SESSION_COLS = ("id", "source", "model", "title", "cwd", "parent_id", "parent_kind", "started_at", "ended_at",
                 "end_reason", "archived", "pinned", "hidden", "meta", "created_at")
_DAMAGE = (apsw.CorruptError, apsw.NotADBError, apsw.IOError)
RANGE = 512


def _rows_in(conn: apsw.Connection, lo: int, hi: int, bad: list[int]) -> list[tuple]:
    """Readable message rows with ``lo <= id < hi``; ids of unreadable single rows go to ``bad``."""
    try:
        return conn.execute(f"SELECT id, {', '.join(_MSG_COLS)} FROM messages WHERE id >= ? AND id < ? ORDER BY id",
                            (lo, hi)).fetchall()
    except _DAMAGE:
        if hi - lo <= 1:
            bad.append(lo)
            return []
        mid = (lo + hi) // 2
        return _rows_in(conn, lo, mid, bad) + _rows_in(conn, mid, hi, bad)


def salvage(damaged: Path, target: apsw.Connection) -> dict[str, Any]:
    """Copy readable rows of ``damaged`` missing from ``target`` (the rebuilt writer
    connection). Figures: sessions and messages salvaged, message ids unreadable, or why
    nothing could be read at all."""
    try:
        src = open_reader(damaged)
    except Exception as exc:  # noqa: BLE001 — an unopenable file simply has nothing to give
        return {"salvaged_sessions": 0, "salvaged_messages": 0, "unreadable": f"{type(exc).__name__}: {exc}"}
    known = {b for (b,) in target.execute("SELECT batch_id FROM applied_batches")}
    sessions = messages = 0
    bad: list[int] = []
    try:
        try:
            top = src.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
            srows = src.execute(f"SELECT {', '.join(_SESSION_COLS)} FROM sessions").fetchall()
        except _DAMAGE as exc:
            return {"salvaged_sessions": 0, "salvaged_messages": 0, "unreadable": f"{type(exc).__name__}: {exc}"}
        with transaction(target):
            for row in srows:
                target.execute(f"INSERT OR IGNORE INTO sessions ({', '.join(_SESSION_COLS)}) VALUES "
                               f"({', '.join('?' for _ in _SESSION_COLS)})", row)
                sessions += target.changes()
            for lo in range(0, top + 1, RANGE):
                for row in _rows_in(src, lo, lo + RANGE, bad):
                    values = dict(zip(("id", *_MSG_COLS), row))
                    if values["batch_id"] in known:
                        continue
                    extra = json.loads(values["extra"] or "{}")
                    extra["salvaged_from"] = {"file": str(damaged), "id": values["id"]}
                    values["extra"] = json.dumps(extra, separators=(",", ":"))
                    target.execute(f"INSERT OR IGNORE INTO messages ({', '.join(_MSG_COLS)}) VALUES "
                                   f"({', '.join('?' for _ in _MSG_COLS)})", [values[c] for c in _MSG_COLS])
                    messages += target.changes()
        if messages:
            _copy_blobs(src, target)
    finally:
        src.close()
    return {"salvaged_sessions": sessions, "salvaged_messages": messages, "unreadable_message_ids": len(bad)}


def _copy_blobs(src: apsw.Connection, target: apsw.Connection) -> None:
    """Salvaged rows may reference blobs (store/blobs.py) the rebuilt store lacks: copy every
    readable blob row it does not hold (a v1 file has no blobs table: nothing to copy)."""
    cols = "sha256, encoding, data, size, created_at"
    try:
        rows = src.execute(f"SELECT {cols} FROM blobs").fetchall()
    except (*_DAMAGE, apsw.SQLError):
        return
    with transaction(target):
        target.executemany(f"INSERT OR IGNORE INTO blobs ({cols}) VALUES (?, ?, ?, ?, ?)", rows)
