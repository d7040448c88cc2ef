"""Layer 0: a Quill data dir, its settings and its run directory. Imports nothing from Quill,
so every layer (spool < store < jobs < workers < ops) may import it.

* **Layout.** Every file and folder name in a data dir is a constant here (docs/architecture.md,
  "Data layout"). The data dir is ``$QUILL_HOME`` if set, else ``$XDG_DATA_HOME/quill``, else
  ``~/.local/share/quill``.
* **Settings.** ``load(home)`` reads the optional ``config.toml`` once per process into a frozen
  ``Settings``; every key is documented in docs/configuration.md, and an unknown key is an
  error, so a typo is never ignored. ``DEFAULTS`` is the one defaults table: library signatures
  name their defaults from it.
* **Run directory** (``run/``): ``RunDir`` names its files and decides whether what they say is
  current; the writer's halt and ``quill recover``'s swap request are typed records (``Halt``,
  ``SwapRequest``). Process identity (``process_identity``, ``holder_alive``) lives here because
  that decision needs it; the flock lease itself is ``quill.store.lease``.

Records are NamedTuples, not dataclasses: every command, the per-turn ``quill push`` included,
imports this module, and ``dataclasses`` imports ``inspect`` (≈8 ms, bench/cli.py). For the
same reason ``psutil`` and ``tomllib`` are imported only when used.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

# -- layout: every name in a data dir -------------------------------------------------------

STATE_DB = "state.db"          # the SQLite store (WAL)
SPOOL_DIR = "spool"            # segments + quarantine/ (docs/spool-format.md)
SNAPSHOTS_DIR = "snapshots"    # verified store snapshots
RUN_DIR = "run"                # leases and process records (``RunDir``)
LOGS_DIR = "logs"              # JSON logs, one file per role
EVIDENCE_DIR = "evidence"      # store files set aside by a swap (``quill recover``)
QUEUE_DB = "queue.db"          # the embedded huey queues
SCHEDULE_DB = "schedule.db"    # the embedded APScheduler job store
TOKENS_DB = "tokens.db"        # HTTP API tokens
SPOOL_ID = "spool-id"          # this data dir's stable spool id
CONFIG_TOML = "config.toml"    # optional settings (``load``)
#: A verified snapshot is ``snapshot-<UTC time>-<ns>-<segment>-<offset>.db`` (``snapshot_name``).
SNAPSHOT_GLOB = "snapshot-*.db"
#: Entries that make a directory a Quill data dir (a producer handed one appends to its spool/).
DATA_DIR_MARKERS = (SPOOL_DIR, STATE_DB, CONFIG_TOML, RUN_DIR, SNAPSHOTS_DIR, QUEUE_DB,
                    SCHEDULE_DB, SPOOL_ID)


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


def default_home() -> Path:
    """The data dir when none is given: ``$QUILL_HOME``, else the XDG data dir."""
    if os.environ.get("QUILL_HOME"):
        return Path(os.environ["QUILL_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "quill"


# -- settings ---------------------------------------------------------------------------------

#: Who may call the HTTP API without a token: loopback peers only, nobody, or anyone.
ANONYMOUS = ("loopback", "none", "any")
DAY = 24 * 3600.0


class ConfigError(Exception):
    """``config.toml`` is unreadable or holds an unknown key or a bad value."""


class Settings(NamedTuple):
    """Paths and settings of one data dir. Sizes in bytes, times in seconds, counts in rows.
    Immutable; the field defaults are the defaults table (``DEFAULTS``)."""

    home: Path
    synchronous: str = "NORMAL"
    chunk_rows: int = 500
    #: Rows per FTS indexing slice: big enough for bulk efficiency (the gain over per-row
    #: triggers grows with the slice), small enough to keep each write transaction short.
    index_slice_rows: int = 2000
    #: Spool rotation size: keeps segment counts small while GC still frees space usefully.
    segment_bytes: int = 64 * 1024 * 1024
    poll_interval: float = 0.05
    writer_hung_after_s: float = 120.0
    snapshot_keep: int = 5
    spool_retention_s: float = 7 * DAY
    stale_after_s: float = 1 * DAY
    retention_s: float = 90 * DAY
    prune_sources: tuple[str, ...] = ("cli", "cron", "subagent", "tool", "api", "recovered")
    http_listen: str = ""
    http_anonymous: str = "loopback"
    http_max_body_bytes: int = 8 * 1024 * 1024
    http_max_batch_messages: int = 2000
    #: ``[store] url``: ``postgresql://…`` puts the store on a shared PostgreSQL server
    #: (docs/backends.md); None = the embedded SQLite file ``state.db``.
    store_url: str | None = None
    #: ``[queue] url``: ``redis://…`` puts the job queue on a shared Redis server; None = the
    #: embedded SQLite queue ``queue.db``.
    queue_url: str | None = None

    @property
    def spool_id_path(self) -> Path:
        """The file holding this data dir's stable spool id (``quill.spool.identity``)."""
        return self.home / SPOOL_ID

    @property
    def state_db(self) -> Path:
        return self.home / STATE_DB

    @property
    def queue_db(self) -> Path:
        return self.home / QUEUE_DB

    @property
    def schedule_db(self) -> Path:
        return self.home / SCHEDULE_DB

    @property
    def spool_dir(self) -> Path:
        return self.home / SPOOL_DIR

    @property
    def snapshots_dir(self) -> Path:
        return self.home / SNAPSHOTS_DIR

    @property
    def tokens_db(self) -> Path:
        return self.home / TOKENS_DB

    @property
    def run_dir(self) -> Path:
        return self.home / RUN_DIR

    @property
    def logs_dir(self) -> Path:
        return self.home / LOGS_DIR

    def ensure_dirs(self) -> None:
        """Create the data dir layout owner-only (0700), chmod'ing each path. Raises
        ``ConfigError`` when one of them exists and is not a directory."""
        for d in (self.home, self.spool_dir, self.snapshots_dir, self.run_dir, self.logs_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise ConfigError(f"{d} exists and is not a directory") from None
            os.chmod(d, 0o700)


#: The defaults table: every setting's default (``home`` is no setting: the empty path).
DEFAULTS = Settings(home=Path())

#: ``config.toml`` ``(section, key)`` → ``Settings`` field.
_SECTIONS = {
    ("store", "synchronous"): "synchronous",
    ("store", "url"): "store_url",
    ("queue", "url"): "queue_url",
    ("writer", "chunk_rows"): "chunk_rows",
    ("writer", "index_slice_rows"): "index_slice_rows",
    ("writer", "poll_interval"): "poll_interval",
    ("writer", "hung_after_s"): "writer_hung_after_s",
    ("spool", "segment_bytes"): "segment_bytes",
    ("snapshots", "keep"): "snapshot_keep",
    ("spool", "retention_s"): "spool_retention_s",
    ("prune", "stale_after_s"): "stale_after_s",
    ("prune", "retention_s"): "retention_s",
    ("prune", "sources"): "prune_sources",
    ("http", "listen"): "http_listen",
    ("http", "anonymous"): "http_anonymous",
    ("http", "max_body_bytes"): "http_max_body_bytes",
    ("http", "max_batch_messages"): "http_max_batch_messages",
}

#: Smallest allowed value of each numeric setting, and whether it may equal that bound
#: (docs/configuration.md lists the same ranges).
_MINIMUM: dict[str, tuple[float, bool]] = {
    "chunk_rows": (1, True), "index_slice_rows": (1, True), "poll_interval": (0, False),
    "writer_hung_after_s": (0, False), "segment_bytes": (4096, True),
    "spool_retention_s": (0, True), "snapshot_keep": (1, True), "stale_after_s": (0, True),
    "retention_s": (0, True), "http_max_body_bytes": (1024, True),
    "http_max_batch_messages": (1, True),
}
_TYPES = {"int": int, "float": (int, float), "str": str, "str | None": str, "tuple[str, ...]": list}


def _check(path: Path, key: str, name: str, value: Any, annotation: str) -> None:
    if not isinstance(value, _TYPES[annotation]) or isinstance(value, bool):
        raise ConfigError(f"{path}: {key} has the wrong type ({type(value).__name__})")
    if name in _MINIMUM:
        low, inclusive = _MINIMUM[name]
        if not math.isfinite(value) or value < low or (value == low and not inclusive):
            raise ConfigError(f"{path}: {key} must be a finite number "
                              f"{'≥' if inclusive else '>'} {low:g}, got {value!r}")


def load(home: str | os.PathLike[str] | None = None) -> Settings:
    """The ``Settings`` of data dir ``home`` (default: ``default_home()``), applying its
    ``config.toml`` when there is one. Raises ``ConfigError`` for an unreadable file, an
    unknown key, a wrongly typed value or a value out of range."""
    settings = Settings(home=Path(home).expanduser().resolve() if home
                        else default_home().resolve())
    path = settings.home / CONFIG_TOML
    if not path.exists():
        return settings
    import tomllib  # only when there is a file: the producer path (`quill push`) usually has none

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    changes: dict[str, Any] = {}
    # The annotation text (``from __future__ import annotations``; NamedTuple keeps a ForwardRef).
    types = {name: str(getattr(t, "__forward_arg__", t))
             for name, t in Settings.__annotations__.items()}
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        for key, value in table.items():
            name = _SECTIONS.get((section, key))
            if name is None:
                raise ConfigError(f"{path}: unknown setting {section}.{key}")
            _check(path, f"{section}.{key}", name, value, types[name])
            changes[name] = tuple(value) if isinstance(value, list) else value
    scheme = {k: (changes.get(k) or "").split(":", 1)[0] for k in ("store_url", "queue_url")}
    if changes.get("store_url") and scheme["store_url"] not in ("postgresql", "postgres"):
        raise ConfigError(f"{path}: store.url must be a postgresql:// URL")
    if changes.get("queue_url") and scheme["queue_url"] not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{path}: queue.url must be a redis:// URL")
    if changes.get("synchronous", "NORMAL").upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{path}: store.synchronous must be NORMAL or FULL")
    if changes.get("http_anonymous", "loopback") not in ANONYMOUS:
        raise ConfigError(f"{path}: http.anonymous must be one of {', '.join(ANONYMOUS)}")
    return settings._replace(**changes)


# -- process identity -------------------------------------------------------------------------

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


def start_ticks(pid: int) -> int:
    """The kernel's start time of ``pid`` in clock ticks since boot: field 22 of
    ``/proc/<pid>/stat`` (proc(5)), parsed after the last ``)`` because the command name
    (field 2) may contain spaces and parentheses. Raises ``psutil.NoSuchProcess`` when the
    process is gone (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read()
    except OSError:
        import psutil
        raise psutil.NoSuchProcess(pid) from None
    return int(text[text.rindex(b")") + 2:].split()[19])


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Who a process is, pid-reuse-safe: ``{"pid", "create_time", "start_ticks", "boot_id"}``.
    ``start_ticks`` (``start_ticks()``) is fixed for the life of the process and unaffected by
    clock or boot-time-estimate changes; ``create_time`` (epoch s) is kept for display and for
    readers of older records. Raises ``psutil.NoSuchProcess`` if ``pid`` is gone."""
    import psutil
    proc = psutil.Process(pid or os.getpid())
    return {"pid": proc.pid, "create_time": proc.create_time(),
            "start_ticks": start_ticks(proc.pid), "boot_id": _boot_id()}


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
            return (holder.get("boot_id") in (None, _boot_id())
                    and start_ticks(pid) == int(holder["start_ticks"]))
        shift = psutil.Process(pid).create_time() - float(holder["create_time"])
        return abs(shift - round(shift)) < _TICK_EPSILON_S and abs(round(shift)) <= BOOT_SHIFT_S
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def read_holder(lock_path: Path) -> dict[str, Any]:
    """The holder recorded in a lease's lock file ({} when none or unreadable)."""
    try:
        return json.loads(Path(lock_path).read_text() or "{}")
    except (OSError, ValueError):
        return {}


# -- run-directory records --------------------------------------------------------------------

#: ``Halt.store_ino`` of a halt recorded before halts named their store file: it applies to
#: whatever file is in place (inodes are never negative).
ANY_STORE = -1


class Halt(NamedTuple):
    """The writer's sticky halt (``run/halt.json``; also the ``halt`` of the writer's status and
    of a PostgreSQL store's halt row): a fact about the store *file* whose inode it records, so
    it outlives the writer and stops applying once that file is replaced."""

    cause: str                  # the error class, e.g. "CorruptError", "StoreMissing"
    detail: str
    at: float                   # epoch s
    next: str = "quill recover"  # the command that lifts it
    cursor: str | None = None   # the writer's spool cursor when it halted
    store_ino: int | None = ANY_STORE  # the store file's inode; None: the file was missing

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready dict (``cursor``/``store_ino`` only when known)."""
        out = {"cause": self.cause, "detail": self.detail, "at": self.at, "next": self.next}
        if self.cursor is not None:
            out["cursor"] = self.cursor
        if self.store_ino != ANY_STORE:
            out["store_ino"] = self.store_ino
        return out

    @classmethod
    def from_json(cls, data: Any) -> Halt | None:
        """The halt a recorded dict describes; None for an empty or non-dict value. Lenient on
        the rest: any non-empty record is a halt (older writers wrote fewer fields)."""
        if not isinstance(data, dict) or not data:
            return None
        at = data.get("at")
        return cls(str(data.get("cause", "halt")), str(data.get("detail", "see quill status")),
                   float(at) if isinstance(at, (int, float)) else 0.0,
                   str(data.get("next", "quill recover")),
                   str(data["cursor"]) if data.get("cursor") is not None else None,
                   data.get("store_ino", ANY_STORE))

    def applies_to(self, store: Path) -> bool:
        """True while ``store`` is the file this halt names (same inode, or missing both times),
        or when the halt names no file (``ANY_STORE``)."""
        if self.store_ino == ANY_STORE:
            return True
        try:
            ino: int | None = os.stat(store).st_ino
        except OSError:
            ino = None
        return self.store_ino == ino


def read_halt(halt_file: Path, store: Path) -> Halt | None:
    """The halt recorded in ``halt_file`` if it still applies to ``store``, else None. The one
    reading shared by ``RunDir.halt`` and the snapshot job (which must not copy a file the writer
    refused)."""
    try:
        halt = Halt.from_json(json.loads(Path(halt_file).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return halt if halt is not None and halt.applies_to(store) else None


class SwapRequest(NamedTuple):
    """``quill recover`` asking the halted writer to swap the rebuilt store ``new`` in
    (``run/swap.json``); honoured only while the requester is alive (``RunDir.swap_request``)."""

    new: Path

    def to_json(self) -> dict[str, Any]:
        return {"new": str(self.new)}

    @classmethod
    def from_json(cls, data: Any) -> SwapRequest | None:
        """The request a recorded dict describes, None when it names no file."""
        new = data.get("new") if isinstance(data, dict) else None
        return cls(Path(new)) if isinstance(new, str) and new else None


# -- the run directory ------------------------------------------------------------------------

ROLES = ("supervisor", "writer", "scheduler", "consumer", "http")
LEASES = ("fleet", "writer", "scheduler")


class RunDir:
    """The run directory of data dir ``home``: the one owner of its file names, and of the
    rule for whether what they say is current. Cheap to construct, holds no open files.

    Files, each written by one process only, atomically (temp file + rename), stamped with the
    writer's identity (``process_identity``), the data dir it serves and ``updated_at``:
    ``<lease>.lock`` (``LEASES``, held by ``quill.store.lease.Lease``), ``<role>.json`` (what
    each of ``ROLES`` last published about itself), ``halt.json`` (``Halt``) and ``swap.json``
    (``SwapRequest``).

    The rule every reader follows: a status file or request counts only while the process that
    wrote it is alive *and* serves this data dir (a copied data dir carries the original's
    files); anything else is history. A halt counts while the store file it names is in place.
    """

    def __init__(self, home: Path):
        self.home = Path(home)
        self.path = self.home / RUN_DIR
        self._me: dict[str, Any] | None = None

    def lock(self, name: str) -> Path:
        """Path of lease ``name`` (one of ``LEASES``; ValueError otherwise)."""
        if name not in LEASES:
            raise ValueError(f"unknown lease {name!r}; one of {LEASES}")
        return self.path / f"{name}.lock"

    def status_file(self, role: str) -> Path:
        """Path of the status file of ``role`` (one of ``ROLES``; ValueError otherwise)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {ROLES}")
        return self.path / f"{role}.json"

    @property
    def halt_file(self) -> Path:
        return self.path / "halt.json"

    @property
    def swap_file(self) -> Path:
        return self.path / "swap.json"

    # -- writing -------------------------------------------------------------------------------

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        if self._me is None or self._me["pid"] != os.getpid():
            self._me = {**process_identity(), "home": str(self.home)}
        body = {**data, **self._me, "updated_at": time.time()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def publish(self, role: str, data: dict[str, Any], *, strict: bool = False) -> bool:
        """Replace ``role``'s status with ``data`` + this process's identity + ``updated_at``
        (epoch s). A full or read-only disk is not fatal (status is advisory; the publisher
        must keep doing its real work): returns False, unless ``strict`` (raises OSError)."""
        try:
            self._write(self.status_file(role), data)
            return True
        except OSError:
            if strict:
                raise
            return False

    def record_halt(self, halt: Halt, store: Path) -> bool:
        """Record ``halt`` about the store file ``store`` (its inode, or None when it is
        missing). Returns False when the disk refused it."""
        try:
            ino: int | None = os.stat(store).st_ino
        except OSError:
            ino = None
        try:
            self._write(self.halt_file, halt._replace(store_ino=ino).to_json())
            return True
        except OSError:
            return False

    def clear_halt(self) -> None:
        self.halt_file.unlink(missing_ok=True)

    def request_swap(self, new: Path) -> None:
        """Ask the halted writer to swap ``new`` in (raises OSError when unwritable)."""
        self._write(self.swap_file, SwapRequest(Path(new)).to_json())

    def clear_swap(self) -> None:
        self.swap_file.unlink(missing_ok=True)

    # -- reading -------------------------------------------------------------------------------

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _current(self, data: dict[str, Any] | None, pid: int | None = None) -> bool:
        return (bool(data) and data.get("home") == str(self.home) and holder_alive(data)
                and (pid is None or data.get("pid") == pid))

    def last(self, role: str) -> dict[str, Any] | None:
        """``role``'s last published status with ``alive`` (its publisher is alive and serves
        this data dir: the status is current) and ``age_s`` added; None if never published."""
        data = self._load(self.status_file(role))
        if data is None:
            return None
        age = round(time.time() - data.get("updated_at", 0), 1)
        return {**data, "alive": self._current(data), "age_s": age}

    def live(self, role: str, pid: int | None = None) -> dict[str, Any] | None:
        """``role``'s status if its publisher is alive (and is ``pid``, when given), else None."""
        data = self._load(self.status_file(role))
        return data if self._current(data, pid) else None

    def lease_holder(self, name: str) -> dict[str, Any] | None:
        """The live holder of lease ``name`` (pid-reuse-safe), or None when it is free."""
        path = self.lock(name)
        holder = read_holder(path)
        return (holder if holder and holder_alive(holder)
                and holder.get("path", str(path)) == str(path) else None)

    def fleet_running(self) -> bool:
        """True while a supervisor holds this data dir's fleet lease."""
        return self.lease_holder("fleet") is not None

    def halt(self, store: Path) -> Halt | None:
        """The writer's sticky halt if it still applies to ``store`` (same file), else None."""
        return read_halt(self.halt_file, store)

    def swap_request(self) -> SwapRequest | None:
        """A swap request whose requester (``quill recover``) is still alive and waiting."""
        data = self._load(self.swap_file)
        return SwapRequest.from_json(data) if self._current(data) else None
