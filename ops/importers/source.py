"""One version of a transcript file, read from one descriptor.

An agent may replace a file while Quill reads it: it writes a new file and renames it over
the old path (Claude Code rewrites a session file on resume; editors and atomic writers do
the same). The importers read a file more than once (format sniffing, a structure pass and a
content pass, a Copilot CLI header pass, a Gemini CLI log's subagent lookup), so reading the
*path* each time could mix two versions: the message tree of the old file with the records
of the new one, which marks live messages rewound or drops them. So a file is opened once
(``Source.open``) and every read of it comes from that descriptor (``os.pread``, so readers
never share a position) and stops at the size it had when opened: a replacement, a rename
or appended lines after that are not seen by this import (the watcher sees them as a new
version on its next pass). Files an import reads beside the one named (Claude Code subagent
files, Gemini CLI subagent logs and parent log) are opened once each as ``sibling``s.

Limit: a writer that truncates and rewrites the *same* inode while it is read cannot be told
apart from here (the descriptor sees the new bytes); the watcher's mark (size, head hash)
sees the change on its next pass and imports the file again.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: Bytes read from the descriptor at a time.
READ_BUFFER = 1 << 16


class _Window(io.RawIOBase):
    """Bytes ``[0, end)`` of ``fd``, read with ``pread`` at this reader's own position."""

    def __init__(self, fd: int, end: int):
        super().__init__()
        self._fd, self._end, self._pos = fd, end, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buf), self._end - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)


class Source:
    """A file opened once: ``path`` (its name, for ids and messages), ``dev``/``ino`` (the
    version read), ``size`` (bytes read at most: its size when opened, or less when given),
    ``live`` (an agent may still be appending: a last line cut short is left out unreported,
    ``jsonlines.iter_jsonl``). ``reader()`` gives a fresh binary reader from byte 0.
    ``close()`` closes the descriptor (when owned) and every sibling opened through it."""

    def __init__(self, path: Path, fd: int, size: int, *, live: bool = False, owned: bool = True):
        st = os.fstat(fd)
        self.path = Path(path)
        self.fd, self.dev, self.ino = fd, st.st_dev, st.st_ino
        self.size = min(size, st.st_size) if size >= 0 else st.st_size
        self.live, self._owned = live, owned
        self._siblings: dict[Path, Source] = {}

    @classmethod
    def open(cls, path: Path | str, *, live: bool = False) -> Source:
        """Open ``path`` (read only; a FIFO or device is refused, never waited on). Raises
        ``OSError`` (``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError``…)."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(21, "Is a directory", str(path))
            if not stat.S_ISREG(st.st_mode):
                raise OSError(22, "not a regular file", str(path))
            return cls(Path(path), fd, st.st_size, live=live)
        except BaseException:
            os.close(fd)
            raise

    def reader(self) -> BinaryIO:
        """A new buffered binary reader over bytes ``[0, size)`` (its own position)."""
        window = _Window(self.fd, self.size)
        return io.BufferedReader(window, READ_BUFFER)  # type: ignore[return-value]

    def read_bytes(self) -> bytes:
        """The whole version (``size`` bytes, fewer if the inode shrank since)."""
        with self.reader() as fh:
            return fh.read()

    def sibling(self, path: Path | str) -> Source:
        """Another file this import reads (a subagent file, a parent log), opened once on
        first use with this source's ``live``; closed with this one. Raises ``OSError``."""
        key = Path(path)
        if key == self.path:
            return self
        if key not in self._siblings:
            self._siblings[key] = Source.open(key, live=self.live)
        return self._siblings[key]

    def close(self) -> None:
        for s in self._siblings.values():
            s.close()
        self._siblings.clear()
        if self._owned and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __del__(self) -> None:  # an owner that dropped its source without closing it
        if getattr(self, "_owned", False) and getattr(self, "fd", -1) >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def opened(src: Source | Path | str) -> Iterator[Source]:
    """``src`` itself, or a ``Source`` opened on a path for the ``with`` block (then closed).
    Raises ``OSError``."""
    if isinstance(src, Source):
        yield src
        return
    with Source.open(src) as s:
        yield s
