"""One leader per cluster, elected by a lease row with a deadline in the store.

Store-wide schedules (prune, ANALYZE, amcheck) must fire once per cluster, not once per host
(APScheduler 3 has no cross-process coordination: its FAQ says a job store cannot be shared
by several schedulers). Every host runs a scheduler; only the one holding the ``leader_lease``
row of its role (``store.schema.LEADER_LEASE``) runs it, the others stand by and retry.

The rule, with its bounds (``LEASE_S``, ``RENEW_S``, ``MARGIN_S``):

* **Deadlines are the server's clock.** Taking or renewing the lease sets ``expires_at`` to
  the server's ``now() + LEASE_S``; a standby takes the row only when the server's ``now()`` is
  past it. No two hosts' clocks are ever compared.
* **The leader judges itself by its own clock.** It counts its lease from the moment it *sent*
  the statement that took or renewed it (the server's ``now()`` for that statement is later),
  on ``CLOCK_BOOTTIME``, which keeps counting while the process is stopped or the machine
  sleeps. It acts as leader only until ``sent + LEASE_S - MARGIN_S``: it stops at least
  ``MARGIN_S`` before any standby can take over, as long as the two clocks' rates differ by
  less than ``MARGIN_S / LEASE_S`` (7 %; NTP keeps them within 0.05 %).
* **Renewal is bounded.** The leader renews every ``RENEW_S`` on its own connection whose every
  wait is bounded (``TCP_BOUNDS``: connect timeout, TCP keepalives, ``tcp_user_timeout``;
  ``SESSION_SETTINGS``: statement and lock timeouts), so a renewal over a dead network fails
  within ``RENEWAL_BOUND_S`` instead of waiting for TCP's own timeouts (hours). A failed
  renewal is retried (on a new connection) until the lease runs out; a renewal the server
  refuses (another holder, or the row expired) ends leadership at once.
* **Taking it back.** A process whose lease row still names it (its release could not reach
  the server, or it stopped leading on an unreachable job store) takes it again at once: no
  other process can have led meanwhile, since the row would name that one.
* **Takeover.** A leader that dies, hangs, is stopped (SIGSTOP, a closed laptop lid) or is cut
  off stops renewing; its row expires at most ``LEASE_S`` after its last renewal and a standby
  retrying every ``STANDBY_RETRY_S`` (``workers.standby``) takes over within
  ``LEASE_S + STANDBY_RETRY_S`` (17 s) of the leader's last renewal. A leader that stops
  gracefully (``release``) expires its row at once: the next standby try takes over.

``term`` grows by one at every change of holder (a fencing token, shown for diagnosis). What the
lease cannot exclude: a leader stopped between its ``holds()`` check and the action it guards
(a few milliseconds) acts once after resuming; every scheduled job is idempotent, so that
costs a duplicate run, never a wrong result.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid

from quill.store.errors import StoreError
from quill.store.postgres import schema
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.session_settings import WRITER_SESSION

#: How long a taken or renewed lease lasts on the server's clock (s).
LEASE_S = 15.0
#: The leader renews this often (s): four tries before its lease runs out.
RENEW_S = 3.0
#: The leader stops acting this long before its lease expires on the server (s).
MARGIN_S = 1.0
#: Bounds on the network waits of a client session (libpq connection parameters): a
#: statement on a dead network fails within ~4 s (``tcp_user_timeout``: data left
#: unacknowledged; keepalives: 2 s idle, then 2 probes 1 s apart, when nothing is in flight),
#: a connection attempt within 3 s.
TCP_BOUNDS: dict[str, object] = {
    "connect_timeout": 3,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": 4000,
}
#: The leader's session, server side: a statement is cancelled after 2 s, a lock wait given
#: up after 1 s.
SESSION_SETTINGS: dict[str, str] = {
    "statement_timeout": "2000",
    "lock_timeout": "1000",
    "idle_in_transaction_session_timeout": "5000",
}
#: Seconds one round trip of the leader's session may take (``store.postgres.bounded``): a
#: server or proxy that holds the connection without answering (the kernel still
#: acknowledging, so ``TCP_BOUNDS`` never fire) fails a renewal within it too; twice the
#: statement timeout, so the server's own cancel is what a slow statement meets first.
ANSWER_S = 4.0
#: Upper bound of one renewal or takeover attempt that cannot reach the server (s):
#: connect timeout plus the TCP bound, with slack for the kernel's retransmission timer.
RENEWAL_BOUND_S = 8.0

_NOW = "extract(epoch FROM now())::float8"
_TAKE = f"""
INSERT INTO leader_lease AS l (role, holder, term, acquired_at, renewed_at, expires_at)
VALUES (?, ?, 1, {_NOW}, {_NOW}, {_NOW} + ?)
ON CONFLICT (role) DO UPDATE
    SET holder = excluded.holder, term = l.term + 1, acquired_at = excluded.acquired_at,
        renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
    WHERE l.expires_at < excluded.acquired_at OR l.holder = excluded.holder
