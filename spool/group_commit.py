"""The producers' optional group commit (``Spool(group_commit=True)``): concurrent appends
share one ``fdatasync`` through a rendezvous file in the spool directory. The protocol and why
"durable before the ack" still holds are in ``spool.producer``'s module doc. Mixed into
``spool.producer.Spool``.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from quill.spool.segments import FILE_MODE

#: The group-commit rendezvous in the spool directory (see the module doc): big-endian
#: segment number, the segment file's inode (a segment re-created under an old number is not
#: mistaken for the synced one) and its synced size. Not a segment; readers and GC ignore it.
SYNC_FILE = ".sync"
_SYNCED = struct.Struct(">QQQ")
#: Non-blocking attempts to lead a group commit before waiting for the lead in turn.
_LEAD_TRIES = 8


class GroupCommit:
    """``Spool._group_sync`` and its check; uses the handle's ``dir``, ``_segment`` and
    ``_sync_fd`` (-1 until the rendezvous file is opened)."""

    dir: Path
    _segment: int
    _sync_fd: int

    def _group_sync(self, fd: int, end: int) -> None:
        """Return once bytes ``[0, end)`` of the active segment are durable (module doc).

        Waiters hold the rendezvous lock *shared*, so when a sync completes every waiter it
        covered wakes at once and returns (an exclusive wait would hand the lock on one
        process at a time, which on 2 loaded cores is what the p99 pays); a waiter it did not
        cover tries to become the next syncer without blocking, and otherwise waits for the
        one that did. After ``_LEAD_TRIES`` lost races it waits for the lead in turn."""
        if self._sync_fd < 0:
            self._sync_fd = os.open(
                self.dir / SYNC_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE
            )
        sync_fd = self._sync_fd
        inode = os.fstat(fd).st_ino
        for attempt in range(_LEAD_TRIES + 1):
            fcntl.flock(sync_fd, fcntl.LOCK_SH)  # waits out a sync in progress
            try:
                covered = self._covered(sync_fd, inode, end)
            finally:
                fcntl.flock(sync_fd, fcntl.LOCK_UN)
            if covered:
                return  # a sync that began after our write returned has completed
            try:
                fcntl.flock(
                    sync_fd, fcntl.LOCK_EX | (0 if attempt == _LEAD_TRIES else fcntl.LOCK_NB)
                )
            except BlockingIOError:
                continue  # another producer leads: wait for its sync (shared), then look again
            try:
                if self._covered(sync_fd, inode, end):
                    return
                # The size is read under the segment lock: no append is half-written (or being
                # cut back after a failed write) at that moment, so [0, size) is whole records.
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    size = os.fstat(fd).st_size
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.fdatasync(fd)
                os.pwrite(sync_fd, _SYNCED.pack(self._segment, inode, size), 0)
                return
            finally:
                fcntl.flock(sync_fd, fcntl.LOCK_UN)

    def _covered(self, sync_fd: int, inode: int, end: int) -> bool:
        """Whether the published sync of our segment file reaches ``end`` (lock held)."""
        raw = os.pread(sync_fd, _SYNCED.size, 0)
        if len(raw) != _SYNCED.size:
            return False
        segment, synced_inode, synced = _SYNCED.unpack(raw)
        return segment == self._segment and synced_inode == inode and synced >= end
