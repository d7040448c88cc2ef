"""The resolutions in a quarantine's ``audit.jsonl`` (retry, drop, purge), indexed for
``Quarantine.put``: a resolution is final (``spool.quarantine`` module doc)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: Audit actions that take an entry out of the quarantine for good.
RESOLVING = frozenset({"retry", "drop", "purge"})


class Resolutions:
    """An index of the resolution lines of audit files, re-read only when a file changes
    (inode, size or mtime), so a replay refusing many records reads each audit once."""

    def __init__(self) -> None:
        self._files: dict[Path, tuple[tuple[int, int, int], dict[str, list[dict[str, Any]]]]] = {}

    def _index(self, path: Path) -> dict[str, list[dict[str, Any]]]:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._files.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        index: dict[str, list[dict[str, Any]]] = {}
        with open(path, encoding="utf-8") as f:
            for text in f:
                try:
                    line = json.loads(text)
                except ValueError:
                    # a torn last audit line resolved nothing: its entry file is still there
                    continue
                if (
                    isinstance(line, dict)
                    and line.get("action") in RESOLVING
                    and isinstance(line.get("id"), str)
                ):
                    index.setdefault(line["id"], []).append(line)
        self._files[path] = (stamp, index)
        return index

    def find(self, path: Path, position: str, raw: str, batch: Any) -> dict[str, Any] | None:
        """The line of ``path`` resolving the record at ``position``: same raw text when the
        line keeps it, else (a purge kept only op and batch) the same batch."""
        for line in self._index(path).get(position, ()):
            entry = line.get("entry") if isinstance(line.get("entry"), dict) else None
            if entry is not None and isinstance(entry.get("raw"), str):
                if entry["raw"] == raw:
                    return line
            elif (entry.get("batch") if entry is not None else line.get("batch")) == batch:
                return line
        return None
