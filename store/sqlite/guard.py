"""Detecting that ``state.db`` or its WAL was replaced or removed under the writer.

Stores are lost to files replaced under a running process and to a deleted ``-wal`` that
SQLite kept writing into (the unlinked inode vanishes at close, with every commit since the
last checkpoint). The guard makes each of these a
sticky halt *before* the next write:

* the path's (device, inode) changed → the file was replaced or removed;
* the header's ``application_id`` (Quill's generation stamp, set when a store is created or
  recovered) changed → another database was copied over the same inode;
* the file's mtime changed although only our own commits write it → someone wrote to it;
* the ``-wal`` path's (device, inode) changed or it disappeared → the WAL was unlinked or
  replaced, and a new WAL generation must not be started.

The header is read with ``pread`` on a descriptor opened once and closed only after the SQLite
connection: closing *any* descriptor of a SQLite file drops the process's POSIX locks.
"""

from __future__ import annotations

import os
import secrets
import struct
from pathlib import Path

import apsw

from quill.store.errors import ReplacedError, mapped

_APP_ID_OFFSET = 68  # SQLite file header: "Application ID" at bytes 68..71 (big-endian)


def new_generation(conn: apsw.Connection) -> int:
    """Stamp a fresh random generation into ``application_id`` and checkpoint it to disk."""
    stamp = secrets.randbelow(2**31 - 1) + 1
    with mapped():
        conn.execute(f"PRAGMA application_id = {stamp}")
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    return stamp


class FileGuard:
    """Identity of a store file and its WAL, checked before every write transaction."""

    def __init__(self, conn: apsw.Connection, db_path: Path):
        self.path = Path(db_path)
        self.wal = Path(str(self.path) + "-wal")
        with mapped():
            stamp = conn.execute("PRAGMA application_id").fetchone()[0]
            if stamp == 0:
                stamp = new_generation(conn)
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)  # header on disk is current
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        st = os.fstat(self._fd)
        self._ident = (st.st_dev, st.st_ino)
        self.generation = stamp
        if self._header_stamp() != stamp:
            raise ReplacedError(
                f"{self.path}: header generation {self._header_stamp()} != {stamp} at open"
            )
        self._wal_ident = self._stat_ident(self.wal)
        self._mtime = st.st_mtime_ns

    @staticmethod
    def _stat_ident(path: Path) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _header_stamp(self) -> int:
        raw = os.pread(self._fd, 4, _APP_ID_OFFSET)
        if len(raw) < 4:
            raise ReplacedError(f"{self.path} was truncated under the writer (no database header)")
        return struct.unpack(">I", raw)[0]

    def check(self) -> None:
        """Raise ``ReplacedError`` if the file or WAL is not the one this writer opened."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise ReplacedError(f"{self.path} was removed under the writer") from None
        if (st.st_dev, st.st_ino) != self._ident:
            raise ReplacedError(f"{self.path} was replaced (inode {self._ident[1]} → {st.st_ino})")
        if self._header_stamp() != self.generation:
            raise ReplacedError(
                f"{self.path} holds another database (generation stamp "
                f"{self._header_stamp()} != {self.generation})"
            )
        if st.st_mtime_ns != self._mtime:
            raise ReplacedError(f"{self.path} was modified by another process (mtime changed)")
        wal = self._stat_ident(self.wal)
        if self._wal_ident is not None and wal != self._wal_ident:
            what = "removed" if wal is None else "replaced"
            raise ReplacedError(
                f"{self.wal} was {what} under the writer; refusing to start a new WAL"
            )

    def committed(self) -> None:
        """Record the file's state after one of our own commits (which may checkpoint)."""
        try:
            self._mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return  # removed: the next check() reports it
        if self._wal_ident is None:
            self._wal_ident = self._stat_ident(self.wal)

    def close(self) -> None:
        """Close the header descriptor. Call only after the SQLite connection is closed."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
