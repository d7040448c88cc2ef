"""Indexes built on a live store without blocking its writers: the order-key index
``messages_ack`` (``ACK``) and the substring index over the rows the trigram index does not
cover (``store.postgres.scan_index.SCAN``). Every read and apply is correct without either
(without ``messages_ack`` the planner reads a late op's session through ``messages_session``;
without the scan index a substring search scans those rows), only slower.

Where a late op goes (``store.apply.order.gaps``) is one probe of ``messages_ack``: a
session's last row not later than an order key.

* A new store (no ``messages`` rows) gets them in its creation transaction (``schema.create``):
  an empty table builds at once.
* A store that has rows and lacks one (one migrated from a layout before it, a ``pg_dump``
  restore, which leaves out an index that was never finished, an index dropped by hand) gets
  it from ``ensure``, run by a writer in a thread of its own (``Builder``): ``CREATE INDEX
  CONCURRENTLY`` outside any transaction, so inserts and reads go on while it builds (the
  build waits for the transactions open when it starts, which are chunks of a few seconds at
  most). A build that was interrupted (its process killed, its connection lost, the server
  restarted) leaves the index ``INVALID``: the planner never uses it, but every insert
  still maintains it; ``ensure`` drops it (``DROP INDEX CONCURRENTLY``) and builds it again.
* One build of an index at a time store-wide: the builder holds a session advisory lock
  (``_BUILD_LOCK``, per index), taken with ``pg_try_advisory_lock`` (never waited for), and
  looks at the index again once it holds the lock. An index found ``INVALID`` while another
  session holds the lock is that session's build in progress and is left alone. The lock ends
  with its session, so a builder that died cannot keep others from building.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from quill.store.errors import StoreError, TransientError
from quill.store.postgres.bounded import LONG_WORK_ANSWER_S
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.extensions import extension_schema


@dataclass(frozen=True)
class Index:
    """An index of ``messages`` built concurrently on a store with rows: ``name``, what
    follows ``ON messages`` in its ``CREATE INDEX`` (``{s}``/``{trgm}``: the quoted store and
    ``pg_trgm`` schemas) and ``without``, what is slower until it is built (logged)."""

    name: str
    definition: str
    without: str

    def create_sql(self, conn: PgConnection, *, concurrently: bool = False) -> str:
        """Its ``CREATE INDEX`` statement for the connection's current schema."""
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        trgm = extension_schema(conn, "pg_trgm") if "{trgm}" in self.definition else ""
        body = self.definition.format(s=_quote(schema), trgm=_quote(trgm))
        how = "CONCURRENTLY" if concurrently else "IF NOT EXISTS"
        return f"CREATE INDEX {how} {self.name} ON messages {body}"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


NAME = "messages_ack"
#: Its definition: session, order key (ack time, tag, arrival), position.
COLUMNS = "session_id, ack_us, ack_tag, ack_at, seq"
#: The statement building it inside a transaction: a new store's creation (empty table).
CREATE_SQL = f"CREATE INDEX IF NOT EXISTS {NAME} ON messages ({COLUMNS})"
ACK = Index(NAME, f"({COLUMNS})", "late ops are placed without the index (slower)")
_BUILD_LOCK = "hashtextextended('quill-index:' || current_schema() || ':{name}', 0)"
#: How often a ``Builder`` looks again while another session builds, or after a failed try (s).
RETRY_S = 30.0


def state(conn: PgConnection, index: Index = ACK) -> str:
    """``"valid"``, ``"invalid"`` (a build in progress, or one interrupted) or ``"missing"``
    for ``index`` in the connection's current schema. Raises the store error tree."""
    row = conn.execute(
        "SELECT i.indisvalid FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "WHERE c.relname = ? AND c.relnamespace = current_schema()::regnamespace",
        (index.name,),
    ).fetchone()
    if row is None:
        return "missing"
    return "valid" if row[0] else "invalid"


def ensure(conn: PgConnection, index: Index = ACK) -> dict[str, Any]:
    """Build ``index`` unless it is valid, without blocking writers (see the module's doc).
    ``conn`` must be outside a transaction; its session holds the build lock while it builds.
    Returns ``{"outcome": "present" | "built" | "rebuilt" | "busy", "seconds": float}``:
    ``busy`` when another session holds the build lock (its build is in progress). Raises the
    store error tree (a cancelled or interrupted build is a ``TransientError`` and leaves an
    ``INVALID`` index, which the next call replaces)."""
    t0 = time.monotonic()
    if state(conn, index) == "valid":
        return {"outcome": "present", "seconds": 0.0}
    lock = _BUILD_LOCK.format(name=index.name)
    if not conn.execute(f"SELECT pg_try_advisory_lock({lock})").fetchone()[0]:
        return {"outcome": "busy", "seconds": 0.0}
    try:
        found = state(conn, index)  # again, holding the lock: a build may have ended meanwhile
        if found == "valid":
            return {"outcome": "present", "seconds": 0.0}
        with conn.longer(LONG_WORK_ANSWER_S):  # a build's time grows with the table
            if found == "invalid":  # no session builds it (we hold the lock): left by a crash
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
            conn.execute(index.create_sql(conn, concurrently=True))
        outcome = "rebuilt" if found == "invalid" else "built"
        return {"outcome": outcome, "seconds": round(time.monotonic() - t0, 3)}
    finally:
        if not conn.closed:
            try:
                conn.execute(f"SELECT pg_advisory_unlock({lock})")
            except StoreError:
                pass  # the session is gone, and its lock with it


class Builder:
    """A thread that runs ``ensure`` for each of ``indexes``, one after the other, on a
    connection of its own until each is valid: again every ``RETRY_S`` while another session
    builds one or after a failure (logged as ``store.order_index_failed``, never raised: the
    store is correct without them). ``url``/``client``: as ``PgConnection``'s. ``stop``
    cancels a build in progress (which leaves an ``INVALID`` index for the next builder) and
    waits for the thread. ``outcome``: index name → ``ensure``'s result, once it is done."""

    def __init__(
        self,
        url: str,
        log: Any,
        client: dict[str, Any] | None = None,
        indexes: tuple[Index, ...] = (ACK,),
    ):
        self.url = url
        self.log = log
        self.client = dict(client or {})
        self.indexes = indexes
        self.outcome: dict[str, dict[str, Any]] = {}
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
        left = list(self.indexes)
        while left and not self._stop.is_set():
            index = left[0]
            try:
                conn = PgConnection(self.url, application_name="quill-order-index", **self.client)
                with self._lock:
                    self._conn = conn
                try:
                    if self._stop.is_set():
                        return
                    got = ensure(conn, index)
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
                    index=index.name,
                    error=f"{type(exc).__name__}: {exc}",
                    transient=isinstance(exc, TransientError),
                    retry_in_s=RETRY_S,
                    why=f"{index.without} until it is built",
                )
            else:
                if got["outcome"] != "busy":
                    self.outcome[index.name] = got
                    if got["outcome"] != "present":
                        self.log.info("store.order_index_built", index=index.name, **got)
                    left.pop(0)
                    continue
            self._stop.wait(RETRY_S)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread: cancel its statement if one runs, wait up to ``timeout`` s."""
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.cancel()
        self._thread.join(timeout)
