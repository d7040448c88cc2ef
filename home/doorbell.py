"""Doorbells: wake-ups the kernel delivers, so nobody polls to learn that something happened.

A ``Doorbell`` is a named pipe (FIFO) its one listener holds open; ``ring(path)`` writes it one
byte without blocking, and the listener's descriptor becomes readable (``select``, an asyncio
reader). Two kinds are used (docs/architecture.md, "Read-your-writes"):

* the writer's, ``<spool>/.doorbell``: a producer rings it after its record is durable (after
  the ``fdatasync``), so the idle writer drains at once instead of at its next poll;
* each waiting client's, ``run/waiters/<pid>-<random>``: the writer rings every one after a
  chunk is committed, so ``wait`` reads the new cursor at once.

A ring is one write of at most ``PIPE_BUF`` bytes (the kernel delivers it whole, never
interleaved with another ringer's): ``b"!"``, or a *note*, one JSON line. The writer's note
after a commit (``applied_note``) names the ``[position, batch id]`` of each op the commit
applied; a waiting client that finds its own pair there knows its batch is applied without
reading the store (``applied_in``). Anything else in the pipe means "look again".

A doorbell without a note only says "look again": what is looked at (the spool, the store's
cursor) is the truth, so a listener always *opens, then looks, then waits*. A ring sent
before the open is answered by that first look; one sent after it is kept by the kernel
until the wait. A ring that cannot be delivered (no listener: ``ENXIO``; its pipe already
full: it has a wake-up pending) is dropped, and the listener's own timeout — the old poll
interval — bounds what that costs: latency, never correctness. Nothing here is state: a
crash leaves at most a pipe file, which the next listener reuses (``Doorbell``) or a ringer
removes (``ring_all``).

Only ``os``, ``json`` and the layout are used (no ``socket``): a producer's ``quill push``
stays cheap to start.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from quill.home.layout import private_dirs

#: Errors of a ring that mean "nobody to wake right now": no pipe file, a pipe nobody has
#: open for reading, a pipe already full (its listener has a wake-up pending). Anything else
#: is raised: a doorbell in an unexpected state is a fault to see, not to hide.
_NOBODY = (errno.ENOENT, errno.ENXIO, errno.EAGAIN)
#: Errors that mean a doorbell cannot be made in this place (a read-only or full disk, no
#: permission, a file system without named pipes, a file where its folder belongs): the
#: listener then polls, as before doorbells.
CANNOT_LISTEN = (
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EEXIST,
    errno.ENOTDIR,
)
_RING_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC
#: The plain ring: "look again".
RING = b"!"
#: The largest ring the kernel writes whole (POSIX ``PIPE_BUF`` on Linux); a longer note is
#: sent as ``RING``.
NOTE_MAX = 4096


class Doorbell:
    """The listening end of the doorbell at ``path``: the pipe is made (mode 0600) unless one
    is there; any other file there is replaced. ``fileno()`` is readable while a ring is
    pending. Raises ``OSError`` when it cannot be made or opened."""

    def __init__(self, path: Path):
        self.path = Path(path)
        for attempt in range(3):
            try:
                os.mkfifo(self.path, 0o600)
            except FileExistsError:
                if not stat.S_ISFIFO(os.lstat(self.path).st_mode):
                    os.unlink(self.path)  # not a pipe: nothing but a doorbell belongs here
                    continue
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except FileNotFoundError:  # a ringer removed it between mkfifo and open: again
                if attempt == 2:
                    raise
        # Our own write end: with it the pipe never reads as end-of-file (which select would
        # report as readable forever) when no ringer has it open.
        self._keep = os.open(self.path, _RING_FLAGS)
        self.inode = os.fstat(self.fd).st_ino

    def fileno(self) -> int:
        return self.fd

    def clear(self) -> int:
        """Consume every pending ring; returns how many bytes there were."""
        return len(self.take())

    def take(self) -> bytes:
        """Consume every pending ring; returns their bytes (``b""``: none pending)."""
        out = b""
        while True:
            try:
                got = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            if not got:
                return out
            out += got

    def wait(self, timeout: float) -> bool:
        """Block until a ring arrives or ``timeout`` seconds pass; True when rung. Pending
        rings are consumed."""
        return bool(self.wait_take(timeout))

    def wait_take(self, timeout: float) -> bytes:
        """``wait``, returning the rings' bytes (``b""``: none within ``timeout`` s)."""
        import select

        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
        return self.take() if ready else b""

    def close(self, *, remove: bool = False) -> None:
        """Stop listening (idempotent); ``remove``: also remove the pipe file if it is still
        ours (a waiter's; the writer's stays for the next writer)."""
        if self.fd < 0:
            return
        os.close(self.fd)
        os.close(self._keep)
        self.fd = self._keep = -1
        if remove:
            try:
                if os.lstat(self.path).st_ino == self.inode:
                    os.unlink(self.path)
            except FileNotFoundError:
                pass  # already removed (a ringer found it closed)


