"""huey without its optional drivers until a queue needs one.

``huey.storage`` imports ``redis`` and ``psycopg`` at module level for its Redis and
PostgreSQL storages (~270 ms of CPU together, eight times huey itself), so every command that
touches a queue would pay for both drivers even on a data dir whose queue is ``queue.db``.
Importing this module imports huey with those two drivers hidden from the importing thread
(huey then records them as absent), unless they are loaded already; ``redis_storage()`` loads
the Redis driver when a ``[queue] url`` data dir builds its queues and hands it to huey.

Only the thread doing the import is refused the drivers (a per-thread finder, not
``sys.modules``), so another thread of a server importing psycopg meanwhile is unaffected.
Quill never uses huey's PostgreSQL storage, so huey's ``psycopg`` stays absent.

Every Quill module takes huey's names from here, never from ``huey`` directly: the first
import of huey in a process decides what ``huey.storage`` saw.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

#: huey's optional drivers: loaded by huey only when already loaded by someone else.
DRIVERS = ("redis", "psycopg")


class _RefuseDrivers:
    """A ``sys.meta_path`` finder that makes ``DRIVERS`` unimportable for one thread."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if threading.get_ident() == self.thread and name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _import_huey() -> None:
    if "huey.storage" in sys.modules:
        return
    hidden = tuple(d for d in DRIVERS if d not in sys.modules)
    finder = _RefuseDrivers(hidden)
    sys.meta_path.insert(0, finder)
    try:
        import huey  # noqa: F401 -- imports huey.api, huey.storage
    finally:
        sys.meta_path.remove(finder)


_import_huey()

from huey import RedisHuey, SqliteHuey, signals  # noqa: E402
from huey import storage as _storage  # noqa: E402
from huey.storage import BaseStorage, RedisStorage, SqliteStorage  # noqa: E402
from huey.utils import utcnow  # noqa: E402

_wire_lock = threading.Lock()


def redis_storage() -> None:
    """Make huey's Redis storage usable: import the ``redis`` driver (if huey was imported
    without it) and give huey the four names its ``huey.storage`` module reads. Idempotent.
    Raises ``ImportError`` when ``redis`` is not installed."""
    if _storage.Redis is not None:
        return
    from redis import ConnectionPool, Redis
    from redis.exceptions import ConnectionError, TimeoutError

    with _wire_lock:
        _storage.ConnectionPool = ConnectionPool
        _storage.ConnectionError = ConnectionError
        _storage.TimeoutError = TimeoutError
        RedisStorage.redis_client = Redis  # a class attribute huey set from the absent name
        _storage.Redis = Redis  # last: the check above reads it


__all__ = [
    "BaseStorage",
    "RedisHuey",
    "RedisStorage",
    "SqliteHuey",
    "SqliteStorage",
    "redis_storage",
    "signals",
    "utcnow",
]
