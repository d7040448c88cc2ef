"""Exclusive leases held for a process's lifetime: the writer lease (one writer per store),
the scheduler lease and the fleet lease (one of each per data dir).

A lease is an ``flock`` on a lock file, so the kernel releases it when the holder dies —
a dead holder's lease is taken over with no stale-lock logic. The file also records the
holder's identity (``quill.home.process_identity``) so a refusal can name it, and so a reader
can tell a live holder from a recycled pid (``quill.home.holder_alive``). The lock files' names
and the liveness rule belong to ``quill.home.RunDir``.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from quill.home import process_identity, read_holder
from quill.home.layout import private_dirs
from quill.store.errors import LeaseHeldError


class Lease:
    """An exclusive, non-blocking lease on ``lock_path``. Use ``acquire()`` / ``release()``."""

    def __init__(self, lock_path: Path):
        self.path = Path(lock_path)
        self._fd = -1
        #: Why the holder's identity could not be written at ``acquire`` (None: it was).
        self.unrecorded: str | None = None

    def acquire(self) -> Lease:
        """Take the lease or raise ``LeaseHeldError`` naming the live holder."""
        private_dirs(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeldError(str(self.path), read_holder(self.path)) from None
        # The path too: a copied data dir carries this file, naming a live process that does
        # not hold *its* lease. Written over the old identity, then cut to length (never cut
        # first: a full disk could then refuse the block the old one held). The identity is
        # bookkeeping: the flock is the lease, so a full disk (any OSError here) leaves it
        # held and unnamed (``unrecorded``: the error) rather than taking the holder down.
        body = json.dumps({**process_identity(), "path": str(self.path)}).encode()
        self.unrecorded = None
        try:
            os.pwrite(fd, body, 0)
            os.ftruncate(fd, len(body))
        except OSError as exc:
            self.unrecorded = f"{exc.strerror or exc} (errno {exc.errno})"
        self._fd = fd
        return self

    @property
    def held(self) -> bool:
        """True while this lease object holds its lock (between ``acquire`` and ``release``)."""
        return self._fd >= 0

    def release(self) -> None:
        """Drop the lease (idempotent). The holder's identity is cut from the file first,
        while the lock is still held: a process that released its lease but lives on (a
        command that drained in process, then went on) is no longer named as its holder
        (``RunDir.lease_holder``: "is a writer up?" must not see one)."""
        if self._fd >= 0:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:  # bookkeeping only (as at acquire): the lock is dropped regardless
                pass
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
