"""Files beside a quarantine entry and how entry files are written (``spool.quarantine``)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from quill.spool.segments import FILE_MODE

#: Suffix of the file holding the whole bytes of an over-limit line beside its entry.
LINE_SUFFIX = ".line"
#: Suffix of an entry whose refusal was not committed (``Quarantine.withdraw``).
UNCOMMITTED_SUFFIX = ".uncommitted"


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Write ``value`` to ``path`` whole: a temp file, fsynced, renamed over it (the caller
    fsyncs the folder)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            data = json.dumps(value, ensure_ascii=False).encode()
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write", str(tmp))
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written file left where the disk is full
        raise
    os.replace(tmp, path)


def copy_line(segment: Path, offset: int, size: int, entry: Path) -> str:
    """Copy ``size`` bytes at ``offset`` of ``segment`` to ``entry``'s ``.line`` file
    (``os.copy_file_range``: in the kernel), fsynced; returns the file's name. Raises
    ``OSError``, also when the segment ends before ``size`` bytes were copied."""
    target = entry.with_suffix(LINE_SUFFIX)
    tmp = target.with_suffix(".line-tmp")
    src = os.open(segment, os.O_RDONLY | os.O_CLOEXEC)
    try:
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            done = 0
            while done < size:
                n = os.copy_file_range(src, dst, size - done, offset + done, done)
                if n == 0:
                    raise OSError(f"{segment} ended {size - done} byte(s) short of its line")
                done += n
            os.fsync(dst)
        finally:
            os.close(dst)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no partial copy left where the disk is full
        raise
    finally:
        os.close(src)
    os.replace(tmp, target)
    return target.name
