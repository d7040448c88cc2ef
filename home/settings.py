"""Layer 0, the settings of a data dir: ``Settings`` (a frozen record, sizes in bytes, times in
seconds), ``DEFAULTS`` (the one defaults table: library signatures name their defaults from
it), ``load`` (reads the optional ``config.toml`` once per process) and ``ConfigError``. Every
key is documented in docs/configuration.md, and an unknown key is an error, so a typo is never
ignored. ``tomllib`` is imported only when there is a file (the ``quill push`` fast path
usually has none)."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any, NamedTuple

from quill.home.layout import (
    AGENT_ROOTS,
    CONFIG_TOML,
    LOGS_DIR,
    QUEUE_DB,
    RUN_DIR,
    SCHEDULE_DB,
    SNAPSHOTS_DIR,
    SPOOL_DIR,
    SPOOL_ID,
    STATE_DB,
    TOKENS_DB,
    WAITERS_DIR,
    WATCH_STATE,
    agent_home,
    default_home,
    private_dirs,
)

#: Who may call the HTTP API without a token: loopback peers only, nobody, or anyone.
ANONYMOUS = ("loopback", "none", "any")
#: The URL schemes of a ``[store] url`` (a PostgreSQL store). Checked here when the setting is
#: loaded or written; ``store.factory`` is the one place that opens a store by it.
STORE_SCHEMES = ("postgresql", "postgres")
DAY = 24 * 3600.0


class ConfigError(Exception):
    """``config.toml`` is unreadable or holds an unknown key or a bad value."""


class DataDirError(ConfigError):
    """The data dir's path cannot be a data dir: it names a file, lies under a file, or this
    user cannot enter and read it. ``path`` is the data dir, ``hint`` what to do."""

    def __init__(self, path: Path, problem: str, hint: str):
        super().__init__(f"the data dir {path} {problem}")
        self.path, self.hint = path, hint


#: How every data dir error ends: where a data dir is chosen.
_CHOOSE = (
    "use another folder as the data dir (`--home`, `QUILL_HOME` or `quill.Client(path)`; "
    "it is created on first use)"
)


def check_home(home: Path) -> None:
    """Raise ``DataDirError`` unless ``home`` is a folder this user can enter and read, or
    does not exist yet (it is created on first use). Never creates anything."""
    try:
        st = os.stat(home)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise DataDirError(
            home, "lies under a file, not a folder", f"{_CHOOSE}, or move that file aside"
        ) from None
    except PermissionError:
        raise DataDirError(
            home,
            "cannot be reached by this user (permission denied on a folder above it)",
            f"run Quill as the data dir's owner, or {_CHOOSE}",
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise DataDirError(home, "is a file, not a folder", f"{_CHOOSE}, or move the file aside")
    if not os.access(home, os.R_OK | os.X_OK):
        raise DataDirError(
            home,
            "cannot be read by this user (its owner keeps it to itself: mode "
            f"{stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})",
            f"run Quill as its owner, or {_CHOOSE}",
        )


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
    #: The largest spool record (one encoded line, bytes) a producer appends: every producer
    #: (client, `quill push`, HTTP) refuses a larger one before the ack, because the writer's
    #: memory for one record is a multiple of its size (docs/configuration.md gives it).
    max_record_bytes: int = 64 * 1024 * 1024
    poll_interval: float = 0.05
    writer_hung_after_s: float = 120.0
    #: ``quill run --until-idle`` without ``--timeout`` ends (exit 1) once the writer has
    #: failed this long (s) without applying: long enough to ride out a server restart.
    writer_give_up_s: float = 300.0
    snapshot_keep: int = 5
    spool_retention_s: float = 7 * DAY
    stale_after_s: float = 1 * DAY
    retention_s: float = 90 * DAY
    prune_sources: tuple[str, ...] = ("cli", "cron", "subagent", "tool", "api", "recovered")
    http_listen: str = ""
    http_anonymous: str = "loopback"
    http_max_body_bytes: int = 8 * 1024 * 1024
    http_max_batch_messages: int = 2000
    #: Seconds a connection may take to send a request head, and a request body.
    http_header_timeout_s: float = 10.0
    http_body_timeout_s: float = 60.0
    #: Open connections at most (lowered to fit the descriptor limit; ops/service/guard.py).
    http_max_connections: int = 512
    #: Requests a second one client (peer address) may start on average, and at once.
    http_requests_per_s: float = 200.0
    http_request_burst: int = 400
    #: ``[store] url``: ``postgresql://…`` puts the store on a shared PostgreSQL server
    #: (docs/backends.md); None = the embedded SQLite file ``state.db``.
    store_url: str | None = None
    #: ``[store] pack_min_bytes``: a message text of at least this many UTF-8 bytes is stored
    #: packed (Zstandard) in the SQLite file (``store.packed``); 0 packs every non-empty text.
    #: New and revised rows only: ``quill pack`` packs the rows already stored. PostgreSQL
    #: compresses large values itself (TOAST) and ignores it.
    pack_min_bytes: int = 1024
    #: Client-side bounds on every PostgreSQL connection Quill opens (``pg_client_params``):
    #: a server or network that stops answering is given up on within about
    #: ``store_tcp_user_timeout_s`` (data sent and unacknowledged) or
    #: ``idle + interval × count`` s (nothing in flight: a long statement, an idle session),
    #: instead of TCP's defaults (hours), and a connection attempt within
    #: ``store_connect_timeout_s``.
    store_connect_timeout_s: float = 10.0
    store_keepalives_idle_s: float = 10.0
    store_keepalives_interval_s: float = 5.0
    store_keepalives_count: int = 3
    store_tcp_user_timeout_s: float = 30.0
    #: Seconds one round trip to the server may take before the connection is dropped
    #: (``answer_timeout``, ``store.postgres.bounded``): covers a peer that is alive but never
    #: answers (a frozen proxy or pooler, a hung server), which neither keepalives nor
    #: ``tcp_user_timeout`` notice because the peer's kernel still acknowledges everything.
    store_answer_timeout_s: float = 60.0
    #: ``[queue] url``: ``redis://…`` puts the job queue on a shared Redis server; None = the
    #: embedded SQLite queue ``queue.db``.
    queue_url: str | None = None
    #: ``[watch]``: the fleet's watcher follows agent transcript folders as they are written
    #: (docs/operations.md, "Live capture"). ``enabled``: run it; ``default_roots``: follow the
    #: standard agent folders (``layout.AGENT_ROOTS``) of the user; ``roots``: more folders;
    #: ``rescan_s``: seconds between full rescans that catch events the OS dropped.
    watch_enabled: bool = True
    watch_default_roots: bool = True
    watch_roots: tuple[str, ...] = ()
    watch_rescan_s: float = 30.0

    def pg_client_params(self) -> dict[str, float]:
        """The bounds on a PostgreSQL connection's network waits (``store_*`` fields): libpq's
        ``connect_timeout`` (s), ``keepalives`` (on), ``keepalives_idle``/
        ``keepalives_interval`` (s), ``keepalives_count`` and ``tcp_user_timeout`` (ms), whole
        seconds rounded up, at least 1 (libpq takes integers); and Quill's own
        ``answer_timeout`` (s, float: the longest one round trip may take, which
        ``store.postgres.PgConnection`` takes out before libpq sees the rest)."""
        up = lambda s: max(1, math.ceil(s))  # noqa: E731 - a one-line unit conversion
        return {
            "connect_timeout": up(self.store_connect_timeout_s),
            "keepalives": 1,
            "keepalives_idle": up(self.store_keepalives_idle_s),
            "keepalives_interval": up(self.store_keepalives_interval_s),
            "keepalives_count": int(self.store_keepalives_count),
            "tcp_user_timeout": up(self.store_tcp_user_timeout_s) * 1000,
            "answer_timeout": float(self.store_answer_timeout_s),
        }

    @property
    def spool_id_path(self) -> Path:
        """The file holding this data dir's stable spool id (``quill.spool.identity``)."""
        return self.home / SPOOL_ID

    @property
    def watch_state(self) -> Path:
        """The watcher's per-file positions (``quill.workers.watch``)."""
        return self.home / WATCH_STATE

    @property
    def watch_paths(self) -> list[Path]:
        """The folders the watcher follows, in order, without repeats: the standard agent
        folders under ``agent_home()`` (when ``watch_default_roots``), then ``watch_roots``
        (``~`` expanded). Folders that do not exist yet are included (watched once they do)."""
        paths = (
            [agent_home() / rel for rel in AGENT_ROOTS.values()] if self.watch_default_roots else []
        )
        paths += [Path(r).expanduser() for r in self.watch_roots]
        return list(dict.fromkeys(p.absolute() for p in paths))

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
    def waiters_dir(self) -> Path:
        """Where clients waiting for the writer keep their doorbells (``home.doorbell``)."""
        return self.home / RUN_DIR / WAITERS_DIR

    @property
    def logs_dir(self) -> Path:
        return self.home / LOGS_DIR

    def ensure_dirs(self) -> None:
        """Create the data dir layout owner-only (0700), chmod'ing each path. Raises
        ``ConfigError`` when one of them exists and is not a directory."""
        for d in (self.home, self.spool_dir, self.snapshots_dir, self.run_dir, self.logs_dir):
            try:
                private_dirs(d)
            except (FileExistsError, NotADirectoryError):
                raise ConfigError(f"{d} exists and is not a directory") from None
            os.chmod(d, 0o700)


