"""``spool/quarantine/``: records that could not be applied, kept with the reason.

One JSON file per quarantined line, named by its spool position, so quarantining the same
line twice (a crash between quarantine and cursor commit replays it) rewrites the same file
instead of adding a second entry. Files are written to a temp name, fsynced and renamed.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .segments import FILE_MODE, Position, ensure_dir, fsync_dir


class Quarantine:
    """The quarantine folder of one spool directory."""

    def __init__(self, spool_dir: str | os.PathLike[str]):
        self.dir = Path(spool_dir) / "quarantine"

    def put(self, position: Position, reason: str, detail: str, raw: bytes,
            record: dict[str, Any] | None = None) -> Path:
        """Durably store a quarantined line; returns the entry's path.

        ``reason`` is a short tag (``checksum``, ``bad-json``, ``invalid-op`` ...), ``detail``
        the human explanation, ``raw`` the exact bytes of the line (kept as UTF-8 text with
        replacement characters, plus its length, so the entry is readable and self-contained).
        """
        ensure_dir(self.dir)
        entry = {"position": str(position), "reason": reason, "detail": detail,
                 "quarantined_at": time.time(), "raw_bytes": len(raw),
                 "raw": raw.decode("utf-8", errors="replace"),
                 "batch": (record or {}).get("batch"), "op": (record or {}).get("op")}
        path = self.dir / f"{position.segment:08d}-{position.offset:012d}.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            os.write(fd, json.dumps(entry, ensure_ascii=False).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.dir)
        return path

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every quarantined entry, in spool order."""
        if not self.dir.exists():
            return
        for path in sorted(self.dir.glob("*.json")):
            with open(path, encoding="utf-8") as f:
                yield json.load(f)

    def count(self) -> int:
        """Number of quarantined entries."""
        return sum(1 for _ in self.dir.glob("*.json")) if self.dir.exists() else 0
