"""Layer 0, the data-dir layout: every file and folder name in a Quill data dir
(docs/architecture.md, "Data layout"), snapshot and evidence names, and where the data dir is
when none is given (``$QUILL_HOME``, else ``$XDG_DATA_HOME/quill``, else
``~/.local/share/quill``). Imports nothing from Quill."""

from __future__ import annotations

import os
import time
from pathlib import Path

STATE_DB = "state.db"  # the SQLite store (WAL)
SPOOL_DIR = "spool"  # segments + quarantine/ (docs/spool-format.md)
SNAPSHOTS_DIR = "snapshots"  # verified store snapshots
RUN_DIR = "run"  # leases and process records (``RunDir``)
WAITERS_DIR = "waiters"  # in run/: waiting clients' doorbells (``home.doorbell``)
LOGS_DIR = "logs"  # JSON logs, one file per role
EVIDENCE_DIR = "evidence"  # store files set aside by a swap (``quill recover``)
QUEUE_DB = "queue.db"  # the embedded huey queues
SCHEDULE_DB = "schedule.db"  # the embedded APScheduler job store
TOKENS_DB = "tokens.db"  # HTTP API tokens
OTLP_LINKS_DB = "otlp-links.db"  # OTLP agent spans' delegate links (``otlp_links``)
SPOOL_ID = "spool-id"  # this data dir's stable spool id
CONFIG_TOML = "config.toml"  # optional settings (``load``)
#: The watcher's durable per-file positions and unreadable files (``quill.workers.watch``).
WATCH_STATE = "watch-state.json"
#: Where each coding agent writes its sessions, relative to the user's home directory: the
#: roots ``[watch] default_roots`` follows (docs/configuration.md).
AGENT_ROOTS = {
    "claude-code": ".claude/projects",
    "codex": ".codex/sessions",
    "gemini-cli": ".gemini/tmp",
    "copilot-cli": ".copilot/session-state",
    "opencode": ".local/share/opencode/storage",
}
#: A verified snapshot is ``snapshot-<UTC time>-<ns>-<segment>-<offset>.db`` (``snapshot_name``).
SNAPSHOT_GLOB = "snapshot-*.db"
#: Entries that make a directory a Quill data dir (a producer handed one appends to its spool/).
DATA_DIR_MARKERS = (
    SPOOL_DIR,
    STATE_DB,
    CONFIG_TOML,
    RUN_DIR,
    SNAPSHOTS_DIR,
    QUEUE_DB,
    SCHEDULE_DB,
    SPOOL_ID,
)


def snapshot_name(segment: int, offset: int, now_ns: int | None = None) -> str:
    """File name of a verified snapshot covering the spool up to ``segment:offset``. Names sort
    by time (UTC second, then nanoseconds), so the last in ``SNAPSHOT_GLOB`` order is the newest;
    the position is the last two ``-`` fields of the stem (``parse_snapshot_name``)."""
    ns = time.time_ns() if now_ns is None else now_ns
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns // 10**9))
    return f"snapshot-{stamp}-{ns % 10**9:09d}-{segment}-{offset}.db"


def parse_snapshot_name(name: str) -> tuple[int, int]:
    """``(segment, offset)`` a snapshot file name (``snapshot_name``) covers; ValueError if
    ``name`` is not one."""
    seg, off = Path(name).stem.split("-")[-2:]
    return int(seg), int(off)


def evidence_dir(home: Path, stamp: str) -> Path:
    """Where a swap sets the replaced store files aside: ``evidence/state-<stamp>``."""
    return Path(home) / EVIDENCE_DIR / f"state-{stamp}"


def agent_home() -> Path:
    """The home directory whose agent folders (``AGENT_ROOTS``) are watched by default:
    ``$QUILL_AGENT_HOME`` when set (another user's home, or an empty folder in tests), else
    the current user's home."""
    return Path(os.environ.get("QUILL_AGENT_HOME") or Path.home()).expanduser()


def default_home() -> Path:
    """The data dir when none is given: ``$QUILL_HOME``, else the XDG data dir."""
    if os.environ.get("QUILL_HOME"):
        return Path(os.environ["QUILL_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "quill"


#: Every folder Quill makes: owner-only (nothing in a data dir is for other OS users).
PRIVATE_DIR_MODE = 0o700


def private_dirs(path: Path) -> None:
    """Make the folder ``path`` and each missing parent owner-only (``PRIVATE_DIR_MODE``,
    chmod'ed whatever the umask), as ``mkdir -p`` would make them: ``Path.mkdir(parents=True)``
    gives the parents it makes the umask's mode (0755), so a data dir a client made first was
    listable by every user. Folders that already exist are left as they are. Raises
    ``OSError`` (``FileExistsError`` when ``path`` or a parent is not a folder)."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # another process made it meanwhile: its maker set the mode
        os.chmod(folder, PRIVATE_DIR_MODE)