#: The defaults table: every setting's default (``home`` is no setting: the empty path).
DEFAULTS = Settings(home=Path())

#: ``config.toml`` ``(section, key)`` → ``Settings`` field.
_SECTIONS = {
    ("store", "synchronous"): "synchronous",
    ("store", "url"): "store_url",
    ("store", "pack_min_bytes"): "pack_min_bytes",
    ("store", "connect_timeout_s"): "store_connect_timeout_s",
    ("store", "keepalives_idle_s"): "store_keepalives_idle_s",
    ("store", "keepalives_interval_s"): "store_keepalives_interval_s",
    ("store", "keepalives_count"): "store_keepalives_count",
    ("store", "tcp_user_timeout_s"): "store_tcp_user_timeout_s",
    ("store", "answer_timeout_s"): "store_answer_timeout_s",
    ("queue", "url"): "queue_url",
    ("writer", "chunk_rows"): "chunk_rows",
    ("writer", "index_slice_rows"): "index_slice_rows",
    ("writer", "poll_interval"): "poll_interval",
    ("writer", "hung_after_s"): "writer_hung_after_s",
    ("writer", "give_up_s"): "writer_give_up_s",
    ("spool", "segment_bytes"): "segment_bytes",
    ("spool", "max_record_bytes"): "max_record_bytes",
    ("snapshots", "keep"): "snapshot_keep",
    ("spool", "retention_s"): "spool_retention_s",
    ("prune", "stale_after_s"): "stale_after_s",
    ("prune", "retention_s"): "retention_s",
    ("prune", "sources"): "prune_sources",
    ("http", "listen"): "http_listen",
    ("http", "anonymous"): "http_anonymous",
    ("http", "max_body_bytes"): "http_max_body_bytes",
    ("http", "max_batch_messages"): "http_max_batch_messages",
    ("http", "header_timeout_s"): "http_header_timeout_s",
    ("http", "body_timeout_s"): "http_body_timeout_s",
    ("http", "max_connections"): "http_max_connections",
    ("http", "requests_per_s"): "http_requests_per_s",
    ("http", "request_burst"): "http_request_burst",
    ("watch", "enabled"): "watch_enabled",
    ("watch", "default_roots"): "watch_default_roots",
    ("watch", "roots"): "watch_roots",
    ("watch", "rescan_s"): "watch_rescan_s",
}

