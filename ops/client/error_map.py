"""Which public error (``ops.client.errors``) a lower layer's exception becomes, and the
hints that follow the store error's backend and reason. Classified by type only (never by
message text), as ``ops.client.errors``' module doc says."""

from __future__ import annotations

import sys

from quill.home.descriptors import is_exhaustion

#: What to do about a store's ``TransientError``, by its ``reason`` (``quill.store.errors``;
#: PostgreSQL's by SQLSTATE, ``store.postgres.errors.REASONS``). SQLite's ``busy`` keeps
#: ``StoreBusyError.default_hint``.
TRANSIENT_HINTS: dict[str, str] = {
    "unreachable": "the PostgreSQL server of [store] url could not be reached or did not "
    "answer: check that it runs and that this host reaches it (network, proxy or pooler in "
    "between), then retry; pushes are kept in the spool and the writer applies them once it "
    "answers (`quill status` shows its error)",
    "conflict": "retry: a concurrent transaction on the PostgreSQL server conflicted with this "
    "one (serialization failure, deadlock or a lock not available)",
    "cancelled": "retry: the PostgreSQL server cancelled the statement (a statement_timeout, or "
    "an operator's pg_cancel_backend)",
    "read_only": "the PostgreSQL server of [store] url is a read-only standby: point the URL at "
    "the primary (after a failover, the new one), then retry",
    "idle_timeout": "retry: the PostgreSQL server ended a session left idle inside its "
    "transaction (the process was stopped or stalled)",
    "access": "the PostgreSQL server refused this role: check the user and password in [store] "
    "url, the server's pg_hba.conf and the role's privileges on the store's schema",
    "no_database": "create the database [store] url names (createdb) or fix the URL; a running "
    "fleet applies the spool once it exists",
    "resources": "the PostgreSQL server is out of a resource (connections, memory, disk: the "
    "message says which): free it or raise its limit (max_connections), then retry",
}

#: Hints for the store errors whose default names the data dir (SQLite's), when the error came
#: from the PostgreSQL server (``StoreError.backend``).
POSTGRES_HINTS: dict[str, str] = {
    "disk_full": "free disk space on the PostgreSQL server (its data directory or WAL volume); "
    "the writer retries by itself",
    "io": "the PostgreSQL server met an I/O error: check its disks and its log",
    "damaged": "the server found damage in the store (`quill status` shows the halt on every "
    "host): REINDEX a damaged index, or restore the database from PostgreSQL's own backup "
    "(pg_restore, a base backup), then `quill recover` on each host replays its spool",
    "structure": "a table, column or function of the store is missing from the schema [store] "
    "url reaches (dropped, or the URL's search_path names another schema): fix the URL or "
    "restore the database from PostgreSQL's own backup, then `quill recover` on each host",
    "other": "the PostgreSQL server refused it (the message says why); `quill doctor` checks "
    "the store",
}


def from_exception(exc: BaseException) -> errors.QuillError | None:
    """The public error for a lower layer's exception, or None if it is not one Quill knows
    (a bug: let it propagate). Classified by type only; it carries the notes of ``exc`` and
    of its causes (``errors.with_notes``)."""
    error = _public(exc)
    return None if error is None else errors.with_notes(error, exc)


