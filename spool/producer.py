"""The producer side of the spool: ``Spool(dir).append(op, data)``.

Durability and concurrency contract (DESIGN.md, "The spool"; issue 4):

* one ``write()`` per record to a segment opened ``O_APPEND``, under an exclusive ``flock`` on
  that segment held only for the write, so records from concurrent producer processes never
  interleave and no producer holds up another for longer than one append;
* before writing, a segment whose last byte is not ``\\n`` (a producer was killed mid-write)
  gets a lone ``\\n``: the torn fragment becomes its own damaged line, which the drain
  quarantines, and never fuses with the new record;
* ``fdatasync`` after the lock is released, before ``append`` returns: concurrent producers
  share the filesystem's journal commit (group commit) instead of queueing on the lock;
* rotation by size: a producer that finds the active segment at or past ``segment_bytes``
  creates the next one (``O_EXCL``) and fsyncs the directory.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
import uuid
from typing import Any, NamedTuple

from . import record
from .errors import InvalidOpError, SpoolError, SpoolFullError
from .segments import FILE_MODE, Position, ensure_dir, fsync_dir, list_segments, resolve_spool_dir, segment_name

#: Default rotation size. 64 MiB keeps segment counts small while GC can still free space
#: at a useful granularity.
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class Ack(NamedTuple):
    """What ``append`` returns once the record is durable: where it is and its batch id."""

    position: Position
    batch_id: str


class Spool:
    """A producer handle on a spool directory. Cheap to create; one per process is typical.

    ``spool_dir`` may be the spool directory or the Quill data dir holding it (the spool
    inside is used); a directory that is neither raises ``SpoolLocationError``
    (``segments.resolve_spool_dir``), so no ack is ever given for a place nothing drains.

    Not thread-safe: give each thread its own ``Spool`` (they may share the directory).
    ``producer_id`` defaults to ``host:pid:random``; ``seq`` counts this handle's appends.
    """

    def __init__(self, spool_dir: str | os.PathLike[str], *, producer_id: str | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, fsync: bool = True):
        self.dir = resolve_spool_dir(spool_dir)
        self.producer_id = producer_id or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.segment_bytes = segment_bytes
        self._fsync = fsync
        self._seq = 0
        self._segment = 0
        self._fd = -1
        ensure_dir(self.dir)

    def append(self, op: str, data: dict[str, Any], *, batch_id: str | None = None) -> Ack:
        """Append one op durably and return its ``Ack`` (position, batch id).

        ``op`` must be one of ``record.OP_KINDS``; ``data`` a JSON-serialisable dict. Reusing a
        ``batch_id`` is how a producer retries safely: the store applies a batch id once.
        Raises ``InvalidOpError`` (bad op/data), ``SpoolFullError`` (ENOSPC; nothing partial
        is left) or ``SpoolError`` (other I/O failures, with the OS error chained).
        """
        if op not in record.OP_KINDS:
            raise InvalidOpError(f"unknown op {op!r}; expected one of {sorted(record.OP_KINDS)}")
        if not isinstance(data, dict):
            raise InvalidOpError(f"op data must be a JSON object, got {type(data).__name__}")
        batch_id = batch_id or str(uuid.uuid4())
        self._seq += 1
        body = {"v": record.VERSION, "op": op, "batch": batch_id, "producer": self.producer_id,
                "seq": self._seq, "ts": time.time(), "data": data}
        try:
            line = record.encode(body)
        except (TypeError, ValueError) as exc:
            raise InvalidOpError(f"op data is not JSON-serialisable: {exc}") from None
        offset = self._write(line)
        return Ack(Position(self._segment, offset), batch_id)

    def close(self) -> None:
        """Close the cached segment descriptor. The handle may be used again afterwards."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._segment = -1, 0

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------

    def _write(self, line: bytes) -> int:
        while True:
            fd = self._active_fd()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                size = os.fstat(fd).st_size
                if size >= self.segment_bytes:
                    full = True
                else:
                    full = False
                    offset = self._write_locked(fd, size, line)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if full:
                self._rotate()
                continue
            if self._fsync:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    raise self._os_error(exc) from exc
            return offset

    def _write_locked(self, fd: int, size: int, line: bytes) -> int:
        """Write ``line`` at the end of the locked segment; returns the record's offset."""
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            # A torn tail from a producer killed mid-write: terminate it so it stays a
            # line of its own (quarantined by the drain) instead of fusing with ours.
            self._write_all(fd, size, b"\n")
            size += 1
        self._write_all(fd, size, line)
        return size

    def _write_all(self, fd: int, size: int, data: bytes) -> None:
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
            raise self._os_error(exc) from exc

    def _os_error(self, exc: OSError) -> SpoolError:
        path = self.dir / segment_name(self._segment)
        if exc.errno in _FULL_ERRNOS:
            return SpoolFullError(str(path), shutil.disk_usage(self.dir).free)
        return SpoolError(f"cannot append to {path}: {exc}")

    def _active_fd(self) -> int:
        if self._fd < 0:
            segments = list_segments(self.dir)
            self._open(segments[-1] if segments else 1, create=not segments)
        return self._fd

    def _rotate(self) -> None:
        """Move to the newest segment, creating the next one if ours is still the newest."""
        newest = max(list_segments(self.dir), default=self._segment)
        if newest <= self._segment:
            self._open(self._segment + 1, create=True)
        else:
            self._open(newest, create=False)

    def _open(self, number: int, *, create: bool) -> None:
        self.close()
        path = self.dir / segment_name(number)
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            if create:
                try:
                    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
                    os.chmod(path, FILE_MODE)  # O_CREAT's mode is filtered by the umask
                    fsync_dir(self.dir)
                except FileExistsError:
                    fd = os.open(path, flags)  # another producer created it first
            else:
                fd = os.open(path, flags)
        except OSError as exc:
            self._segment = number
            raise self._os_error(exc) from exc
        self._fd, self._segment = fd, number