#: Smallest allowed value of each numeric setting, and whether it may equal that bound
#: (docs/configuration.md lists the same ranges).
_MINIMUM: dict[str, tuple[float, bool]] = {
    "chunk_rows": (1, True),
    "pack_min_bytes": (0, True),
    "store_connect_timeout_s": (0, False),
    "store_keepalives_idle_s": (0, False),
    "store_keepalives_interval_s": (0, False),
    "store_keepalives_count": (1, True),
    "store_tcp_user_timeout_s": (0, False),
    "store_answer_timeout_s": (0, False),
    "index_slice_rows": (1, True),
    "poll_interval": (0, False),
    "writer_hung_after_s": (0, False),
    "writer_give_up_s": (0, False),
    "segment_bytes": (4096, True),
    "max_record_bytes": (4096, True),
    "spool_retention_s": (0, True),
    "snapshot_keep": (1, True),
    "stale_after_s": (0, True),
    "retention_s": (0, True),
    "http_max_body_bytes": (1024, True),
    "http_max_batch_messages": (1, True),
    "http_header_timeout_s": (0, False),
    "http_body_timeout_s": (0, False),
    "http_max_connections": (8, True),
    "http_requests_per_s": (0, False),
    "http_request_burst": (1, True),
    "watch_rescan_s": (0, False),
}
#: Largest allowed value of a numeric setting. A record must stay below what the stores take
#: in one value (SQLite's default SQLITE_MAX_LENGTH is 10^9 bytes, PostgreSQL's field limit
#: 1 GB) with room for the writer's copies of it (docs/configuration.md).
_MAXIMUM: dict[str, float] = {"max_record_bytes": 512 * 1024 * 1024}
#: Largest integer setting: integers reach SQL (``[store] pack_min_bytes`` as the SQL function
#: ``quill_pack_min``, row counts as LIMITs), where a larger one raises ``OverflowError``.
_INT_MAX = 2**63 - 1
_TYPES = {
    "int": int,
    "float": (int, float),
    "str": str,
    "str | None": str,
    "tuple[str, ...]": list,
    "bool": bool,
}


