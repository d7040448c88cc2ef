"""Workers orphaned by a supervisor that died (``kill -9``, an OOM kill): found, stopped, and
waited for, so a restarted fleet neither races them nor mistakes them for a crash loop.

A worker whose supervisor dies gets SIGTERM from its lifeline (``workers.lifeline``) and stops
gracefully: the writer finishes its chunk first, the HTTP server its requests. Until it is gone
it still holds what its role holds (the writer lease, the scheduler lease, the watch lease, the
HTTP port), so the new fleet's child for that role would exit at once, again and again.

The proof that a live process is an orphan of *this* data dir's fleet, never a pid or a file
taken on trust (a pid is recycled; a data dir copied with ``cp -a`` carries the original's
records):

1. it is named by this data dir's own record of the role: the holder of the role's lease
   (``RunDir.lease_holder``) or the publisher of its status (``RunDir.live``), and is the same
   process (pid + start ticks + boot id, ``home.holder_alive``) serving this data dir;
2. its command line is a fleet child of the role: ``-m <entry> [role] --home <this home>
   --parent P``;
3. its parent is gone: its parent pid is no longer ``P`` (the kernel re-parents an orphan), and
   ``P`` is not this supervisor.

Anything else (a live ``quill recover`` holding the writer lease, another fleet) is left alone.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from quill.home import RunDir
from quill.home.rundir import LEASES

#: An orphan is asked to stop (SIGTERM) and given this long (seconds) before SIGKILL: the same
#: grace a fleet's own stop gives its children. Killing a writer mid-chunk loses nothing: the
#: chunk was not committed and is applied again from the spool.
ORPHAN_GRACE_S = 15.0


def _argv_value(argv: list[str], flag: str) -> str | None:
    try:
        return argv[argv.index(flag) + 1]
    except (ValueError, IndexError):
        return None


def orphan_of(
    run_dir: RunDir, role: str, entry: str, *, with_role: bool = True, me: int | None = None
) -> dict[str, Any] | None:
    """The live orphan doing ``role`` for ``run_dir``'s data dir (module doc: the proof), as
    ``{"pid", "parent", "role", "proc"}`` (``proc``: its ``psutil.Process``), or None.
    ``entry``: the module fleet children of the role run as; ``with_role``: their command
    line names the role after it (workers do, the HTTP child does not); ``me``: the
    supervisor's pid (default: this process)."""
    import psutil

    me = os.getpid() if me is None else me
    records = [run_dir.live(role)] if role != "supervisor" else []
    if role in LEASES:
        records.append(run_dir.lease_holder(role))
    for record in records:
        if not record:
            continue
        try:
            proc = psutil.Process(int(record["pid"]))
            argv = proc.cmdline()
            ppid = proc.ppid()
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
        try:
            at = argv.index("-m")
        except ValueError:
            continue
        rest = argv[at + 1 :]
        if not rest or rest[0] != entry or (with_role and rest[1:2] != [role]):
            continue
        if _argv_value(rest, "--home") != str(run_dir.home):
            continue
        try:
            parent = int(_argv_value(rest, "--parent") or "")
        except ValueError:
            continue
        if parent != me and ppid != parent:
            # ``proc`` signals only the process proved here (psutil checks its start time).
            return {"pid": proc.pid, "parent": parent, "role": role, "proc": proc}
    return None


class OrphanStopper:
    """Stops the orphan of each role (``stop_orphan``) for a supervisor: SIGTERM once, SIGKILL
    after ``grace_s``; remembers what it saw so the supervisor can publish it. ``log``: a
    structlog-style logger; ``console(text)``: the ``quill run`` terminal."""

    def __init__(self, log: Any, console: Any, grace_s: float = ORPHAN_GRACE_S):
        self.log = log
        self.console = console
        self.grace_s = grace_s
        #: role → ``{"pid", "parent", "since" (epoch s), "killed" (bool)}`` while one is alive.
        self.seen: dict[str, dict[str, Any]] = {}

    def look(self, run_dir: RunDir, role: str, entries: dict[str, str]) -> tuple[bool, bool]:
        """Find (``orphan_of``) and act on the orphan doing ``role``: ``(waits, changed)``,
        whether the role's new child must wait and whether ``seen`` changed. ``entries``: the
        modules fleet children run as, ``{"worker": …, "http": …}``."""
        http = role == "http"
        before = {r: dict(o) for r, o in self.seen.items()}
        found = orphan_of(run_dir, role, entries["http" if http else "worker"], with_role=not http)
        waits = self.handle(role, found)
        return waits, self.seen != before

    def handle(self, role: str, orphan: dict[str, Any] | None) -> bool:
        """Act on ``orphan`` (``orphan_of``'s answer for ``role``). True while it is alive:
        the role's new child must wait. Returns False (and forgets it) once it is gone."""
        known = self.seen.get(role)
        if orphan is None:
            if known is not None:
                self.log.info("supervisor.orphan_gone", child=role, orphan_pid=known["pid"])
                self.console(f"quill: the orphaned {role} (pid {known['pid']}) has stopped")
                del self.seen[role]
            return False
        pid = orphan["pid"]
        if known is None or known["pid"] != pid:
            known = self.seen[role] = {
                "pid": pid,
                "parent": orphan["parent"],
                "since": time.time(),
                "killed": False,
            }
            self.log.warning(
                "supervisor.orphan", child=role, orphan_pid=pid, dead_parent=orphan["parent"]
            )
            self.console(
                f"quill: an orphaned {role} (pid {pid}) of a fleet that died (pid "
                f"{orphan['parent']}) still runs; stopping it before starting a new one"
            )
            self._signal(orphan["proc"], signal.SIGTERM)
        elif not known["killed"] and time.time() - known["since"] > self.grace_s:
            self.log.error("supervisor.orphan_kill", child=role, orphan_pid=pid)
            self._signal(orphan["proc"], signal.SIGKILL)
            known["killed"] = True
        return True

    @staticmethod
    def _signal(proc: Any, sig: int) -> None:
        import psutil

        try:
            proc.send_signal(sig)  # refuses a recycled pid (psutil compares start times)
        except psutil.NoSuchProcess:
            pass  # gone meanwhile: the next look finds no orphan
