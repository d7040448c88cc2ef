"""The watcher's durable state and what it compares (``workers/watch.py`` has the loop):
``Mark`` (what a file looked like when it was imported), ``WatchState`` (``watch-state.json``
in the data dir, fsync'd), ``scan`` of the roots and ``lag`` (how far behind, for
``quill status``). Stat and read only: nothing here writes under a watched root."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from quill.home import Settings, is_exhaustion

WATCHED_SUFFIXES = (".jsonl", ".json", ".traj")
#: Hidden names that are transcripts: Aider keeps its chat history in the repository it ran
#: in as ``.aider.chat.history.md`` (every other hidden name is an editor's or atomic
#: writer's temp file).
WATCHED_NAMES = frozenset({".aider.chat.history.md"})
#: Bytes of a file's start hashed into its mark: a rewrite that changes the opening (a new
#: session in the same path) is told from growth even when the size grew.
HEAD_BYTES = 4096


class Mark(NamedTuple):
    """What a file looked like when it was last imported (sizes in bytes, mtime in ns)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    head: str

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.dev, self.ino, self.size, self.mtime_ns) == (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
        )


def head_hash(fd: int, size: int) -> str:
    """sha256 (hex, 32 chars) of the first ``min(size, HEAD_BYTES)`` bytes of the file open
    on ``fd`` (read at offset 0 without moving the descriptor). Raises ``OSError``."""
    want, data = min(size, HEAD_BYTES), b""
    while len(data) < want:
        chunk = os.pread(fd, want - len(data), len(data))
        if not chunk:
            break
        data += chunk
    return hashlib.sha256(data).hexdigest()[:32]


def mark_of(fd: int) -> Mark:
    """The mark of the version of a file open on ``fd``: what the import of that descriptor
    reads, whatever has been renamed over its path since (raises ``OSError``)."""
    st = os.fstat(fd)
    return Mark(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, head_hash(fd, st.st_size))


def change_kind(old: Mark | None, new: Mark, fd: int) -> str:
    """``"new"`` (never imported), ``"rewritten"`` (another inode, smaller, or its first bytes
    differ from those ``old`` hashed) or ``"grown"``; ``fd``: the version ``new`` was taken
    from. Raises ``OSError``."""
    if old is None:
        return "new"
    if (old.dev, old.ino) != (new.dev, new.ino) or new.size < old.size:
        return "rewritten"
    same = new.head if old.size >= HEAD_BYTES else head_hash(fd, old.size)
    return "grown" if same == old.head else "rewritten"


class WatchState:
    """The watcher's durable state (``Settings.watch_state``): ``files`` maps a path to the
    ``Mark`` it was imported at; ``unreadable`` maps a path to ``{"reason", "at", "mark"}``.
    ``save`` replaces the file atomically and fsyncs it and its folder."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.files: dict[str, Mark] = {}
        self.unreadable: dict[str, dict[str, Any]] = {}
        self.damaged: str | None = None  # why the saved state could not be read (then empty)

    @classmethod
    def load(cls, path: Path) -> WatchState:
        """The saved state, or an empty one when there is none. A state file that cannot be
        decoded is set aside as empty with ``damaged`` saying why: every file is then imported
        again, which stores nothing twice (module doc). Raises ``OSError`` when unreadable."""
        state = cls(path)
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            return state
        try:
            data = json.loads(raw)
            state.files = {p: Mark(*m) for p, m in data["files"].items()}
            state.unreadable = {
                p: {**u, "mark": Mark(*u["mark"]) if u.get("mark") else None}
                for p, u in data["unreadable"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            state.files, state.unreadable = {}, {}
            state.damaged = f"{type(exc).__name__}: {exc}"
        return state

    def save(self) -> None:
        """Write the state durably (temp file, fsync, rename, fsync of the folder)."""
        body = {
            "files": {p: list(m) for p, m in self.files.items()},
            "unreadable": {
                p: {**u, "mark": list(u["mark"]) if u.get("mark") else None}
                for p, u in self.unreadable.items()
            },
        }
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def watched(path: str | Path) -> bool:
    """Whether a file name is one the watcher follows: a ``WATCHED_SUFFIXES`` name that is
    not hidden, or one of ``WATCHED_NAMES``."""
    name = os.path.basename(path)
    if name in WATCHED_NAMES:
        return True
    return name.endswith(WATCHED_SUFFIXES) and not name.startswith(".")


def scan(roots: Iterable[Path]) -> tuple[dict[str, os.stat_result], dict[str, str]]:
    """Every watched file under ``roots`` with its stat, and the files (or folders) that
    could not be listed or stat'ed with the reason. Symlinks are not followed into folders.
    Raises ``OSError`` (EMFILE/ENFILE) when no descriptor was left to list a folder: a scan
    missing a folder would read as its files gone, so there is no partial answer."""
    found: dict[str, os.stat_result] = {}
    errors: dict[str, str] = {}

    def on_error(exc: OSError) -> None:
        if is_exhaustion(exc, chain=False):
            raise exc
        errors[str(exc.filename)] = exc.strerror or type(exc).__name__

    for root in roots:
        if not root.is_dir():
            continue
        for folder, _dirs, names in os.walk(root, onerror=on_error):
            for name in names:
                if not watched(name):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # gone between listing and stat
                except OSError as exc:
                    errors[path] = exc.strerror or type(exc).__name__
                    continue
                if os.path.isfile(path):
                    found[path] = st
    return found, errors


def lag(cfg: Settings, state: WatchState | None = None) -> dict[str, Any]:
    """How far behind the watcher of ``cfg`` is, from its saved state and a scan of the roots
    (stat only): ``roots`` [{path, exists}], ``files`` (imported and followed), ``pending``
    (files new or changed since their mark), ``bytes_behind`` (bytes grown past the marks,
    whole size for new or rewritten files), ``unreadable`` [{path, reason, at}] and
    ``state_damaged`` (why the saved state was unreadable, else None)."""
    state = state or WatchState.load(cfg.watch_state)
    roots = cfg.watch_paths
    found, errors = scan(roots)
    pending, behind = 0, 0
    for path, st in found.items():
        old = state.files.get(path)
        bad = state.unreadable.get(path)
        if old is not None and old.same_stat(st):
            continue
        if bad is not None and bad.get("mark") and bad["mark"].same_stat(st):
            continue
        pending += 1
        if (
            old is not None
            and (old.dev, old.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= old.size
        ):
            behind += st.st_size - old.size  # the same file grew: its new bytes
        else:
            behind += st.st_size
    unreadable = [
        {"path": p, "reason": u["reason"], "at": u.get("at")} for p, u in state.unreadable.items()
    ]
    unreadable += [
        {"path": p, "reason": r, "at": None} for p, r in errors.items() if p not in state.unreadable
    ]
    return {
        "roots": [{"path": str(r), "exists": r.is_dir()} for r in roots],
        "files": sum(1 for p in state.files if p in found),
        "pending": pending,
        "bytes_behind": behind,
        "unreadable": sorted(unreadable, key=lambda u: u["path"]),
        "state_damaged": state.damaged,
    }