def _check(path: Path, key: str, name: str, value: Any, annotation: str) -> None:
    wrong = isinstance(value, bool) != (annotation == "bool")
    if not isinstance(value, _TYPES[annotation]) or wrong:
        raise ConfigError(f"{path}: {key} has the wrong type ({type(value).__name__})")
    if name in _MINIMUM:
        low, inclusive = _MINIMUM[name]
        if not math.isfinite(value) or value < low or (value == low and not inclusive):
            raise ConfigError(
                f"{path}: {key} must be a finite number "
                f"{'≥' if inclusive else '>'} {low:g}, got {value!r}"
            )
    if name in _MAXIMUM and value > _MAXIMUM[name]:
        raise ConfigError(f"{path}: {key} must be ≤ {_MAXIMUM[name]:g}, got {value!r}")
    if annotation == "int" and abs(value) > _INT_MAX:
        raise ConfigError(f"{path}: {key} must be a 64-bit integer (≤ {_INT_MAX}), got {value!r}")


def load(home: str | os.PathLike[str] | None = None) -> Settings:
    """The ``Settings`` of data dir ``home`` (default: ``default_home()``), applying its
    ``config.toml`` when there is one. Raises ``DataDirError`` (a ``ConfigError``) when
    ``home`` cannot be a data dir (``check_home``), and ``ConfigError`` for an unreadable
    file, an unknown key, a wrongly typed value or a value out of range."""
    settings = Settings(
        home=Path(home).expanduser().resolve() if home else default_home().resolve()
    )
    check_home(settings.home)
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
    types = {
        name: str(getattr(t, "__forward_arg__", t)) for name, t in Settings.__annotations__.items()
    }
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        for key, value in table.items():
            name = _SECTIONS.get((section, key))
            if name is None:
                raise ConfigError(f"{path}: unknown setting {section}.{key}")
            _check(path, f"{section}.{key}", name, value, types[name])
            if isinstance(value, list) and not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: {section}.{key} must be a list of strings")
            changes[name] = tuple(value) if isinstance(value, list) else value
    scheme = {k: (changes.get(k) or "").split(":", 1)[0] for k in ("store_url", "queue_url")}
    if changes.get("store_url") and scheme["store_url"] not in STORE_SCHEMES:
        raise ConfigError(f"{path}: store.url must be a postgresql:// URL")
    if changes.get("queue_url") and scheme["queue_url"] not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{path}: queue.url must be a redis:// URL")
    if changes.get("synchronous", "NORMAL").upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{path}: store.synchronous must be NORMAL or FULL")
    if changes.get("http_anonymous", "loopback") not in ANONYMOUS:
        raise ConfigError(f"{path}: http.anonymous must be one of {', '.join(ANONYMOUS)}")
    return settings._replace(**changes)
