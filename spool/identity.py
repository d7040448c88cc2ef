"""The spool's stable id: names this data dir's spool in a shared store.

On a shared (PostgreSQL) store every host's writer keeps its own cursor row, keyed by this id
(docs/backends.md). The id is created once, on first use, as ``<hostname>-<12 hex>`` and kept
in the data dir's ``spool-id`` file: it survives restarts, reinstalls and host renames.

A data dir *copied* (``cp -a``, a VM image, a restored backup) carries the same id, and an id
read from a file proves nothing about who holds it. So a writer claims its id in the shared
store (``store.postgres.claims``) as ``holder()``: a token derived from where this process
runs, never stored in the data dir — the machine, its boot, the data dir's real path and the
``spool-id`` file's inode. The same data dir restarted has the same holder and takes its own
claim back at once; a copy has another and is refused while the claim is live. The way out
for a copy is ``quill spool reidentify`` (``replace`` with ``new_id``).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from pathlib import Path

from quill.home.identity import boot_id, machine_id
from quill.spool.errors import SpoolError
from quill.spool.segments import fsync_dir

_VALID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def load_or_create(path: Path) -> str:
    """The id stored at ``path``; created (fsync'd, then renamed into place, so a crash never
    leaves a half-written id) when the file does not exist. Two processes racing to create it
    agree: the loser reads the winner's id. Raises ``SpoolError`` for a file that does not
    hold a valid id (letters, digits, ``.``, ``_``, ``-``; at most 128)."""
    path = Path(path)
    try:
        return _check(path, path.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        pass
    new = new_id()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # fails if another process created it first: keep theirs
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return _check(path, path.read_text(encoding="utf-8").strip())


def _check(path: Path, value: str) -> str:
    if not _VALID.match(value):
        raise SpoolError(
            f"{path} does not hold a valid spool id ({value[:40]!r}); restore it or remove it "
            "only if this data dir never wrote to a shared store"
        )
    return value


def new_id() -> str:
    """A fresh spool id: ``<hostname>-<12 hex>`` (random)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{uuid.uuid4().hex[:12]}"


def replace(path: Path, new: str) -> None:
    """Make ``new`` the id stored at ``path``, atomically (fsync'd temp file renamed over
    it, then the directory fsync'd): a crash leaves the old id or the new one. Raises
    ``SpoolError`` for an invalid id, ``OSError`` when the file cannot be written."""
    path = Path(path)
    _check(path, new)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def holder(path: Path) -> dict[str, str | int]:
    """Who claims the spool id stored at ``path`` (the data dir's ``spool-id``):
    ``{"token", "host", "path", "pid"}``. ``token`` (32 hex) is a digest of the machine id,
    the boot id, the data dir's real path, and the device and inode of ``path``: stable while
    this data dir stays where it is on a running machine, different for a copy (another
    path or inode), another machine, or a cloned VM (another boot). After a reboot the same
    data dir is another holder: it takes its claim back once the claim expires. ``host``,
    ``path`` and ``pid`` are for messages. Raises ``OSError`` when ``path`` is missing."""
    path = Path(path)
    st = os.stat(path)
    home = os.path.realpath(path.parent)
    parts = (machine_id(), boot_id() or "", home, str(st.st_dev), str(st.st_ino))
    token = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return {"token": token[:32], "host": socket.gethostname(), "path": home, "pid": os.getpid()}
