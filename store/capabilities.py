"""What each kind of store can do, described on classes: readable without connecting.

``store.factory.capabilities(settings)`` returns one of these classes for a data dir (the
factory is the only place that reads ``[store] url``); ``SqliteStore`` and ``PgStore`` inherit
their flags from them, so an opened store and its class give the same answers. Callers above
the store ask a flag instead of looking at the URL:

* ``kind``: ``"sqlite"`` or ``"postgres"``; the value ``JobSpec.backend`` names and status
  shows (compared with a job's backend, never used to pick code paths);
* ``local_file``: the store is ``state.db`` in the data dir, so snapshots, a spool replay
  into a file, ``recover`` from snapshot + spool and a purge of snapshots apply to it;
* ``cluster``: several hosts share the store, so one scheduler leads (leader election),
  schedules live in the store's database and per-host jobs fan out to every host;
* ``maintenance_jobs``: the maintenance the store runs (``contract.MAINTENANCE_JOBS``).
"""

from __future__ import annotations

from quill.store.contract import MAINTENANCE_JOBS


class SqliteCapabilities:
    """The embedded SQLite store: the file ``state.db`` of one data dir, one host."""

    kind = "sqlite"
    local_file = True
    cluster = False
    maintenance_jobs: tuple[str, ...] = MAINTENANCE_JOBS["sqlite"]


class PostgresCapabilities:
    """The shared PostgreSQL store: one database, any number of hosts' writers."""

    kind = "postgres"
    local_file = False
    cluster = True
    maintenance_jobs: tuple[str, ...] = MAINTENANCE_JOBS["postgres"]


#: Either capability class: what ``store.factory.capabilities`` returns.
Capabilities = type[SqliteCapabilities] | type[PostgresCapabilities]
