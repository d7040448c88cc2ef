"""The store-wide halt of a shared PostgreSQL store (docs/backends.md, "Maintenance").

On SQLite, damage found by the integrity check halts the one writer (``declare_corrupt`` →
``CorruptError`` → sticky halt, ``quill recover``). On PostgreSQL several hosts' writers
share the store, so the halt lives in the store: ``state_meta['halt']`` holds the cause as
JSON. Every chunk reads it inside its transaction (``store.postgres.apply``) and raises
``CorruptError`` while it is set, so no host writes into a damaged store; producers keep
appending to their spools meanwhile and nothing is lost. ``quill recover`` clears it once
amcheck passes again (after ``REINDEX`` or a restore). The row is bookkeeping, like the
cursor, not canonical data: it is not an op.
"""

from __future__ import annotations

import json
from typing import Any

from quill.store.apply.later import later
from quill.store.errors import CorruptError, stored_json

KEY = "halt"


def declare(conn: Any, cause: str, detail: str, now: float) -> dict[str, Any]:
    """Set the store's halt (autocommitted); returns the recorded cause ``{"cause",
    "detail", "at", "next"}``."""
    halt = {
        "cause": cause,
        "detail": detail,
        "at": now,
        "next": "quill recover (after REINDEX or a restore)",
    }
    conn.execute(
        "INSERT INTO state_meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (KEY, json.dumps(halt)),
    )
    return halt


def read(conn: Any) -> dict[str, Any] | None:
    """The store's halt cause, or None when writes may go on. Raises ``DamagedValueError``
    (a ``CorruptError``) when the recorded cause does not parse."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (KEY,)).fetchone()
    return stored_json(row[0], "halt record") if row else None


def ask(conn: Any) -> Any:
    """The halt read, queued (``store.apply.later``) to go with the statements after it:
    pass what this returns to ``check``."""
    return later(conn, "SELECT value FROM state_meta WHERE key = ?", (KEY,))


def check(conn: Any, asked: Any = None) -> None:
    """Raise ``CorruptError`` (the writer's sticky-halt path) while the store is halted.
    ``asked``: the rows of ``ask(conn)`` (default: read now)."""
    row = (asked if asked is not None else ask(conn)).fetchone()
    halt = stored_json(row[0], "halt record") if row else None
    if halt is not None:
        err = CorruptError(f"the store is halted: {halt['cause']}: {halt['detail']}")
        err.backend = "postgresql"  # what to do differs from SQLite's (ops.client.errors)
        raise err


def clear(conn: Any) -> bool:
    """Lift the halt; True if there was one."""
    conn.execute("DELETE FROM state_meta WHERE key = ?", (KEY,))
    return conn.changes() > 0
