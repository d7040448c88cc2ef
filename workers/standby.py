"""A scheduler that does not lead the cluster: why, and when it tries the lease again.

On a shared PostgreSQL store one scheduler leads (``store.postgres.election``); the others,
and a leader that lost its lease or met an unreachable store, stand by in the same process
(``workers.scheduler.run``). ``store_unreachable`` tells a store outage (wait it out) from
any other failure (raised: the scheduler fails loudly), by type and SQLSTATE only.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import exc as sa_exc

from quill.jobs.jobstore import storage_trouble
from quill.store.errors import TransientError

#: A standby scheduler (another host leads the cluster) tries to take over this often (s).
STANDBY_RETRY_S = 2.0
#: While the store cannot be reached, the standby's pause between tries doubles up to this (s).
OUTAGE_RETRY_MAX_S = 8.0


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (from the election or the shared job store) means the PostgreSQL store
    cannot be reached now, by type: Quill's ``TransientError`` (SQLSTATE classes 08, 57, …,
    or no answer), or a connection failure under SQLAlchemy (``jobs.jobstore.storage_trouble``).
    The scheduler then waits for the store as a standby instead of exiting. A driver error
    under SQLAlchemy is classified as the store classifies it (``store.postgres.errors``)."""
    if isinstance(exc, TransientError) or storage_trouble(exc):
        return True
    orig = getattr(exc, "orig", None)
    if isinstance(exc, sa_exc.DBAPIError) and orig is not None:
        import psycopg

        from quill.store.postgres.errors import classify

        return isinstance(orig, psycopg.Error) and classify(orig) is TransientError
    return False


class Standby:
    """Why this host's scheduler is not leading, as its status says it
    (``{"standby_reason", "store_error", "store_unreachable_since"}``) and when to try the
    lease again: every ``STANDBY_RETRY_S`` while another host leads, backing off (doubling
    to ``OUTAGE_RETRY_MAX_S``) while the store cannot be reached."""

    def __init__(self) -> None:
        self.reason = "another host leads the cluster"
        self.error: str | None = None
        self.since: float | None = None  # epoch s: the store unreachable since
        self.wait_s = STANDBY_RETRY_S

    def unreachable(self, exc: BaseException, log: Any) -> None:
        if self.since is None:
            self.since, self.wait_s = time.time(), STANDBY_RETRY_S
            log.error("scheduler.store_unreachable", error=str(exc))
        else:
            self.wait_s = min(self.wait_s * 2, OUTAGE_RETRY_MAX_S)
        self.reason, self.error = "the store cannot be reached", str(exc)

    def reachable(self, log: Any) -> None:
        if self.since is not None:
            log.warning("scheduler.store_back", down_s=round(time.time() - self.since, 1))
        self.reason, self.error, self.since = "another host leads the cluster", None, None
        self.wait_s = STANDBY_RETRY_S

    def fields(self) -> dict[str, Any]:
        return {
            "standby_reason": self.reason,
            "store_error": self.error,
            "store_unreachable_since": self.since,
        }
