"""Quill's configuration: read once per process, here, and passed down as a frozen value.

Where things live (docs/architecture.md, "Data layout"): ``$QUILL_HOME`` if set, else
``$XDG_DATA_HOME/quill``, else ``~/.local/share/quill``. An optional ``config.toml`` in the
data dir overrides the defaults below; unknown keys are an error, so a typo is not ignored.

Example ``config.toml``::

    [store]
    synchronous = "FULL"        # NORMAL (default) or FULL
    url = "postgresql://quill@db.internal/quill"   # absent = embedded SQLite (state.db)
    [queue]
    url = "redis://queue.internal:6379/0"          # absent = embedded SQLite queue (queue.db)
    [writer]
    chunk_rows = 500            # message rows per write transaction
    [spool]
    segment_bytes = 67108864
    retention_s = 604800        # keep applied+snapshotted segments this long (seconds)
    [snapshots]
    keep = 5
    [prune]
    stale_after_s = 86400       # close open sessions of automatic sources idle this long
    retention_s = 7776000       # delete ended sessions inactive this long (90 days)
    sources = ["cli", "cron", "subagent", "tool", "api", "recovered"]
    [http]
    listen = "127.0.0.1:8765"   # set: `quill run` also runs the HTTP API + dashboard
    anonymous = "loopback"      # requests without a token: loopback (default) | none | any
    max_body_bytes = 8388608    # larger request bodies get 413 body-too-large
    max_batch_messages = 2000   # larger message batches get 413 batch-too-large
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple


#: Who may call the HTTP API without a token: loopback peers only, nobody, or anyone.
ANONYMOUS = ("loopback", "none", "any")


class ConfigError(Exception):
    """``config.toml`` is unreadable or holds an unknown key or a bad value."""


class Config(NamedTuple):
    """Paths and settings of one data dir. Sizes in bytes, times in seconds, counts in rows.

    Immutable. A NamedTuple rather than a dataclass: every command reads it, and ``dataclasses``
    imports ``inspect`` (≈8 ms of the per-turn `quill push`, bench/cli.py)."""

    home: Path
    synchronous: str = "NORMAL"
    chunk_rows: int = 500
    index_slice_rows: int = 2000
    segment_bytes: int = 64 * 1024 * 1024
    poll_interval: float = 0.05
    writer_hung_after_s: float = 120.0
    snapshot_keep: int = 5
    spool_retention_s: float = 7 * 24 * 3600.0
    stale_after_s: float = 24 * 3600.0
    retention_s: float = 90 * 24 * 3600.0
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
        return self.home / "spool-id"

    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def queue_db(self) -> Path:
        return self.home / "queue.db"

    @property
    def schedule_db(self) -> Path:
        return self.home / "schedule.db"

    @property
    def spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def snapshots_dir(self) -> Path:
        return self.home / "snapshots"

    @property
    def tokens_db(self) -> Path:
        return self.home / "tokens.db"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    def ensure_dirs(self) -> None:
        """Create the data dir layout owner-only (0700), chmod'ing each path."""
        for d in (self.home, self.spool_dir, self.snapshots_dir, self.run_dir, self.logs_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise ConfigError(f"{d} exists and is not a directory") from None
            os.chmod(d, 0o700)


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
    "writer_hung_after_s": (0, False), "segment_bytes": (4096, True), "spool_retention_s": (0, True),
    "snapshot_keep": (1, True), "stale_after_s": (0, True), "retention_s": (0, True),
    "http_max_body_bytes": (1024, True), "http_max_batch_messages": (1, True),
}


def _check_range(path: Path, key: str, name: str, value: Any) -> None:
    if name not in _MINIMUM:
        return
    low, inclusive = _MINIMUM[name]
    if not math.isfinite(value) or value < low or (value == low and not inclusive):
        raise ConfigError(f"{path}: {key} must be a finite number {'≥' if inclusive else '>'} {low:g}, got {value!r}")


def default_home() -> Path:
    """The data dir when none is given: ``$QUILL_HOME``, else the XDG data dir."""
    if os.environ.get("QUILL_HOME"):
        return Path(os.environ["QUILL_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "quill"


def load(home: str | os.PathLike[str] | None = None) -> Config:
    """Build the ``Config`` for ``home`` (default: ``default_home()``), applying config.toml.

    Raises ``ConfigError`` for an unreadable file, an unknown key or a wrongly typed value.
    """
    cfg = Config(home=Path(home).expanduser().resolve() if home else default_home().resolve())
    path = cfg.home / "config.toml"
    if not path.exists():
        return cfg
    import tomllib  # only when there is a file: the producer path (`quill push`) usually has none

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    changes: dict[str, Any] = {}
    # The annotation text (``from __future__ import annotations``; NamedTuple wraps it in a ForwardRef).
    types = {name: getattr(t, "__forward_arg__", t) for name, t in Config.__annotations__.items()}
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        for key, value in table.items():
            name = _SECTIONS.get((section, key))
            if name is None:
                raise ConfigError(f"{path}: unknown setting {section}.{key}")
            want = {"int": int, "float": (int, float), "str": str, "str | None": str,
            "tuple[str, ...]": list}[str(types[name])]
            if not isinstance(value, want) or isinstance(value, bool):
                raise ConfigError(f"{path}: {section}.{key} has the wrong type ({type(value).__name__})")
            _check_range(path, f"{section}.{key}", name, value)
            changes[name] = tuple(value) if isinstance(value, list) else value
    if changes.get("store_url") and changes["store_url"].split(":", 1)[0] not in ("postgresql", "postgres"):
        raise ConfigError(f"{path}: store.url must be a postgresql:// URL")
    if changes.get("queue_url") and changes["queue_url"].split(":", 1)[0] not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{path}: queue.url must be a redis:// URL")
    if changes.get("synchronous", "NORMAL").upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{path}: store.synchronous must be NORMAL or FULL")
    if changes.get("http_anonymous", "loopback") not in ANONYMOUS:
        raise ConfigError(f"{path}: http.anonymous must be one of {', '.join(ANONYMOUS)}")
    return cfg._replace(**changes)