def _public(exc: BaseException) -> errors.QuillError | None:
    if isinstance(exc, errors.QuillError):
        return exc
    spool_errors = sys.modules.get("quill.spool.errors")
    store_errors = sys.modules.get("quill.store.errors")
    queue_errors = sys.modules.get("quill.jobs.errors")
    home = sys.modules.get("quill.home")
    text = str(exc)
    if is_exhaustion(exc, chain=False):  # any layer's: an OSError, the spool's or the store's own
        return errors.OverloadedError(
            exc.strerror if isinstance(exc, OSError) and exc.strerror else text
        )
    if spool_errors is not None and isinstance(exc, spool_errors.SpoolError):
        if isinstance(exc, spool_errors.SpoolFullError):
            return errors.SpoolFullError(text)
        if isinstance(exc, spool_errors.RecordTooLargeError):
            return errors.InvalidInputError(
                text,
                reason="record-too-large",
                hint="split the content over several messages or batches, or raise "
                "[spool] max_record_bytes in config.toml (docs/configuration.md)",
            )
        if isinstance(exc, spool_errors.InvalidOpError):
            return errors.InvalidInputError(
                text, hint="fix the op or message; nothing was appended"
            )
        if isinstance(exc, spool_errors.NotDrainingError):
            return errors.NotDrainingError(text)
        if isinstance(exc, spool_errors.WaitTimeoutError):
            return errors.WaitTimeoutError(text)
        return errors.StorageError(text)
    if store_errors is not None and isinstance(exc, store_errors.StoreError):
        if isinstance(exc, store_errors.BadCursorError):
            return errors.BadCursorError(text, foreign=exc.foreign)
        if isinstance(exc, store_errors.InvalidOpError):
            return errors.InvalidInputError(
                text, reason=exc.reason, hint="fix the op or message; nothing was appended"
            )
        if isinstance(exc, store_errors.DatabaseMissingError):
            return errors.StorageError(
                text,
                hint="run the createdb command above (or CREATE DATABASE as its owner), or fix "
                "[store] url in config.toml; a running fleet applies the spool once it exists",
            )
        pg = getattr(exc, "backend", None) == "postgresql"
        if isinstance(exc, store_errors.TransientError):
            return errors.StoreBusyError(text, hint=TRANSIENT_HINTS.get(getattr(exc, "reason", "")))
        if isinstance(exc, store_errors.HaltedError):
            return errors.StoreDamagedError(
                text,
                hint="run `quill recover`: it rebuilds the store from the newest snapshot "
                "plus the spool and swaps it in (`quill status` shows the halt)",
            )
        if isinstance(exc, store_errors.CorruptError):
            if not pg:
                return errors.StoreDamagedError(text)
            structure = isinstance(exc, store_errors.StructuralError)
            return errors.StoreDamagedError(
                text, hint=POSTGRES_HINTS["structure" if structure else "damaged"]
            )
        if isinstance(exc, store_errors.DiskFullError):
            where = POSTGRES_HINTS["disk_full"] if pg else "free disk space under the data dir"
            return errors.StorageError(text, hint=where)
        if isinstance(exc, store_errors.SpoolMismatchError):
            return errors.StorageError(text, hint=exc.hint)
        if isinstance(exc, store_errors.LeaseHeldError):
            return errors.StorageError(
                text, hint="another process holds the store; stop it (`quill status` names it)"
            )
        if pg:
            io = isinstance(exc, store_errors.StoreIOError)
            return errors.StorageError(text, hint=POSTGRES_HINTS["io" if io else "other"])
        return errors.StorageError(text)
    if queue_errors is not None and isinstance(exc, queue_errors.QueueDamagedError):
        return errors.QueueUnavailableError(
            text, hint="move the damaged queue file aside, then retry (a new one is created)"
        )
    if queue_errors is not None and isinstance(exc, queue_errors.QueueUnavailableError):
        if getattr(exc, "locked", False):
            return errors.QueueUnavailableError(
                text,
                hint=f"another process holds the lock of {exc.where} (`fuser {exc.where}` "
                "names it; a fleet holds it for milliseconds): retry once it ends its "
                "transaction",
            )
        return errors.QueueUnavailableError(text)
    schedule = sys.modules.get("quill.jobs.schedule")
    if schedule is not None and isinstance(exc, schedule.ScheduleUnreadableError):
        hint = (
            "another process holds schedule.db's lock (a sqlite3 shell, a backup; `fuser "
            "schedule.db` names it): retry once it ends its transaction"
            if getattr(exc, "locked", False)
            else None
        )
        return errors.ScheduleUnreadableError(text, damaged=exc.damaged, hint=hint)
    if home is not None and isinstance(exc, home.DataDirError):
        return errors.StorageError(text, hint=exc.hint)
    if home is not None and isinstance(exc, home.ConfigError):
        return errors.StorageError(
            text, hint="fix config.toml (docs/configuration.md lists every key)"
        )
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return errors.StorageError(f"{exc.strerror or exc}{where}")
    return None


# Last, and as a module: ``errors`` imports this module at its own end (its re-export of
# ``from_exception``), so either may be imported first; the names are looked up per call.
from quill.ops.client import errors  # noqa: E402
