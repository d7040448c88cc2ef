"""One leader per cluster, elected by a PostgreSQL session advisory lock.

Store-wide schedules (prune, ANALYZE, amcheck) must fire once per cluster, not once per host
(APScheduler 3 has no cross-process coordination: its FAQ says a job store cannot be shared
by several schedulers). Every host runs a scheduler; only the one holding
``pg_try_advisory_lock(hashtextextended('quill-leader:<role>', 0))`` on its own dedicated
connection runs it, the others stand by and retry. The lock belongs to the connection's
session: when the leader's process dies (even by SIGKILL) the server ends its session and
releases the lock, and a standby takes over at its next try. A session lock does not survive
PgBouncer transaction pooling: connect the leader directly to the server.

A leader that lost its connection is not a leader any more: ``still_leader()`` checks the
session with a round trip and the scheduler stops running jobs when it fails. Two leaders can
overlap for at most one check interval; every job is idempotent, so an overlap costs a
duplicate run, never a wrong result.
"""

from __future__ import annotations

import contextlib

from quill.store.errors import StoreError
from quill.store.postgres.connection import PgConnection

_KEY = "hashtextextended('quill-leader:' || current_schema() || ':' || ?, 0)"


class Leadership:
    """Try to lead ``role`` (e.g. ``scheduler``) on the store at ``url``. Not thread-safe."""

    def __init__(self, url: str, role: str = "scheduler"):
        self.url = url
        self.role = role
        self.conn: PgConnection | None = None

    def try_lead(self) -> bool:
        """True when this process is (now) the leader; False when another session holds it
        or the server cannot be reached (a standby simply tries again later)."""
        try:
            if self.conn is None or self.conn.closed:
                self.conn = PgConnection(self.url, application_name=f"quill-{self.role}-leader")
            return bool(
                self.conn.execute(f"SELECT pg_try_advisory_lock({_KEY})", (self.role,)).fetchone()[
                    0
                ]
            )
        except StoreError:
            self.release()
            return False

    def still_leader(self) -> bool:
        """True while our session is alive: a session advisory lock is held until the session
        ends or unlocks it, so a successful round trip proves we still hold it."""
        if self.conn is None or self.conn.closed:
            return False
        try:
            self.conn.execute("SELECT 1").fetchone()
            return True
        except StoreError:
            self.release()
            return False

    def release(self) -> None:
        """Give up leadership (closing the session releases the lock)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
