"""The store's error tree, classified by apsw exception type (= SQLite primary result code),
never by message text.

    StoreError
    ├── TransientError        SQLITE_BUSY / SQLITE_LOCKED, a PostgreSQL server out of reach
    │   │                     (``reason`` says which): retry later
    │   ├── DescriptorsExhaustedError  EMFILE / ENFILE (by errno) while opening: retry later
    │   └── DatabaseMissingError  (PostgreSQL) the URL's database is not on the server (by a
    │                             pg_database lookup): retried, it goes on once created
    ├── CorruptError          SQLITE_CORRUPT: sticky halt (architecture.md "Corruption stops
    │   │                     writes, never loses data")
    │   ├── StructuralError   (PostgreSQL) a table/column/function of the store is missing
    │   ├── DamagedValueError a JSON value the store wrote no longer parses (``stored_json``)
    │   └── NotADatabaseError SQLITE_NOTADB
    ├── DiskFullError         SQLITE_FULL: pause the drain until space returns
    ├── StoreIOError          SQLITE_IOERR
    ├── ReadOnlyError         SQLITE_READONLY
    ├── CantOpenError         SQLITE_CANTOPEN
    ├── ReplacedError         state.db or its WAL replaced/removed under the writer: sticky halt
    ├── HaltedError           the writer has halted on this file (run/halt.json): a snapshot of
    │                         it would copy what the writer refused; `quill recover`
    │                         (ReplacedError and HaltedError are CorruptErrors: StoreDamagedError)
    ├── LeaseHeldError        another process holds the writer lease
    ├── SpoolMismatchError    this spool's place in the store is not its own: the writer halts
    │   │                     (this host only) and applies nothing
    │   ├── SpoolClaimedError   another live holder claims this spool id (a copied data dir)
    │   ├── CursorMismatchError the store's cursor does not belong to this spool
    │   ├── HistoryNotInSpoolError no cursor, and the spool's first segments were collected
    │   └── SpoolGapError       segments the store had not applied yet were deleted
    ├── InvalidOpError        an op's data breaks the rules: the record is quarantined
    └── BadCursorError        a page cursor that is malformed, or of another listing or query
                              (``store.paging``): nothing was read
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from quill.home.descriptors import EXHAUSTED_ERRNOS, exhausted_now


class StoreError(Exception):
    """Base of every error the ``store`` package raises. ``backend``: ``"postgresql"`` on an
    error mapped from the PostgreSQL driver (``store.postgres.errors.mapped``), else None
    (SQLite's, or no backend's own): what to do about it depends on where it happened."""

    backend: str | None = None


class TransientError(StoreError):
    """The database was busy or locked, or its server out of reach; the operation may succeed
    if retried. ``reason``: why, by result code (SQLite's: ``"busy"``; PostgreSQL's by
    SQLSTATE, ``store.postgres.errors.REASONS``: ``"unreachable"``, ``"conflict"``, …), so
    what to do about it can be told without the message text."""

    reason: str = "busy"


class DescriptorsExhaustedError(TransientError):
    """Opening the store (a SQLite file, its WAL or index, or a PostgreSQL connection)
    needed a file descriptor and none was left (errno EMFILE or ENFILE,
    ``quill.home.descriptors``): the store is there and fine, the process is overloaded;
    retry later. Never a ``CantOpenError``, which callers read as "no store yet"."""

    descriptors_exhausted = True

    @classmethod
    def of(cls, system_errno: int) -> DescriptorsExhaustedError:
        """The error for exhaustion errno ``system_errno`` (EMFILE or ENFILE)."""
        return cls(f"no file descriptor left to open the store ({errno.errorcode[system_errno]})")


class DatabaseMissingError(TransientError):
    """(PostgreSQL) The store URL names a database the server does not have: found by looking
    the name up in ``pg_database`` over a connection to the server's maintenance database,
    never by the text of the failed connection's message (libpq gives it no SQLSTATE).

    A ``TransientError``: the writer keeps retrying, so the fleet goes on by itself once an
    operator creates the database. ``database``, ``host``, ``port``, ``user``: the target as
    libpq resolved it; ``createdb``: the command that creates it."""

    backend = "postgresql"

    def __init__(self, database: str, host: str, port: str, user: str):
        self.database, self.host, self.port, self.user = database, host, port, user
        self.createdb = "createdb " + " ".join(
            shlex.quote(a) for a in ("-h", host, "-p", port, "-U", user, database)
        )
        super().__init__(
            f'database "{database}" does not exist on the PostgreSQL server at {host}:{port} '
            f"(create it: `{self.createdb}`)"
        )


def cant_open_cause(path: Path | str, system_errno: int | None = None) -> StoreError | None:
    """``DescriptorsExhaustedError`` when a failed open of ``path`` was descriptor
    exhaustion, else None. Classified by errno: ``system_errno`` (SQLite's
    ``sqlite3_system_errno`` of a connection that exists) or, when the open itself failed
    and SQLite kept no handle, the errno of opening ``path`` again now."""
    if system_errno is None:
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            system_errno = exc.errno
    if system_errno in EXHAUSTED_ERRNOS:
        return DescriptorsExhaustedError.of(system_errno)
    return None


class CorruptError(StoreError):
    """Structural damage (SQLITE_CORRUPT). The writer halts; recovery rebuilds the store."""


class DamagedValueError(CorruptError):
    """A value the store wrote reads back as nothing it writes: a JSON column (message parts,
    tool calls, extra fields, session meta, usage, a blob) that no longer parses. SQLite keeps
    no checksum of a row's bytes, so a damaged page inside a value is found only when the value
    is read; the reader names the value instead of raising a decoding error."""


def stored_json(text: str | bytes, what: str) -> Any:
    """``json.loads(text)`` of a JSON text the store wrote; ``what`` names the value for the
    error (``"extra of message 12"``). Raises ``DamagedValueError`` when it does not parse
    (the store never writes such a text: its bytes were damaged)."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedValueError(f"the stored {what} is damaged (not JSON: {exc})") from exc


