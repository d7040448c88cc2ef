"""The work files of ``quill recover``: named by their process, removed once it is gone.

``rebuild`` builds the new store in ``state.db.recovering-<pid>-<ns>`` next to the live one
(plus SQLite's ``-wal``/``-shm``/``-journal``): the recovering process's pid and the time, in
ns since the epoch, it named the file. A recover that fails removes its own files; one killed
(``kill -9``, a power cut) cannot, and each leaves a store-sized copy. The next recover and
``quill doctor`` remove those of recovers no longer running (``jobs.worker_jobs.
maybe_named_by``: the pid is free, or held by a process started after the name was made)
and say so. A running recover's files are kept: a halted writer lets recover run beside it
without the writer lease, so another recover may be at work. A file named without a pid (an
older Quill's ``state.db.recovering-<UTC time>``) proves nothing about its creator: it is kept
and listed, for the operator to delete once no recover runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from quill.jobs.worker_jobs import maybe_named_by

PREFIX = "state.db.recovering-"
_SIDE = ("-wal", "-shm", "-journal")


class Leftovers(NamedTuple):
    """What ``sweep`` found, file names: ``removed`` (their recover is gone), ``running``
    (their recover may still run), ``unknown`` (no creator in the name), and ``bytes``
    freed."""

    removed: list[str]
    running: list[str]
    unknown: list[str]
    bytes: int


def work_path(home: Path) -> Path:
    """The work file name for a rebuild by this process, now."""
    return Path(home) / f"{PREFIX}{os.getpid()}-{time.time_ns()}"


def remove_work(path: Path) -> None:
    """Remove a rebuild's work file and SQLite's side files of it (missing ones are fine)."""
    for suffix in ("", *_SIDE):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _creator(name: str) -> tuple[int, float] | None:
    """``(pid, named at, epoch s)`` from a work file's name (side files too), or None."""
    rest = name[len(PREFIX) :]
    for suffix in _SIDE:
        rest = rest.removesuffix(suffix)
    pid, _, ns = rest.partition("-")
    if not (pid.isdigit() and ns.isdigit()):
        return None
    return int(pid), int(ns) / 1e9


def sweep(home: Path, *, keep: Path | None = None) -> Leftovers:
    """Remove the work files in ``home`` of recovers no longer running; ``keep``: this
    process's own work file (never removed). Raises ``OSError`` from unlink."""
    removed, running, unknown, freed = [], [], [], 0
    for path in sorted(Path(home).glob(PREFIX + "*")):
        if keep is not None and path.name in {keep.name + s for s in ("", *_SIDE)}:
            continue
        creator = _creator(path.name)
        if creator is None:
            unknown.append(path.name)
        elif maybe_named_by(*creator):
            running.append(path.name)
        else:
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # its recover finished (or was swept) meanwhile
                continue
            path.unlink(missing_ok=True)
            removed.append(path.name)
            freed += size
    return Leftovers(removed, running, unknown, freed)


def describe(found: Leftovers) -> str:
    """One line for humans: what was removed and what was kept, and why."""
    parts = []
    if found.removed:
        parts.append(
            f"removed {len(found.removed)} file(s) of recovers no longer running "
            f"({found.bytes / 1e6:.1f} MB): {', '.join(found.removed)}"
        )
    if found.running:
        parts.append(f"kept {', '.join(found.running)}: its recover is still running")
    if found.unknown:
        parts.append(
            f"kept {', '.join(found.unknown)}: its name does not say which recover made it; "
            "delete it once no `quill recover` runs"
        )
    return "; ".join(parts) or "no work files of earlier recovers"