def ring(path: Path | str) -> bool:
    """Ring the doorbell at ``path``: True when a listener will see it, False when nobody
    listens there (``_NOBODY``; the file is left alone). Never blocks. Raises any other
    ``OSError`` (and ``OSError(ENOTSUP)`` for a file there that is not a pipe)."""
    try:
        fd = os.open(path, _RING_FLAGS)
    except OSError as exc:
        if exc.errno in _NOBODY:
            return False
        raise
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # never write into a regular file
            raise OSError(errno.ENOTSUP, "not a doorbell (a named pipe)", os.fspath(path))
        os.write(fd, RING)
        return True
    except BlockingIOError:
        return True  # full: the listener has rings pending already
    finally:
        os.close(fd)


def ring_all(folder: Path, note: bytes = RING) -> int:
    """Ring every doorbell in ``folder`` with ``note`` (``RING`` or an ``applied_note``, at
    most ``NOTE_MAX`` bytes: one write each, whole or not at all); a pipe nobody listens on
    (its waiter died) is removed. Returns how many were rung (a full pipe counts: it has
    rings pending, so its listener looks again)."""
    if len(note) > NOTE_MAX:
        raise ValueError(f"a ring is at most {NOTE_MAX} bytes, got {len(note)}")
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    rung = 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, _RING_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                _remove(path)
            elif exc.errno not in _NOBODY:
                raise
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, note)
                rung += 1
        except BlockingIOError:
            rung += 1  # full: rings pending already
        finally:
            os.close(fd)
    return rung


def applied_note(pairs: list[tuple[str, str]]) -> bytes:
    """The note a writer rings after a commit that applied the ops ``pairs`` (``(spool
    position "SEGMENT:OFFSET", batch id)`` each, every one applied by that commit: neither a
    duplicate nor refused): one JSON line, or ``RING`` when there are none or the line would
    exceed ``NOTE_MAX`` bytes."""
    if not pairs:
        return RING
    line = json.dumps([list(p) for p in pairs], separators=(",", ":")).encode() + b"\n"
    return line if len(line) <= NOTE_MAX else RING


def applied_in(rings: bytes) -> set[tuple[str, str]]:
    """Every ``(position, batch id)`` the ``applied_note``s among ``rings`` (what
    ``Doorbell.take`` returned) name; other bytes (``RING``, a note of another shape) are
    skipped: they only mean "look again"."""
    found: set[tuple[str, str]] = set()
    for line in rings.split(b"\n"):
        line = line.lstrip(RING)  # plain rings before a note share its line
        if not line.startswith(b"["):
            continue
        try:
            pairs = json.loads(line)
        except ValueError:
            continue
        if isinstance(pairs, list):
            found.update(
                (p[0], p[1])
                for p in pairs
                if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            )
    return found


def listen(path: Path) -> Doorbell | None:
    """A ``Doorbell`` at ``path`` (its folder made owner-only), or None when this place cannot
    have one (``CANNOT_LISTEN``: the caller polls at its old interval). Raises other
    ``OSError``s."""
    try:
        private_dirs(path.parent)
        return Doorbell(path)
    except OSError as exc:
        if exc.errno in CANNOT_LISTEN:
            return None
        raise


def waiter_path(waiters_dir: Path) -> Path:
    """A fresh name for one waiting client's doorbell in ``waiters_dir``."""
    return Path(waiters_dir) / f"{os.getpid()}-{os.urandom(6).hex()}"


def _remove(path: str) -> None:
    """Remove a pipe nobody listens on (another ringer may have removed it first)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