RETURNING term"""
_RENEW = f"""
UPDATE leader_lease SET renewed_at = {_NOW}, expires_at = {_NOW} + ?
WHERE role = ? AND holder = ? AND term = ? AND expires_at > {_NOW}
RETURNING term"""
_RELEASE = f"""
UPDATE leader_lease SET expires_at = {_NOW}
WHERE role = ? AND holder = ? AND term = ? AND expires_at > {_NOW}"""


def clock() -> float:
    """Seconds on a clock that never goes back and keeps counting while this process is
    stopped or the machine sleeps (``CLOCK_BOOTTIME``; ``time.monotonic`` where absent)."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


class Leadership:
    """Try to lead ``role`` (e.g. ``scheduler``) on the store at ``url``. Not thread-safe,
    except ``holds()`` (a clock read), which any thread may call.

    ``lease_s``/``renew_s``/``margin_s`` default to ``LEASE_S``/``RENEW_S``/``MARGIN_S``
    (seconds). Raises ``ValueError`` unless ``0 < renew_s < lease_s - margin_s``."""

    def __init__(
        self,
        url: str,
        role: str = "scheduler",
        *,
        lease_s: float = LEASE_S,
        renew_s: float = RENEW_S,
        margin_s: float = MARGIN_S,
    ):
        if not 0 < renew_s < lease_s - margin_s or margin_s < 0:
            raise ValueError(f"need 0 < renew_s < lease_s - margin_s: {renew_s}, {lease_s}")
        self.url = url
        self.role = role
        self.lease_s, self.renew_s, self.margin_s = lease_s, renew_s, margin_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self.term: int | None = None
        self.conn: PgConnection | None = None
        #: ``clock()`` until which this process may act as leader; when it last sent a
        #: renewal that succeeded.
        self._valid_until = 0.0
        self._renewed_at = 0.0
        #: Why the last ``try_lead`` could not reach the server (the ``StoreError``), else
        #: None: a standby's status tells "unreachable" from "another process leads".
        self.unreachable: StoreError | None = None

    def _connect(self) -> PgConnection:
        """The leader's bounded session; a store not created (or migrated) yet is brought to
        the current schema first, as its writer would, on a connection of its own (a
        migration may outlast the leader session's statement timeout)."""
        if self.conn is None or self.conn.closed:
            conn = PgConnection(
                self.url,
                application_name=f"quill-{self.role}-leader",
                settings=SESSION_SETTINGS,
                answer_timeout=ANSWER_S,
                **TCP_BOUNDS,
            )
            try:
                if conn.execute("SELECT to_regclass('leader_lease')").fetchone()[0] is None:
                    migrator = PgConnection(
                        self.url,
                        application_name="quill-migrate",
                        settings=WRITER_SESSION,
                        **TCP_BOUNDS,
                    )
                    try:
                        schema.create(migrator)
                    finally:
                        migrator.close()
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        return self.conn

    def _close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def holds(self) -> bool:
        """True while this process may act as leader: it took or renewed the lease and the
        lease (counted from when that statement was sent, minus ``margin_s``) has not run out.
        No I/O: safe to call from any thread, right before each action it guards."""
        return self.term is not None and clock() < self._valid_until

    def try_lead(self) -> bool:
        """Take the lease if nobody holds an unexpired one. True when this process is (now)
        the leader; False when another process holds it or the server cannot be reached
        within ``RENEWAL_BOUND_S`` (a standby simply tries again later)."""
        if self.holds():
            return True
        self.term = None
        sent = clock()
        try:
            row = self._connect().execute(_TAKE, (self.role, self.holder, self.lease_s)).fetchone()
        except StoreError as exc:
            self._close()
            self.unreachable = exc
            return False
        self.unreachable = None
        if row is None:
            return False
        self.term, self._renewed_at = int(row[0]), sent
        self._valid_until = sent + self.lease_s - self.margin_s
        return self.holds()

    def still_leader(self) -> bool:
        """Renew the lease when ``renew_s`` have passed since the last renewal, and return
        ``holds()``. Returns within ``RENEWAL_BOUND_S`` even when the server is unreachable.
        A renewal the server refuses (the lease expired or another process holds it) ends
        leadership for good: this object then answers False until ``try_lead`` wins again."""
        if not self.holds():
            self.term = None
            return False
        if clock() - self._renewed_at < self.renew_s:
            return True
        sent = clock()
        try:
            row = (
                self._connect()
                .execute(_RENEW, (self.lease_s, self.role, self.holder, self.term))
                .fetchone()
            )
        except StoreError:
            self._close()  # retried on a new connection at the next call, while the lease lasts
            return self.holds()
        if row is None:
            self.term = None
            return False
        self._renewed_at = sent
        self._valid_until = sent + self.lease_s - self.margin_s
        return self.holds()

    def release(self) -> None:
        """Give up leadership: expire our row (so a standby takes over at its next try) and
        close the session. Never raises; bounded like a renewal."""
        if self.term is not None and self.conn is not None and not self.conn.closed:
            with contextlib.suppress(StoreError):
                self.conn.execute(_RELEASE, (self.role, self.holder, self.term))
        self.term = None
        self._valid_until = 0.0
        self._close()
