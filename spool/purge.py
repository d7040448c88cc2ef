"""Purging records from sealed spool segments (``quill sessions delete --purge``).

A deleted session's original ops stay in the spool segments until retention removes them.
Purging replaces each such line, in place, by a **tombstone of exactly the same length**:

    {"v":1,"op":"spool.purged","batch":B,"producer":P,"seq":N,"ts":T,
     "data":{"purged_by":D},"pad":"   ","crc":"…"}

(one line in the segment; wrapped here).

Same length, because a record's position (segment, byte offset) is its identity everywhere:
the store's cursor, snapshot stamps, quarantine entry ids, ``applied_batches.position`` and
producers' acks all name byte offsets. Dropping the bytes would move every later record of
the segment; a same-length tombstone moves nothing, keeps the line framing and CRC valid, and
keeps the batch id, producer, sequence number and append time (no content), so replay
records the batch as applied (a no-op, ``store.apply.sessions``) exactly as the live store
did. The only thing a tombstone still tells is the purged line's length.

Rewriting a segment (``rewrite``): under the segment's ``flock`` (no producer mid-write, no
torn-tail sealer), stream it into ``NAME.purge-tmp`` (a name no reader, GC or stray-segment
check matches) with each target line replaced, fsync, read the temp file back against the
segment and verify it (same length, every other byte identical, each replaced line a
tombstone of the same batch), ``rename`` it over the segment, fsync the directory. Every step
reads and writes in 1 MiB blocks: memory does not grow with the segment. A crash leaves either
the old file or the new one (and maybe a temp file, removed by the next run); re-running is
idempotent, because tombstones are never targets.

Only **sealed** segments are rewritten: a producer may hold the newest one open. ``seal``
retires the newest segment before it is full by creating the next one under its lock; the
producer checks for a next segment under the same lock before every write (producer.py).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool import record
from quill.spool.errors import SpoolError
from quill.spool.segments import (
    FILE_MODE,
    Position,
    fsync_dir,
    list_segments,
    record_seal,
    segment_name,
)

#: The op of a tombstone. Not in ``record.OP_KINDS``: producers can never append it; the store
#: applies it as a no-op.
PURGED_OP = "spool.purged"
TMP_SUFFIX = ".purge-tmp"


class PurgeVerifyError(SpoolError):
    """A rewritten segment did not read back as intended (nothing was renamed over the
    segment). ``segment`` is its number, ``detail`` the first difference."""

    def __init__(self, segment: int, detail: str):
        super().__init__(f"purge of segment {segment_name(segment)} failed verification: {detail}")
        self.segment = segment
        self.detail = detail


def tombstone(original: dict[str, Any], length: int, purged_by: str) -> bytes:
    """A ``spool.purged`` line of exactly ``length`` bytes (``\\n`` included) for the record
    body ``original``: its batch id, producer, seq and ts, ``data.purged_by`` = the batch id
    of the ``sessions.delete`` that asked for the purge, padded with spaces. Drops the
    optional fields if the line would not fit — ts first, then purged_by, producer and seq
    last (they keep the producer's sequence numbers whole: ``spool.integrity``); raises
    ``SpoolError`` if even the smallest tombstone is longer than ``length`` (a record always
    holds at least a batch id and data, so this does not happen with Quill's own records)."""
    base = {"v": record.VERSION, "op": PURGED_OP, "batch": original.get("batch")}
    full = {k: original[k] for k in ("producer", "seq", "ts") if k in original}
    who = {k: original[k] for k in ("producer", "seq") if k in original}
    for extra, data in (
        (full, {"purged_by": purged_by}),
        (who, {"purged_by": purged_by}),
        (who, {}),
        ({}, {"purged_by": purged_by}),
        ({}, {}),
    ):
        body = {**base, **extra, "data": data, "pad": ""}
        line = record.encode(body)
        if len(line) <= length:
            body["pad"] = " " * (length - len(line))
            line = record.encode(body)
            assert len(line) == length  # spaces encode to one byte each
            return line
    raise SpoolError(f"no tombstone fits in {length} bytes")


def is_tombstone(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec.get("op") == PURGED_OP


def seal(spool_dir: Path, segment: int) -> bool:
    """Retire ``segment`` if it is the newest: create the next segment while holding its lock,
    so every producer moves on (producer.py checks under the same lock). Returns True when a
    segment was created. Raises ``SpoolError`` on I/O errors."""
    spool_dir = Path(spool_dir)
    if max(list_segments(spool_dir), default=0) != segment:
        return False
    fd = os.open(spool_dir / segment_name(segment), os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        nxt = spool_dir / segment_name(segment + 1)
        # A torn tail is terminated (and made durable) before the successor exists, as the
        # producers' rotation does: a sealed segment ends in "\n" unless it was cut short.
        size = os.fstat(fd).st_size
        if os.path.exists(nxt):
            return False  # a producer rotated first (and sealed it)
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
            os.fdatasync(fd)
            size += 1
        record_seal(spool_dir, segment, size)
        try:
            new = os.open(nxt, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        except FileExistsError:
            return False  # a producer rotated first
        os.close(new)
        os.chmod(nxt, FILE_MODE)
        fsync_dir(spool_dir)
        return True
    except OSError as exc:
        raise SpoolError(f"cannot seal {segment_name(segment)}: {exc}") from exc
    finally:
        os.close(fd)


#: Bytes read or copied at once while rewriting a segment (``rewrite``'s memory bound).
COPY_BLOCK = 1 << 20


def _line_at(fd: int, offset: int, size: int, limit: int) -> bytes | None:
    """The line of ``fd`` starting at byte ``offset`` with its ``\\n``, read in blocks of at
    most ``COPY_BLOCK``; None when it is longer than ``limit`` bytes or the file ends before
    its ``\\n`` (a torn line). Holds at most ``limit`` + one block."""
    parts: list[bytes] = []
    got = 0
    while offset + got < size and got <= limit:
        block = os.pread(fd, min(COPY_BLOCK, limit + 1 - got, size - offset - got), offset + got)
        if not block:
            break
        nl = block.find(b"\n")
        if nl >= 0:
            parts.append(block[: nl + 1])
            got += nl + 1
            return b"".join(parts) if got <= limit else None
        parts.append(block)
        got += len(block)
    return None


def _choose(
    fd: int, size: int, targets: set[int], limit: int
) -> tuple[list[tuple[int, int, dict[str, Any]]], list[int]]:
    """Which ``targets`` get a tombstone: ``([(offset, length, envelope)], skipped)``, by
    offset. A target is skipped when it does not start a line (the byte before it is not a
    ``\\n``), its line is torn or longer than ``limit``, its body has no batch id even as far as
    it parses (``record.decode_lenient``), or it is a tombstone already. ``envelope`` keeps
    only what a tombstone carries (batch, producer, seq, ts): one line is read at a time."""
    chosen, skipped = [], []
    for offset in sorted(targets):
        starts = offset == 0 or (0 < offset < size and os.pread(fd, 1, offset - 1) == b"\n")
        line = _line_at(fd, offset, size, limit) if starts else None
        rec = record.decode_lenient(line) if line is not None else None
        if rec is None or not isinstance(rec.get("batch"), str) or is_tombstone(rec):
            skipped.append(offset)
            continue
        keep = {k: rec[k] for k in ("batch", "producer", "seq", "ts") if k in rec}
        chosen.append((offset, len(line), keep))
    return chosen, skipped


def rewrite(
    spool_dir: Path,
    segment: int,
    targets: set[int],
    purged_by: str,
    on_step: Any = None,
    *,
    max_line: int = DEFAULTS.max_record_bytes,
) -> dict[str, Any]:
    """Replace the lines of sealed ``segment`` that start at the byte offsets in ``targets``
    by tombstones (module doc). A damaged target line is replaced when its JSON body still
    parses with a batch id (``record.decode_lenient``). Offsets that do not start such a
    line, that start one longer than ``max_line`` bytes (never read whole; the plan never
    targets one), or that hold a tombstone already, are left alone and reported. Returns
    ``{"segment", "purged", "skipped", "bytes"}``. Raises ``PurgeVerifyError`` (the segment is
    untouched) or ``SpoolError``. ``on_step(name)`` is called between the steps (tests kill the
    process there): ``"tmp-written"``, ``"renamed"``.

    Memory is bounded whatever the segment's size: the segment is streamed (read, copied and
    verified in blocks of ``COPY_BLOCK`` = 1 MiB); at most one target line (≤ ``max_line``),
    its tombstone and two blocks are held at once, plus a few small fields per target."""
    spool_dir = Path(spool_dir)
    if segment >= max(list_segments(spool_dir), default=0):
        raise SpoolError(f"segment {segment_name(segment)} is the newest one; seal it first")
    path = spool_dir / segment_name(segment)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = _open_locked(path)
    try:
        st = os.fstat(fd)
        size = st.st_size
        chosen, skipped = _choose(fd, size, targets, max_line)
        if not chosen:
            return {"segment": segment, "purged": 0, "skipped": skipped, "bytes": size}
        _write_synced(tmp, fd, size, chosen, purged_by)
        _verify(tmp, fd, segment, size, chosen)
        if on_step:
            on_step("tmp-written")
        os.rename(tmp, path)
        # Retention ages a segment by its mtime (spool.retention): the rewrite is not an
        # append, so the segment keeps its times; set before the dir fsync makes it durable.
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        if on_step:
            on_step("renamed")
        fsync_dir(spool_dir)
        return {"segment": segment, "purged": len(chosen), "skipped": skipped, "bytes": size}
    except OSError as exc:
        raise SpoolError(f"cannot rewrite {path}: {exc}") from exc
    finally:
        os.close(fd)


def _open_locked(path: Path) -> int:
    """An fd of ``path`` holding its exclusive ``flock``, re-opened until the locked inode is
    the one the path names: a rewrite renamed over the path while we waited leaves us holding
    the lock of an inode no longer in the spool, whose bytes are stale."""
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def remove_leftovers(spool_dir: Path) -> list[str]:
    """Delete temp files of an interrupted ``rewrite`` (never renamed, so never part of the
    spool). Returns their names."""
    gone = sorted(p.name for p in Path(spool_dir).glob("*" + TMP_SUFFIX))
    for name in gone:
        (Path(spool_dir) / name).unlink(missing_ok=True)
    if gone:
        fsync_dir(Path(spool_dir))
    return gone


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        return record.decode(line)
    except SpoolError:
        return None


def _copy(src: int, dst: int, start: int, end: int) -> None:
    """Copy bytes ``[start, end)`` of ``src`` to the current position of ``dst``, a block at
    a time."""
    while start < end:
        block = os.pread(src, min(COPY_BLOCK, end - start), start)
        if not block:
            raise SpoolError(f"the segment ended at {start} while {end} bytes were expected")
        view = memoryview(block)
        while view:
            view = view[os.write(dst, view) :]
        start += len(block)


def _write_synced(
    path: Path, src: int, size: int, chosen: list[tuple[int, int, dict[str, Any]]], by: str
) -> None:
    """Write ``src``'s ``size`` bytes to ``path`` with each chosen line replaced by its
    tombstone (``_choose``), then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        pos = 0
        for offset, length, keep in chosen:
            _copy(src, fd, pos, offset)
            view = memoryview(tombstone(keep, length, by))
            while view:
                view = view[os.write(fd, view) :]
            pos = offset + length
        _copy(src, fd, pos, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(path, FILE_MODE)


def _same(old: int, new: int, start: int, end: int, segment: int) -> None:
    """Raise ``PurgeVerifyError`` unless bytes ``[start, end)`` of ``old`` and ``new`` match."""
    while start < end:
        n = min(COPY_BLOCK, end - start)
        if os.pread(old, n, start) != os.pread(new, n, start):
            raise PurgeVerifyError(segment, f"bytes changed between {start} and {start + n}")
        start += n


def _verify(
    tmp: Path, old: int, segment: int, size: int, chosen: list[tuple[int, int, dict[str, Any]]]
) -> None:
    """Read ``tmp`` back against the segment (``old``), a block at a time: the same length,
    every byte outside the chosen lines identical (so every line boundary stays), every chosen
    line one line (a single ``\\n``, at its end) holding a valid tombstone of the same batch."""
    new = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(new).st_size != size:
            raise PurgeVerifyError(segment, f"length {os.fstat(new).st_size} != {size}")
        pos = 0
        for offset, length, keep in chosen:
            _same(old, new, pos, offset, segment)
            line = os.pread(new, length, offset)
            rec = _decode(line) if line.count(b"\n") == 1 and line.endswith(b"\n") else None
            if rec is None or not is_tombstone(rec) or rec.get("batch") != keep["batch"]:
                raise PurgeVerifyError(
                    segment, f"line at {offset} is not a tombstone of batch {keep['batch']}"
                )
            pos = offset + length
        _same(old, new, pos, size, segment)
    finally:
        os.close(new)


__all__ = [
    "PURGED_OP",
    "PurgeVerifyError",
    "Position",
    "is_tombstone",
    "remove_leftovers",
    "rewrite",
    "seal",
    "tombstone",
]