class StructuralError(CorruptError):
    """The database does not hold the store Quill made: a table, column, function or schema
    it needs is missing (PostgreSQL SQLSTATE 42P01, 42703, 42883, 42704, 3F000). No retry
    or quarantine can help, so the writer takes the sticky halt until an operator repairs
    the store (``quill recover``)."""


class NotADatabaseError(CorruptError):
    """The file is not a SQLite database (SQLITE_NOTADB), e.g. overwritten."""


class DiskFullError(StoreError):
    """SQLITE_FULL: the disk (or a size limit) is full."""


class StoreIOError(StoreError):
    """SQLITE_IOERR: the OS reported an I/O error."""


class ReadOnlyError(StoreError):
    """SQLITE_READONLY: a write was attempted on a read-only database or connection."""


class SharedMemoryError(StoreIOError):
    """SQLite's shared-memory WAL index (``state.db-shm``) is unusable: wrong type, owner or
    permissions, or SQLite reports an shm-specific result code (READONLY_CANTINIT,
    READONLY_CANTLOCK, IOERR_SHMOPEN/SHMSIZE/SHMLOCK/SHMMAP). Not damage: the fix is to
    stop Quill and delete (or chmod) the -shm file."""


class CantOpenError(StoreError):
    """SQLITE_CANTOPEN: the database file (or its directory) cannot be opened."""


class ReplacedError(CorruptError):
    """``state.db`` or its ``-wal`` was replaced or removed under the writer. Sticky, like
    corruption: writing on would put rows in a file nobody reads."""


class HaltedError(CorruptError):
    """The writer has a sticky halt on this very store file (``run/halt.json``, read by
    ``quill.home.read_halt``): a snapshot of it would be a verified copy of a file the writer
    refused (a replaced ``state.db``: another store's rows), which ``quill recover`` would
    then pick as its newest snapshot. ``halt`` is the recorded cause."""

    def __init__(self, message: str, halt: dict):
        super().__init__(message)
        self.halt = halt


class LeaseHeldError(StoreError):
    """Another live process holds the lease. ``holder`` describes it (pid, start time)."""

    def __init__(self, lock_path: str, holder: dict):
        desc = ", ".join(f"{k}={v}" for k, v in holder.items()) or "unknown holder"
        super().__init__(f"{lock_path} is held by another process ({desc})")
        self.lock_path = lock_path
        self.holder = holder


