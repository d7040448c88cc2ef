"""Maintenance of a shared PostgreSQL store (docs/backends.md, "Maintenance").

PostgreSQL replaces SQLite's maintenance: autovacuum reclaims dead rows (the store sets a 2 %
scale factor on ``messages``; there is no VACUUM job), GIN indexes need no FTS optimize or
merge, and there is no WAL checkpoint to force. What remains is scheduled once per cluster by
the elected scheduler and run by any host's consumer:

* ``pg_analyze`` — ANALYZE after purges (fresh planner statistics; figures: dead tuples);
* ``pg_integrity_check`` — amcheck: ``bt_index_check(index, heapallindexed => true)`` on
  every B-tree index and ``verify_heapam`` on every table, both safe on a live primary.
Both are idempotent: huey on Redis delivers at most once, and a duplicate run is harmless.
"""

from __future__ import annotations

from typing import Any


def _backend(store_url: str, client: dict[str, Any] | None) -> Any:
    # The maintenance connection has no spool: it never applies ops. (psycopg is loaded only
    # by processes that use a PostgreSQL store: store.factory imports it on demand.)
    from quill.store.factory import open_url

    return open_url(store_url, None, "maintenance", client=client)


def pg_analyze(store_url: str, client: dict[str, Any] | None = None) -> dict[str, Any]:
    """ANALYZE the store's tables; figures: ``tables``, ``dead_tuples`` per table.
    ``client``: libpq bounds on the connection (``Settings.pg_client_params``)."""
    backend = _backend(store_url, client)
    try:
        return backend.maintenance("analyze")
    finally:
        backend.close()


def pg_integrity_check(store_url: str, client: dict[str, Any] | None = None) -> dict[str, Any]:
    """amcheck over the store; figures: ``ok``, ``problems``, ``indexes_checked``,
    ``tables_checked``, ``tables`` (their names). When damage is found the store is halted for
    every host's writer (``store.postgres.halt``: the same sticky halt SQLite's check causes,
    store-wide) and ``CorruptError`` is raised listing the problems (the run is recorded as an
    error and shows in ``quill jobs``, ``status`` and ``doctor``)."""
    import time

    from quill.store.errors import CorruptError
    from quill.store.postgres import halt

    backend = _backend(store_url, client)
    try:
        result = backend.maintenance("integrity_check")
        if not result["ok"]:
            backend.run_job(
                halt.declare, "amcheck", "; ".join(result["problems"][:10]), time.time()
            )
    finally:
        backend.close()
    if not result["ok"]:
        err = CorruptError(
            f"amcheck found damage (writes halted on every host): {result['problems'][:10]}"
        )
        err.backend = "postgresql"  # its hint is the server's (ops.client.errors)
        raise err
    return result
