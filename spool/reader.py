"""The consumer side of the spool: yield records in order, with their positions.

Only complete lines (ending in ``\\n``) are records. A tail without ``\\n`` is "not yet
written" while a producer may still be writing it; once no producer holds the segment's lock
(checked with a non-blocking ``flock``), the tail is torn for good, and ``seal_torn_tail``
terminates it so the next read yields it as a damaged line to quarantine. A segment that is
no longer the newest (rotation, or a purge sealed it) had any torn tail terminated by its
sealer, so a tail without ``\n`` there means the file was cut short: the reader yields it,
as it stands, as a damaged entry (reason ``torn-tail``, loss) and goes on to the next
segment. A damaged line never hides the lines after it: each line is decoded on its own.

A line (or sealed tail) proven to be a producer's torn write — a strict prefix of a record
ending where a torn-tail repair ``\n`` was written (``spool.torn``) — is yielded with reason
``torn-write``: never acknowledged, so not damage; it is quarantined with its bytes all the same.

A line longer than ``max_line`` (``[spool] max_record_bytes``; only a producer that did not
enforce the limit writes one) is never read whole (``spool.lines``): it is yielded with reason
``over-limit``, its first bytes as ``raw`` and its size and digest in ``over``, and the reader
goes on with the next line. So one line costs at most ``max_line`` bytes of memory.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool import record, torn
from quill.spool.errors import DamagedRecordError, SpoolFullError
from quill.spool.lines import OVER_LIMIT, OverLimit, over_limit_detail, read_line
from quill.spool.segments import Position, list_segments, segment_name
from quill.spool.torn import TORN_DETAIL, TORN_WRITE

#: Reads are buffered in blocks of this size; lines longer than this still work (readline).
_READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One line of the spool.

    ``position`` is where the line starts and ``next`` where the line after it starts (the
    cursor value once this line is applied). Exactly one of ``record`` (a decoded body) or
    ``damage`` (why it could not be decoded) is set; ``raw`` is the line's bytes — only its
    first ``lines.HEAD_BYTES`` when the line is over the limit (``over`` is then set: size and
    digest of the whole line; ``damage.reason`` is ``over-limit``).
    """

    position: Position
    next: Position
    raw: bytes
    record: dict[str, Any] | None
    damage: DamagedRecordError | None
    over: OverLimit | None = None

    @property
    def size(self) -> int:
        """The line's length in bytes (``next - position``), whether or not ``raw`` holds it all."""
        return self.over.size if self.over is not None else len(self.raw)


