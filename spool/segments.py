"""Segment naming, positions and directory helpers shared by producers and the reader.

A spool directory holds append-only segments ``00000001.jsonl``, ``00000002.jsonl`` ... and a
``quarantine/`` folder. A **position** is ``(segment number, byte offset)``; positions order
records totally. Invariant used by the reader: segment N+1 is only ever created by a producer
that held segment N's lock and saw it at or past the rotation size, so once N+1 exists no new
record is written to N (only a lone ``\\n`` that terminates a torn tail).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from quill.home import DATA_DIR_MARKERS, SPOOL_DIR
from quill.home.layout import private_dirs
from quill.spool.errors import SpoolLocationError

SEGMENT_RE = re.compile(r"^(\d{8})\.jsonl$")
DIR_MODE = 0o700
FILE_MODE = 0o600


class Position(NamedTuple):
    """A place in the spool: ``segment`` number (1-based) and byte ``offset`` in it."""

    segment: int
    offset: int

    def __str__(self) -> str:
        return f"{self.segment}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"SEGMENT:OFFSET"``; raises ``ValueError`` on anything else."""
        seg, _, off = text.partition(":")
        pos = cls(int(seg), int(off))
        if pos.segment < 0 or pos.offset < 0:
            raise ValueError(f"negative spool position {text!r}")
        return pos


START = Position(1, 0)


def segment_name(number: int) -> str:
    return f"{number:08d}.jsonl"


def list_segments(spool_dir: Path) -> list[int]:
    """Segment numbers present in ``spool_dir``, ascending."""
    try:
        names = os.listdir(spool_dir)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := SEGMENT_RE.match(n)))


#: The writer's doorbell in the spool directory (``quill.home.doorbell``): producers ring it
#: after an append is durable. Not a segment; readers and GC ignore it.
DOORBELL = ".doorbell"
#: Entries a spool directory may hold besides its segments.
_SPOOL_ENTRIES = ("quarantine", DOORBELL)


def resolve_spool_dir(path: str | os.PathLike[str]) -> Path:
    """Where a producer handed ``path`` must append (an acknowledged record must always be
    where the writer drains).

    * a Quill data dir (holds any of ``quill.home.DATA_DIR_MARKERS``) → its ``spool/`` folder;
    * a spool directory (segments, ``quarantine/``), an empty directory, or a path that does
      not exist yet → ``path`` itself;
    * anything else (a file, or a non-empty directory of unrelated entries) → raises
      ``SpoolLocationError``.
    """
    path = Path(path)
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return path
    except NotADirectoryError:
        raise SpoolLocationError(str(path), [f"{path.name} is a file"]) from None
    if any(m in names for m in DATA_DIR_MARKERS):
        return path / SPOOL_DIR
    if any(SEGMENT_RE.match(n) for n in names):
        return path  # a producer has been appending here: it is a spool
    unrelated = sorted(n for n in names if n not in _SPOOL_ENTRIES)
    if unrelated:
        raise SpoolLocationError(str(path), unrelated)
    return path


def stray_segments(home: Path, spool_dir: Path) -> list[Path]:
    """Segment files anywhere under data dir ``home`` except ``spool_dir`` itself: records
    acknowledged to some producer that the writer will never drain."""
    found = []
    spool_dir = Path(spool_dir).resolve()
    for root, dirs, files in os.walk(home):
        if Path(root).resolve() == spool_dir:
            dirs[:] = [d for d in dirs if d != "quarantine"]
            continue
        found += [Path(root) / f for f in files if SEGMENT_RE.match(f)]
    return sorted(found)


#: Beside the segments: one line ``NUMBER SIZE`` per sealed segment, appended (and synced) by
#: the sealer under the segment's lock before the successor exists, so a sealed segment found
#: shorter than its line was cut short (``spool.integrity``). Readers, GC and the stray check
#: ignore it; a segment sealed before this file existed has no line.
SEALS_FILE = ".seals"


def record_seal(spool_dir: Path, segment: int, size: int) -> None:
    """Append ``segment``'s final ``size`` to ``SEALS_FILE`` and sync it. Raises ``OSError``."""
    fd = os.open(
        Path(spool_dir) / SEALS_FILE,
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
        FILE_MODE,
    )
    try:
        os.write(fd, f"{segment} {size}\n".encode())
        os.fdatasync(fd)
    finally:
        os.close(fd)


def sealed_sizes(spool_dir: Path) -> dict[int, int]:
    """``{segment: size recorded when it was sealed}`` from ``SEALS_FILE`` (empty without
    one). A line cut by a crash mid-write is skipped; for a segment recorded twice (two
    producers saw it full at once: the same size) the largest counts."""
    try:
        text = (Path(spool_dir) / SEALS_FILE).read_bytes().decode("ascii", "replace")
    except FileNotFoundError:
        return {}
    out: dict[int, int] = {}
    for line in text.split("\n")[:-1]:  # the last piece has no "\n": unfinished
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            n, size = int(parts[0]), int(parts[1])
            out[n] = max(out.get(n, 0), size)
    return out


def ensure_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only; chmod on the path, never via an fd."""
    private_dirs(path)
    os.chmod(path, DIR_MODE)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a created or renamed entry in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
