"""The spool's stable id: names this data dir's spool in a shared store.

On a shared (PostgreSQL) store every host's writer keeps its own cursor row, keyed by this id
(docs/backends.md). The id is created once, on first use, as ``<hostname>-<12 hex>`` and kept
in the data dir's ``spool-id`` file: it survives restarts, reinstalls and host renames. A data
dir *copied* to a second machine carries the same id — give the copy a new one (delete its
``spool-id`` before its first start) or the two writers will share one cursor.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from pathlib import Path

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
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"
    new = f"{host}-{uuid.uuid4().hex[:12]}"
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
