"""Layer 0, process identity: who a process is, pid-reuse-safe (``process_identity``), whether
a recorded process is still that process (``holder_alive``), and the holder a lease's lock file
records (``read_holder``). ``RunDir`` needs it to decide whether a record is current; the flock
lease itself is ``quill.store.lease``. ``psutil`` is imported only when used (the ``quill push``
fast path never is)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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


def boot_id() -> str | None:
    """This boot's random id (``/proc/sys/kernel/random/boot_id``), None where there is none:
    differs on every boot, and on each clone of a VM image."""
    return _boot_id()


def machine_id() -> str:
    """This installation's id (``/etc/machine-id``, else D-Bus's copy, else ``host:`` and the
    host name): stable across reboots; a cloned VM image keeps it unless regenerated (its
    ``boot_id`` differs)."""
    for name in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(name, encoding="ascii") as f:
                value = f.read().strip()
        except OSError:
            continue
        if value:
            return value
    import socket

    return "host:" + socket.gethostname()


def start_ticks(pid: int) -> int:
    """The kernel's start time of ``pid`` in clock ticks since boot: field 22 of
    ``/proc/<pid>/stat`` (proc(5)), parsed after the last ``)`` because the command name
    (field 2) may contain spaces and parentheses. Raises ``psutil.NoSuchProcess`` when the
    process is gone (or there is no ``/proc``), a zombie included: it has exited and holds
    nothing (no lock, no port), only its exit status waits for a parent that may never reap
    it (an orphan whose init does not)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read()
    except OSError:
        text = b""
    fields = text[text.rindex(b")") + 2 :].split() if b")" in text else []
    if len(fields) < 20 or fields[0] == b"Z":
        import psutil

        raise psutil.NoSuchProcess(pid)
    return int(fields[19])


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Who a process is, pid-reuse-safe: ``{"pid", "create_time", "start_ticks", "boot_id"}``.
    ``start_ticks`` (``start_ticks()``) is fixed for the life of the process and unaffected by
    clock or boot-time-estimate changes; ``create_time`` (epoch s) is kept for display and for
    readers of older records. Raises ``psutil.NoSuchProcess`` if ``pid`` is gone."""
    import psutil

    proc = psutil.Process(pid or os.getpid())
    return {
        "pid": proc.pid,
        "create_time": proc.create_time(),
        "start_ticks": start_ticks(proc.pid),
        "boot_id": _boot_id(),
    }


def holder_alive(holder: dict[str, Any]) -> bool:
    """True when the recorded process is alive *and* is the same process, not a recycled pid.

    * With ``start_ticks`` (``process_identity``): same boot and the exact same start tick.
    * With only ``create_time`` (older records; session owners sent by producers): the epoch
      start time is ``btime + ticks/HZ``, where ``btime`` is a whole number of seconds that moves
      when the kernel re-estimates the boot time. The same process therefore differs by a whole
      number of seconds (at most ``BOOT_SHIFT_S``) and matches to the tick; a recycled pid would
      have to start that many whole seconds later, to within half a tick, to be mistaken for it.
    A malformed record is not alive."""
    import psutil

    try:
        pid = int(holder["pid"])
        if holder.get("start_ticks") is not None:
            return holder.get("boot_id") in (None, _boot_id()) and start_ticks(pid) == int(
                holder["start_ticks"]
            )
        shift = psutil.Process(pid).create_time() - float(holder["create_time"])
        return abs(shift - round(shift)) < _TICK_EPSILON_S and abs(round(shift)) <= BOOT_SHIFT_S
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def runner_tag(role: str, **ids: Any) -> dict[str, Any]:
    """Who runs a job, for the figures of its ``job_runs`` rows: ``{"runner": role, "holder":
    {"host", "boot_id", "pid", "start_ticks", **ids}}`` — this process, pid-reuse-safe
    (``process_identity``), on this host (its name) and boot. ``ids``: what else names the
    runner's claim (the writer: its ``spool_id`` and spool ``claim`` token on a shared store).
    Whoever closes a dead runner's rows checks the holder (``runner_dead``). Never raises:
    without ``/proc`` ``start_ticks`` is None (such a holder is never proved dead by pid)."""
    import socket

    import psutil

    pid = os.getpid()
    try:
        ticks: int | None = start_ticks(pid)
    except psutil.NoSuchProcess:  # no /proc here
        ticks = None
    holder = {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid, "start_ticks": ticks}
    return {"runner": role, "holder": {**holder, **ids}}


def runner_dead(holder: dict[str, Any]) -> bool | None:
    """Whether the process a ``runner_tag`` holder names is gone, as far as this host can
    tell: True when it ran on this host in an earlier boot, or in this boot and is no longer
    that process (``holder_alive``); False when it still runs; None when it ran on another
    host (only that host, or a claim it held, can tell)."""
    import socket

    if holder.get("host") != socket.gethostname():
        return None
    if holder.get("boot_id") != _boot_id():
        return True
    if holder.get("start_ticks") is None:
        return None
    return not holder_alive(holder)


def read_holder(lock_path: Path) -> dict[str, Any]:
    """The holder recorded in a lease's lock file ({} when none or unreadable)."""
    try:
        return json.loads(Path(lock_path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
