"""Opening ``state.db``: the writer's one read-write connection and read-only connections.

* Writer: WAL, ``synchronous=NORMAL`` by default (FULL configurable), a busy timeout, and
  every write transaction begun with ``BEGIN IMMEDIATE`` (``transaction()``), so a lock
  conflict surfaces at BEGIN, never half way through a transaction.
* Readers: a ``file:`` URI built from the *resolved* path with ``mode=ro``; the path is
  percent-quoted so names with ``?``, ``#`` or spaces open the right file.
"""
from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import apsw

from . import schema
from .errors import CantOpenError, mapped

#: The writer waits this long for a lock before SQLITE_BUSY (ms). Only readers and the
#: backup API can contend with the single writer, and they hold locks briefly.
WRITER_BUSY_MS = 5000
READER_BUSY_MS = 2000
FILE_MODE = 0o600


def reader_uri(path: Path) -> str:
    """``file:`` URI for a read-only open of ``path`` (resolved, percent-quoted)."""
    return "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"


#: SQLite before 3.51.3 can corrupt a WAL database when the WAL is reset while another
#: connection checkpoints (the WAL-reset bug, fixed in 3.51.3; DESIGN.md "The store").
MIN_SQLITE = (3, 51, 3)


def check_sqlite_version(version: str | None = None) -> None:
    """Raise ``CantOpenError`` if the SQLite that apsw links has the WAL-reset bug."""
    version = version or apsw.sqlite_lib_version()
    if tuple(int(x) for x in version.split(".")[:3]) < MIN_SQLITE:
        raise CantOpenError(f"SQLite {version} has the WAL-reset corruption bug; Quill needs "
                            f"≥ {'.'.join(map(str, MIN_SQLITE))} (upgrade apsw)")


def open_writer(path: Path, *, synchronous: str = "NORMAL") -> apsw.Connection:
    """Open (creating if needed) ``state.db`` for writing and bring its schema to v1.

    Only the process holding the writer lease may call this. Raises the store error tree,
    ``CantOpenError`` included when the linked SQLite has the WAL-reset bug.
    """
    check_sqlite_version()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with mapped():
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
        conn.set_busy_timeout(WRITER_BUSY_MS)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise apsw.CantOpenError(f"could not enable WAL on {path} (journal_mode={mode})")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=OFF")  # sessions are auto-created; no FK enforcement
        schema.create(conn)
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            os.chmod(p, FILE_MODE)  # chmod the path; never open+close a live db file
    return conn


def open_reader(path: Path, *, vfs: str | None = None) -> apsw.Connection:
    """Open ``state.db`` read-only. Raises ``CantOpenError`` when it does not exist yet.
    ``vfs`` names a registered SQLite VFS (default: the OS one); tests use it to inject I/O
    faults without mocking anything above SQLite."""
    with mapped():
        conn = apsw.Connection(reader_uri(path), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                               **({"vfs": vfs} if vfs else {}))
        conn.set_busy_timeout(READER_BUSY_MS)
    return conn


@contextlib.contextmanager
def transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception; apsw errors mapped."""
    with mapped():
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if not conn.in_transaction:
                raise
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