class SpoolMismatchError(StoreError):
    """This spool's place in the store is not its own (``SpoolClaimedError``,
    ``CursorMismatchError``, ``HistoryNotInSpoolError``): applying would skip or double
    records, so the writer applies nothing and halts on its own host (not store-wide).
    ``hint`` says what to do."""

    hint = ""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class SpoolClaimedError(SpoolMismatchError):
    """Another holder (another data dir, host or boot) holds a live claim on this spool id in
    the shared store (``store.postgres.claims``): typically a copied data dir. ``claim`` is
    the holder's row (``holder``, ``host``, ``path``, ``pid``, ``deadline`` epoch s)."""

    hint = (
        "if this data dir is a copy of another host's, give it its own id with "
        "`quill spool reidentify` (every record of its spool is then applied once, "
        "under the new id)"
    )

    def __init__(self, message: str, claim: dict | None = None, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.claim = claim or {}


class CursorMismatchError(SpoolMismatchError):
    """The cursor the store holds for this spool does not land on this spool's records
    (``spool.cursor_proof``): a cursor shared, copied or restored from another spool."""

    hint = (
        "the store's cursor for this spool id is another spool's: on a shared store, "
        "`quill spool reidentify` applies this spool once under a new id; on SQLite, "
        "`quill recover` rebuilds the store from a snapshot and this spool"
    )

    @staticmethod
    def next_for(cluster: bool) -> str:
        """The command that ends the refusal, for the writer's refusal and status/doctor:
        on a shared store (``cluster``) this spool under a new id, on SQLite a rebuild."""
        return "quill spool reidentify" if cluster else "quill recover"


class HistoryNotInSpoolError(SpoolMismatchError):
    """The store holds no cursor for this spool (a new store: the switch to PostgreSQL, an
    empty file put in place) while the spool's first segments were collected: starting at
    the spool's oldest segment would silently leave that history out. ``first_segment``:
    the spool's oldest segment."""

    hint = (
        "carry the history over: `quill export` it from the old store and `quill import` it "
        'into this one (README, "Running on several machines"), or on SQLite `quill '
        "recover` from a snapshot; then `quill recover --accept-loss` starts this store at "
        "the spool's oldest segment"
    )

    #: The commands, for ``status``/``doctor`` and the writer's refusal.
    next_step = (
        "`quill export` the history from the old store and `quill import` it here, "
        "then `quill recover --accept-loss`"
    )

    def __init__(self, message: str, first_segment: int, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.first_segment = first_segment


class SpoolGapError(SpoolMismatchError):
    """The spool segment holding the store's cursor is gone, with records past the cursor
    that were never applied (its size recorded when sealed is past the cursor), or whole
    segments after it are gone: spool GC never deletes a segment the cursor has not passed,
    so they were deleted by something else. Moving on to the next segment left would drop
    acknowledged records without a word. ``next_segment``: the oldest segment after the gap."""

    hint = (
        "restore the deleted segment files into the spool if you have them; else `quill "
        "recover --accept-loss` accepts the loss and the writer goes on at the next segment"
    )
    next_step = "quill recover --accept-loss"

    def __init__(self, message: str, next_segment: int, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.next_segment = next_segment


class InvalidOpError(StoreError, ValueError):
    """An op whose data cannot be applied (missing/invalid fields). ``reason`` is a short tag."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BadCursorError(StoreError, ValueError):
    """A page cursor (``store.paging``) that this listing cannot continue from: not a cursor,
    or one of another listing or query (``foreign`` True: e.g. a search cursor given to
    another query). Nothing was read."""

    def __init__(self, message: str, *, foreign: bool = False):
        super().__init__(message)
        self.foreign = foreign


# Order matters: subclasses before their bases (NotADBError is not a CorruptError in apsw).
_MAP: tuple[tuple[type[BaseException], type[StoreError]], ...] = (
    (apsw.BusyError, TransientError),
    (apsw.LockedError, TransientError),
    (apsw.NotADBError, NotADatabaseError),
    (apsw.CorruptError, CorruptError),
    (apsw.FullError, DiskFullError),
    (apsw.IOError, StoreIOError),
    (apsw.ReadOnlyError, ReadOnlyError),
    (apsw.CantOpenError, CantOpenError),
)


#: Extended result codes that are about the shared-memory WAL index (sqlite3.h).
SHM_RESULT_CODES = frozenset(
    apsw.mapping_extended_result_codes[name]
    for name in (
        "SQLITE_READONLY_CANTINIT",
        "SQLITE_READONLY_CANTLOCK",
        "SQLITE_IOERR_SHMOPEN",
        "SQLITE_IOERR_SHMSIZE",
        "SQLITE_IOERR_SHMLOCK",
        "SQLITE_IOERR_SHMMAP",
    )
    if name in apsw.mapping_extended_result_codes
)


#: apsw errors SQLite gives when it could not open a file (the database, its WAL, its
#: -shm index or a temporary file): descriptor exhaustion shows as one of these.
_OPEN_FAILURES = (apsw.CantOpenError, apsw.IOError)


def translate(exc: apsw.Error) -> StoreError:
    """Map an apsw exception to the store tree (a plain ``StoreError`` when unclassified).
    A failure to open a file while no descriptor is left is ``DescriptorsExhaustedError``
    (the errno, asked again by ``exhausted_now``: SQLite's result code does not carry it)."""
    if isinstance(exc, _OPEN_FAILURES):
        exhausted = exhausted_now()
        if exhausted is not None:
            return DescriptorsExhaustedError.of(exhausted)
    if getattr(exc, "extendedresult", None) in SHM_RESULT_CODES:
        return SharedMemoryError(
            f"{exc} (shared-memory WAL index: stop Quill and delete state.db-shm)"
        )
    for apsw_type, ours in _MAP:
        if isinstance(exc, apsw_type):
            return ours(str(exc))
    return StoreError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """Run a block, re-raising apsw errors as the store tree (original chained)."""
    try:
        yield
    except apsw.Error as exc:
        raise translate(exc) from exc