class SpoolReader:
    """Reads a spool directory from a position. Stateless between calls; safe to reuse.
    ``max_line``: the longest line read whole (bytes, ``\\n`` included): the data dir's
    ``[spool] max_record_bytes``; a longer line is yielded as ``over-limit`` (module doc)."""

    def __init__(
        self, spool_dir: str | os.PathLike[str], *, max_line: int = DEFAULTS.max_record_bytes
    ):
        self.dir = Path(spool_dir)
        self.max_line = max_line

    def read(self, start: Position, *, max_bytes: int = 8 << 20) -> Iterator[Entry]:
        """Yield entries from ``start`` on, stopping after about ``max_bytes`` of lines.

        A position at the end of a segment moves on to the next segment when one exists.
        Position ``(n, 0)`` for a segment that was garbage-collected skips to the next one.
        """
        pos = self._normalise(start)
        budget = max_bytes
        while pos is not None and budget > 0:
            path = self.dir / segment_name(pos.segment)
            try:
                f = open(path, "rb", buffering=_READ_BUFFER)
            except FileNotFoundError:
                pos = self._next_segment(pos)
                continue
            with f:
                f.seek(pos.offset)
                offset = pos.offset
                while budget > 0:
                    got = read_line(f, self.max_line)
                    if isinstance(got, OverLimit):
                        line = got.head
                        if not got.terminated:
                            break  # a tail still being written, or torn: as below
                        nxt = Position(pos.segment, offset + got.size)
                        damage = DamagedRecordError(
                            OVER_LIMIT, over_limit_detail(got.size, self.max_line)
                        )
                        yield Entry(Position(pos.segment, offset), nxt, got.head, None, damage, got)
                        offset = nxt.offset
                        budget -= got.size
                        continue
                    line = got
                    if not line or not line.endswith(b"\n"):
                        break
                    nxt = Position(pos.segment, offset + len(line))
                    try:
                        yield Entry(
                            Position(pos.segment, offset), nxt, line, record.decode(line), None
                        )
                    except DamagedRecordError as exc:
                        if _unterminated(exc) and self._torn_write(path, line[:-1], nxt.offset):
                            exc = torn_write(len(line) - 1)
                        yield Entry(Position(pos.segment, offset), nxt, line, None, exc)
                    offset = nxt.offset
                    budget -= len(line)
                if budget <= 0:
                    return
                partial = bool(line)
            if partial:
                tail = self._sealed_tail(pos.segment, offset)
                if tail is None:
                    return  # a tail still being written (or torn): wait, or seal_torn_tail()
                over = tail if isinstance(tail, OverLimit) else None
                if tail.terminated if isinstance(tail, OverLimit) else b"\n" in tail:
                    pos = Position(pos.segment, offset)  # completed while we looked: read it
                    continue
                size = over.size if over else len(tail)
                end = Position(pos.segment, offset + size)
                # Whoever seals a segment terminates its torn tail first (producer rotation,
                # ``purge.seal``), so a sealed segment never ends without "\n" unless it was
                # cut short afterwards: even a record prefix here is loss, not a torn write.
                damage = DamagedRecordError(
                    "torn-tail",
                    f"{segment_name(pos.segment)} ends in {size} byte(s) without a "
                    "newline and a later segment exists: the segment was cut short "
                    "(acknowledged records after the cut are lost)",
                )
                raw = over.head if over else tail
                yield Entry(Position(pos.segment, offset), end, raw, None, damage, over)
                budget -= size
                offset = end.offset
            later = self._next_segment(Position(pos.segment, offset))
            if later is None:
                return
            pos = later

    def _torn_write(self, path: Path, fragment: bytes, after: int) -> bool:
        """Whether the line ``fragment`` (without its ``\\n``) ending at ``after`` is a torn,
        never-acknowledged write: a strict prefix of a record (``torn.is_record_prefix``)
        whose ``\\n`` is a torn-tail repair — what follows it in the segment is a record,
        further torn writes, a record still being written, or nothing (the writer's
        ``seal_torn_tail``). A ``\\n`` that a bit flip put inside an acknowledged record is
        followed by that record's rest, which is none of these, so it stays damage."""
        if not torn.is_record_prefix(fragment):
            return False
        with open(path, "rb", buffering=_READ_BUFFER) as f:
            f.seek(after)
            while True:
                line = read_line(f, self.max_line)
                if isinstance(line, OverLimit):
                    return False  # not provably a record: the fragment stays damage
                if not line:
                    return True
                if not line.endswith(b"\n"):  # being written after the repair (or torn again)
                    line += b"\n"
                try:
                    record.decode(line)
                    return True
                except DamagedRecordError as exc:
                    if not (_unterminated(exc) and torn.is_record_prefix(line[:-1])):
                        return False

    def end(self) -> Position:
        """The position just past the last complete line of the newest segment."""
        segments = list_segments(self.dir)
        if not segments:
            return Position(1, 0)
        path = self.dir / segment_name(segments[-1])
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            # Back off over a partial tail so "end" only counts complete lines.
            block = 4096
            tail_start = size
            while tail_start > 0:
                lo = max(0, tail_start - block)
                f.seek(lo)
                chunk = f.read(tail_start - lo)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    return Position(segments[-1], lo + nl + 1)
                tail_start = lo
        return Position(segments[-1], 0)

    def _sealed_tail(self, segment: int, offset: int) -> bytes | OverLimit | None:
        """The bytes from ``offset`` to the end of ``segment`` when its tail is torn for good:
        a later segment exists and no producer holds the segment's lock. A producer writes
        only while holding that lock and checks for a later segment under it first (a
        rotation or a purge creates the later one under the same lock), so once both hold no
        byte is ever appended: the tail is final, and it must not hide the later segments'
        records. None when it may still be written (the newest segment, or a writer holds the
        lock): wait. The result ends with ``\n`` if the write completed meanwhile; a tail
        longer than ``max_line`` comes back as an ``OverLimit`` (never read whole)."""
        if self._next_segment(Position(segment, offset)) is None:
            return None
        try:
            f = open(self.dir / segment_name(segment), "rb", buffering=_READ_BUFFER)
        except FileNotFoundError:
            return None
        with f:  # closing drops the flock
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            f.seek(offset)
            return read_line(f, self.max_line) or None

    def seal_torn_tail(self, segment: int) -> bool:
        """Terminate a torn tail of ``segment`` if no producer is writing it.

        Returns True when a ``\\n`` was appended. Takes the segment's lock without blocking:
        a producer mid-write holds it, so a tail seen here while we hold the lock is torn.
        Raises ``SpoolFullError`` when the disk has no room for the byte (ENOSPC, EDQUOT)
        and ``OSError`` otherwise.
        """
        path = self.dir / segment_name(segment)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            size = os.fstat(fd).st_size
            if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
                return False
            if self._next_segment(Position(segment, 0)) is not None:
                # Sealed: ``read`` yields its torn tail as a damaged entry as it stands.
                # Appending now would move the end past a cursor that may already be there.
                return False
            try:
                os.write(fd, b"\n")
                os.fdatasync(fd)
            except OSError as exc:  # no room for one byte: the writer waits for space
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                import shutil

                raise SpoolFullError(str(path), shutil.disk_usage(self.dir).free) from exc
            return True
        finally:
            os.close(fd)  # closing drops the flock

    def has_partial_tail(self, pos: Position) -> bool:
        """True when bytes without a final ``\\n`` sit at or after ``pos`` in its segment."""
        try:
            size = os.stat(self.dir / segment_name(pos.segment)).st_size
        except FileNotFoundError:
            return False
        return size > pos.offset

    def _normalise(self, pos: Position) -> Position | None:
        if (self.dir / segment_name(pos.segment)).exists():
            return pos
        return self._next_segment(pos)

    def _next_segment(self, pos: Position) -> Position | None:
        later = [n for n in list_segments(self.dir) if n > pos.segment]
        return Position(later[0], 0) if later else None


