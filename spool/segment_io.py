"""The system calls that put one record at the end of a locked spool segment, and the
``SpoolError`` an ``OSError`` of theirs becomes (``spool.producer`` holds the lock and the
descriptor; the contract is in its module doc)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from quill.home.descriptors import EXHAUSTED_ERRNOS
from quill.spool.errors import DescriptorsExhaustedError, SpoolError, SpoolFullError

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

#: Turns an ``OSError`` of a write into the ``SpoolError`` to raise (``os_error`` bound to
#: the segment's path, made only when a write fails: never on the append path).
ErrorOf = Callable[[OSError], SpoolError]


def write_locked(fd: int, size: int, line: bytes | memoryview, error_of: ErrorOf) -> int:
    """Write ``line`` at the end (``size`` bytes) of the segment open as ``fd``, whose lock
    the caller holds; returns the record's offset. A torn tail (last byte not ``\\n``) is
    terminated first. Raises ``error_of(exc)`` with nothing partial left in the file."""
    if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
        # A torn tail from a producer killed mid-write: terminate it so it stays a
        # line of its own (quarantined by the drain) instead of fusing with ours.
        write_all(fd, size, b"\n", error_of)
        size += 1
    write_all(fd, size, line, error_of)
    return size


def write_all(fd: int, size: int, data: bytes | memoryview, error_of: ErrorOf) -> None:
    """One ``write`` of ``data`` at the end (``size`` bytes) of ``fd``'s file. A failed or
    short write cuts the file back to ``size`` and raises ``error_of(exc)``."""
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.ENOSPC, "short write")
    except OSError as exc:
        # Leave no partial record: cut the file back to where this write began.
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass  # the original error below is the one to report
        raise error_of(exc) from exc


def os_error(exc: OSError, path: Path) -> SpoolError:
    """The ``SpoolError`` for ``exc`` raised appending to segment ``path``:
    ``SpoolFullError`` (no space or quota), ``DescriptorsExhaustedError``, else
    ``SpoolError``."""
    if exc.errno in _FULL_ERRNOS:
        import shutil  # only on a failed write: `quill push` imports the producer side alone

        return SpoolFullError(str(path), shutil.disk_usage(path.parent).free)
    if exc.errno in EXHAUSTED_ERRNOS:
        return DescriptorsExhaustedError(f"no file descriptor left to append to {path}")
    return SpoolError(f"cannot append to {path}: {exc}")
