"""The order-key index ``messages_ack``, built on a live store without blocking its writers.

Where a late op goes (``store.apply.order.gaps``) is one probe of this index: a session's last
row not later than an order key. Every read and apply is correct without it (the planner then
reads the session's rows through ``messages_session``), only slower for late ops.

* A new store (no ``messages`` rows) gets it in its creation transaction (``schema.create``):
  an empty table builds at once.
* A store that has rows and lacks it (one migrated from a layout before it, a ``pg_dump``
  restore, which leaves out an index that was never finished, an index dropped by hand) gets
  it from ``ensure``, run by a writer in a thread of its own (``Builder``): ``CREATE INDEX
  CONCURRENTLY`` outside any transaction, so inserts and reads go on while it builds (the
  build waits for the transactions open when it starts, which are chunks of a few seconds at
  most). A build that was interrupted (its process killed, its connection lost, the server
  restarted) leaves the index ``INVALID``: the planner never uses it, but every insert
  still maintains it; ``ensure`` drops it (``DROP INDEX CONCURRENTLY``) and builds it again.
* One build at a time store-wide: the builder holds a session advisory lock
  (``_BUILD_LOCK``), taken with ``pg_try_advisory_lock`` (never waited for), and looks at
  the index again once it holds the lock. An index found ``INVALID`` while another session
  holds the lock is that session's build in progress and is left alone. The lock ends with
  its session, so a builder that died cannot keep others from building.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from quill.store.errors import StoreError, TransientError
from quill.store.postgres.connection import PgConnection

NAME = "messages_ack"
#: Its definition: session, order key (ack time, tag, arrival), position.
COLUMNS = "session_id, ack_us, ack_tag, ack_at, seq"
#: The statement building it inside a transaction: a new store's creation (empty table).
CREATE_SQL = f"CREATE INDEX IF NOT EXISTS {NAME} ON messages ({COLUMNS})"
_BUILD_LOCK = "hashtextextended('quill-index:' || current_schema() || ':{name}', 0)"
#: How often a ``Builder`` looks again while another session builds, or after a failed try (s).
RETRY_S = 30.0


def state(conn: PgConnection) -> str:
    """``"valid"``, ``"invalid"`` (a build in progress, or one interrupted) or ``"missing"``
    for the index in the connection's current schema. Raises the store error tree."""
    row = conn.execute(
        "SELECT i.indisvalid FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "WHERE c.relname = ? AND c.relnamespace = current_schema()::regnamespace",
        (NAME,),
    ).fetchone()
    if row is None:
        return "missing"
    return "valid" if row[0] else "invalid"


def ensure(conn: PgConnection) -> dict[str, Any]:
    """Build the index unless it is valid, without blocking writers (see the module's doc).
    ``conn`` must be outside a transaction; its session holds the build lock while it builds.
    Returns ``{"outcome": "present" | "built" | "rebuilt" | "busy", "seconds": float}``:
    ``busy`` when another session holds the build lock (its build is in progress). Raises the
    store error tree (a cancelled or interrupted build is a ``TransientError`` and leaves an
    ``INVALID`` index, which the next call replaces)."""
    t0 = time.monotonic()
    if state(conn) == "valid":
        return {"outcome": "present", "seconds": 0.0}
    lock = _BUILD_LOCK.format(name=NAME)
    if not conn.execute(f"SELECT pg_try_advisory_lock({lock})").fetchone()[0]:
        return {"outcome": "busy", "seconds": 0.0}
    try:
        found = state(conn)  # again, holding the lock: a build may have ended meanwhile
        if found == "valid":
            return {"outcome": "present", "seconds": 0.0}
        if found == "invalid":  # no session builds it (we hold the lock): left by a crash
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        conn.execute(f"CREATE INDEX CONCURRENTLY {NAME} ON messages ({COLUMNS})")
        outcome = "rebuilt" if found == "invalid" else "built"
        return {"outcome": outcome, "seconds": round(time.monotonic() - t0, 3)}
    finally:
        if not conn.closed:
            try:
                conn.execute(f"SELECT pg_advisory_unlock({lock})")
            except StoreError:
                pass  # the session is gone, and its lock with it


class Builder:
    """A thread that runs ``ensure`` on a connection of its own until the index is valid:
    again every ``RETRY_S`` while another session builds or after a failure (logged as
    ``store.order_index_failed``, never raised: the store is correct without the index).
    ``url``/``client``: as ``PgConnection``'s. ``stop`` cancels a build in progress (which
    leaves an ``INVALID`` index for the next builder) and waits for the thread."""

    def __init__(self, url: str, log: Any, client: dict[str, Any] | None = None):
        self.url = url
        self.log = log
        self.client = dict(client or {})
        self.outcome: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._conn: PgConnection | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="quill-order-index", daemon=True)

    def start(self) -> Builder:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn = PgConnection(self.url, application_name="quill-order-index", **self.client)
                with self._lock:
                    self._conn = conn
                try:
                    if self._stop.is_set():
                        return
                    got = ensure(conn)
                finally:
                    with self._lock:
                        self._conn = None
                    try:
                        conn.close()
                    except StoreError:
                        pass  # already gone: nothing of ours is left on the server
            except StoreError as exc:
                if self._stop.is_set():
                    return
                self.log.warning(
                    "store.order_index_failed",
                    index=NAME,
                    error=f"{type(exc).__name__}: {exc}",
                    transient=isinstance(exc, TransientError),
                    retry_in_s=RETRY_S,
                    why="late ops are placed without the index (slower) until it is built",
                )
            else:
                if got["outcome"] != "busy":
                    self.outcome = got
                    if got["outcome"] != "present":
                        self.log.info("store.order_index_built", index=NAME, **got)
                    return
            self._stop.wait(RETRY_S)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread: cancel its statement if one runs, wait up to ``timeout`` s."""
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.cancel()
        self._thread.join(timeout)