def torn_write(size: int) -> DamagedRecordError:
    """The ``torn-write`` refusal of a proven torn line of ``size`` bytes (``torn``)."""
    return DamagedRecordError(
        TORN_WRITE,
        f"{TORN_DETAIL} ({size} byte(s))",
    )


def _unterminated(exc: DamagedRecordError) -> bool:
    """Whether ``record.decode`` refused a line for lacking a crc member at its end."""
    return exc.reason == "checksum" and exc.detail.startswith("line has no crc member")


def stats(spool_dir: str | os.PathLike[str], cursor: Position | None) -> dict[str, Any]:
    """Figures for ``quill status``: segment count, total bytes, end position and the bytes
    not yet applied past ``cursor`` (None = nothing applied yet)."""
    d = Path(spool_dir)
    sizes = {n: os.stat(d / segment_name(n)).st_size for n in list_segments(d)}
    cursor = cursor or Position(min(sizes, default=1), 0)
    pending = sum(
        size - (cursor.offset if n == cursor.segment else 0)
        for n, size in sizes.items()
        if n >= cursor.segment
    )
    return {
        "segments": len(sizes),
        "bytes": sum(sizes.values()),
        "end": str(SpoolReader(d).end()),
        "pending_bytes": max(0, pending),
    }


def lag_seconds(spool_dir: str | os.PathLike[str], cursor: Position | None, now: float) -> float:
    """Age in seconds of the oldest record not yet applied (0.0 when nothing is pending):
    how far behind the writer is. Reads at most the first MiB past ``cursor`` (and one line of
    at most the default record limit)."""
    start = cursor or Position(min(list_segments(Path(spool_dir)), default=1), 0)
    oldest = next(
        (
            e.record.get("ts")
            for e in SpoolReader(spool_dir).read(start, max_bytes=1 << 20)
            if e.record and isinstance(e.record.get("ts"), (int, float))
        ),
        None,
    )
    return max(0.0, now - oldest) if oldest else 0.0
