"""Tying a worker's life to its parent's, so no kill -9 leaves orphans holding leases.

Two mechanisms, because each covers a gap of the other:
* ``PR_SET_PDEATHSIG`` (Linux ``prctl``): the kernel signals us the moment the parent dies;
* a watcher thread comparing ``getppid()`` with the parent pid the supervisor passed on the
  command line — a parent that died *before* we armed either (while Python was starting)
  is caught by the first comparison, since we would already have been re-parented.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import threading
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
#: Exit code of a fleet child whose role's lease another process holds: EX_TEMPFAIL, so the
#: supervisor backs off and retries (or waits for an orphan to stop: ``workers.orphans``).
EXIT_LEASE_HELD = 75


def arm_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only);
    returns False where ``prctl`` is unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def follow_parent(parent: int, log: Any) -> None:
    """Stop (SIGTERM to ourselves: a graceful stop in every role) when ``parent`` is gone.
    Exits at once if it is already gone."""
    arm_death_signal(signal.SIGTERM)
    if os.getppid() != parent:
        log.warning("worker.parent_gone", parent=parent, at="start")
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.warning("worker.parent_gone", parent=parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
