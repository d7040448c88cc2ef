"""The one way the ops layer opens the configured store for reading.

A data dir's store is either the embedded SQLite file (``state.db``) or, with ``[store] url``
set, the shared PostgreSQL store (docs/architecture.md, "Backends"). Every read — CLI
commands, the client library, ``wait``, the HTTP API, the dashboard, status and doctor —
opens it here, so no command can read an empty ``state.db`` while the rows are in
PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from quill.store import factory
from quill.store.read.reader import Reader


def open_reader(cfg: Any) -> Reader:
    """A read-only ``Reader`` on ``cfg``'s store (``store.factory.open_reader``):
    ``store.postgres.PgReader`` for ``[store] url`` (with this data dir's spool id, so
    ``figures()["cursor"]`` is this host's cursor) or ``store.read.reader.Reader`` on
    ``cfg.state_db``. Raises ``store.errors.CantOpenError`` when the store does not exist yet
    (no ``state.db``, or a database without Quill's schema), and the rest of the store error
    tree otherwise (an unreachable server is ``TransientError``)."""
    return factory.open_reader(cfg)


def where(cfg: Any) -> str:
    """Where the store lives, for messages: ``state.db``'s path, or the PostgreSQL URL with
    its password removed (``store.factory.location``)."""
    return factory.location(cfg)


def lost_store(cfg: Any) -> Any:
    """A ``StoreMissingError`` (a ``StoreDamagedError``: exit 1, hint ``quill recover``)
    when ``cfg``'s SQLite store file is gone and the spool alone no longer holds its history
    (a snapshot exists or the spool starts past segment 1:
    ``store.sqlite.store.history_missing``, the test the writer halts on), else None: a
    store that does not exist yet is "nothing applied", an empty answer; a lost one is not,
    and an empty listing would hide it."""
    if not factory.capabilities(cfg).local_file:
        return None
    from quill.ops.client.errors import StoreMissingError
    from quill.store.sqlite.store import history_missing

    why = history_missing(cfg.state_db, cfg.spool_dir, cfg.snapshots_dir)
    if why is None:
        return None
    return StoreMissingError(why, hint="`quill recover` (with `quill run` stopped)")
