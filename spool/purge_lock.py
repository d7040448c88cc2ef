"""The data dir's purge lock: one ``quill spool purge`` at a time (``LOCK_FILE``, an
exclusive ``flock`` in the spool directory), and the probe status uses to say a purge runs."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quill.spool.errors import SpoolError
from quill.spool.segments import FILE_MODE


class PurgeBusyError(SpoolError):
    """Another purge of the same data dir is running (it holds ``LOCK_FILE``)."""

    def __init__(self, lock: Path):
        super().__init__(
            f"another purge is running in this data dir (it holds {lock}); "
            "wait for it to finish, then re-run"
        )
        self.lock = lock


#: One purge at a time per data dir: ``ops.purge.procedure.purge`` holds an exclusive
#: ``flock`` on this file (in the spool directory; no reader, GC or stray-segment check matches
#: it) from its leftover cleanup to its last step. Two purges rewriting the same segment,
#: sharing the plan file, or one removing the other's temp files would undo each other's work.
LOCK_FILE = ".purge.lock"


@contextmanager
def exclusive(spool_dir: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the data dir's purge lock (``LOCK_FILE``) for the ``with`` body. ``wait``: block
    until a running purge ends; otherwise raise ``PurgeBusyError`` at once. The lock goes
    with the process (a killed purge leaves nothing held). Raises ``SpoolError`` on I/O errors."""
    path = Path(spool_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        raise SpoolError(f"cannot open the purge lock {path}: {exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise PurgeBusyError(path) from None
        yield
    finally:
        os.close(fd)


def running(spool_dir: Path) -> bool:
    """Whether a purge holds the data dir's purge lock now (a non-blocking probe; creates
    nothing: no lock file means no purge ever ran here)."""
    try:
        fd = os.open(Path(spool_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
