"""Exclusive leases held for a process's lifetime: the writer lease (one writer per store),
the scheduler lease and the fleet lease (one of each per data dir).

A lease is an ``flock`` on a lock file, so the kernel releases it when the holder dies —
a dead holder's lease is taken over with no stale-lock logic. The file also records the
holder's identity (``process_identity``) so a refusal can name it, and so a reader can tell
a live holder from a recycled pid (``holder_alive``).
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import psutil

from .errors import LeaseHeldError


#: Largest whole-second shift of the kernel's boot-time estimate accepted between recording
#: a legacy ``create_time`` and checking it (the kernel re-estimates the boot time, moving
#: it by a second).
BOOT_SHIFT_S = 1
#: A legacy ``create_time`` matches only if it differs from the live one by a whole number
#: of seconds (see ``holder_alive``) to within this: below half a clock tick (HZ = 100).
_TICK_EPSILON_S = 0.004


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> int:
    """The kernel's start time of ``pid`` in clock ticks since boot: field 22 of
    ``/proc/<pid>/stat`` (proc(5)). Parsed after the last ``)`` because the command name
    (field 2) may contain spaces and parentheses. Raises ``psutil.NoSuchProcess`` when the
    process is gone (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read()
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    return int(text[text.rindex(b")") + 2:].split()[19])


def process_identity(pid: int | None = None) -> dict:
    """Who a process is, pid-reuse-safe: ``{"pid", "create_time", "start_ticks", "boot_id"}``.

    ``start_ticks`` is the kernel's start time of the process in clock ticks since boot
    (``start_ticks()``): fixed for the life of the process and unaffected by clock or
    boot-time-estimate changes.
    ``create_time`` (epoch s = boot-time estimate + ``started_s``) is kept for display and for
    readers of older records. Raises ``psutil.NoSuchProcess`` if ``pid`` is gone."""
    proc = psutil.Process(pid or os.getpid())
    return {"pid": proc.pid, "create_time": proc.create_time(), "start_ticks": start_ticks(proc.pid),
            "boot_id": _boot_id()}


def holder_alive(holder: dict) -> bool:
    """True when the recorded process is alive *and* is the same process, not a recycled pid.

    * With ``start_ticks`` (written by ``process_identity``): same boot (``boot_id``) and the
      exact same kernel start tick — no tolerance is needed, so none is given.
    * With only ``create_time`` (older records; session owners sent by producers): the
      epoch start time is ``btime + ticks/HZ`` where ``btime`` (``/proc/stat``) is a whole
      number of seconds that moves when the kernel re-estimates the boot time. The same
      process therefore differs by a whole number of seconds (at most ``BOOT_SHIFT_S``) and
      matches to the tick; a recycled pid would have to start that many whole seconds later,
      to within half a clock tick, to be mistaken for it.
    A malformed record is not alive."""
    try:
        pid = int(holder["pid"])
        if holder.get("start_ticks") is not None:
            return holder.get("boot_id") in (None, _boot_id()) and start_ticks(pid) == int(holder["start_ticks"])
        proc = psutil.Process(pid)
        shift = proc.create_time() - float(holder["create_time"])
        return abs(shift - round(shift)) < _TICK_EPSILON_S and abs(round(shift)) <= BOOT_SHIFT_S
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def read_holder(lock_path: Path) -> dict:
    """The holder recorded in a lock file ({} when none or unreadable)."""
    try:
        return json.loads(Path(lock_path).read_text() or "{}")
    except (OSError, ValueError):
        return {}


class Lease:
    """An exclusive, non-blocking lease on ``lock_path``. Use ``acquire()`` / ``release()``."""

    def __init__(self, lock_path: Path):
        self.path = Path(lock_path)
        self._fd = -1

    def acquire(self) -> "Lease":
        """Take the lease or raise ``LeaseHeldError`` naming the live holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeldError(str(self.path), read_holder(self.path)) from None
        os.ftruncate(fd, 0)
        # The path too: a copied data dir carries this file, naming a live process that does
        # not hold *its* lease.
        os.pwrite(fd, json.dumps({**process_identity(), "path": str(self.path)}).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lease (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_halt(halt_file: Path, store: Path) -> dict | None:
    """The writer's sticky halt recorded in ``halt_file`` (``run/halt.json``) if it still
    applies to ``store``: it names that same file (``store_ino`` is ``store``'s inode, or None
    for a missing file both times), or predates halts naming their file. Else None.
    ``workers.rundir.RunDir.halt`` and the snapshot job (which must not copy a file the writer
    refused) share this one reading."""
    try:
        data = json.loads(Path(halt_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data:
        return None
    if "store_ino" not in data:  # written before halts named their file: keep honouring it
        return data
    try:
        ino = os.stat(store).st_ino
    except OSError:
        ino = None
    return data if data["store_ino"] == ino else None
