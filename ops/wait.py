"""Read-your-writes: wait until the writer has applied a spool position."""
from __future__ import annotations

import time
from pathlib import Path

from spool import Position, WaitTimeoutError
from store.errors import CantOpenError
from store.reads import Reader


def applied_position(db_path: Path) -> Position | None:
    """The store's committed cursor, or None when nothing was applied yet."""
    try:
        with Reader(db_path) as reader:
            cursor = reader.figures()["cursor"]
    except CantOpenError:
        return None
    return Position.parse(cursor) if cursor else None


def wait_applied(db_path: Path, position: Position, timeout: float, poll: float = 0.05) -> float:
    """Block until the record at ``position`` is applied (cursor past it); returns the
    seconds waited. Raises ``WaitTimeoutError`` after ``timeout`` seconds."""
    start = time.monotonic()
    while True:
        cursor = applied_position(db_path)
        if cursor is not None and cursor > position:
            return time.monotonic() - start
        if time.monotonic() - start >= timeout:
            raise WaitTimeoutError(f"record at {position} not applied within {timeout:g} s "
                                   f"(store cursor: {cursor}); is `quill run` running?")
        time.sleep(poll)
