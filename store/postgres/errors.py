"""psycopg errors → the store error tree, classified by SQLSTATE (never message text).

Every call into the driver on the store's paths (connect, cursor open, execute, fetch,
commit as ``COMMIT``, close) runs inside ``mapped``; ``store.postgres.connection`` is the one
module that calls psycopg.

    SQLSTATE                                   store error             writer does
    08xxx connection exception, 57xxx (57P01-03 TransientError          back off (0.5 s doubling
      shutdown, 57014 cancelled)                                       to 5 s), reconnect, retry
      (and psycopg.OperationalError/InterfaceError without a SQLSTATE: unreachable, lost)
    40001 serialization failure, 40P01 deadlock TransientError         retry the chunk
    55P03 lock not available                    TransientError         retry
    25006 read-only transaction (a standby)     TransientError         retry: a failover's
                                                                       new primary takes it
    25P03 idle-in-transaction timeout           TransientError         reconnect, retry (the
      (the server ended a session left idle in a transaction: its process was frozen)
    28xxx authorization, 3D000 no such database, TransientError        retry; status shows it
      42501 privilege (this host's role and configuration, not the store: fixed, it goes on)
      (a failed *connection* has no SQLSTATE: a    DatabaseMissingError  retry; the message
      missing database is found by looking its                          gives the createdb
      name up in pg_database, ``connection``)                           command
    53100 disk full, 53xxx insufficient resources DiskFullError / TransientError
    58030 io error                              StoreIOError            retry
    22xxx data exception, 23xxx integrity       BadDataError            quarantine the op
      (and psycopg.DataError without a SQLSTATE: a value psycopg refuses to send, e.g. NUL in text)
    54xxx program limit exceeded                OverLimitError          quarantine the op
      (a value over a server limit: the record can never be stored, the rest is applied)
    42P01/42703/42883/42704 undefined table,    StructuralError         sticky halt
      column, function, object; 3F000 no such schema
    XX001 data corrupted, XX002 index corrupted CorruptError            sticky halt
    anything else                               StoreError              the writer exits and
                                                                       the supervisor restarts it
    no SQLSTATE while no descriptor is left     DescriptorsExhaustedError  back off, retry
      (EMFILE/ENFILE: libpq keeps the errno in its message text only, so it is asked
      again by ``quill.home.descriptors.exhausted_now``)

Every mapped error has ``backend = "postgresql"``, and a ``TransientError`` a ``reason`` by
SQLSTATE (``REASONS``: unreachable, conflict, cancelled, read_only, idle_timeout, access,
no_database, resources): its class stays exactly ``TransientError`` (callers test it so), and
what to do about it (``ops.client.errors.TRANSIENT_HINTS``) follows the reason.

Source: PostgreSQL docs, Appendix A "PostgreSQL Error Codes".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from quill.home.descriptors import exhausted_now
from quill.store.contract import BadDataError, OverLimitError
from quill.store.errors import (
    CorruptError,
    DescriptorsExhaustedError,
    DiskFullError,
    StoreError,
    StoreIOError,
    StructuralError,
    TransientError,
)

_BY_CODE: dict[str, type[StoreError]] = {
    "40001": TransientError,
    "40P01": TransientError,
    "55P03": TransientError,
    "57014": TransientError,
    "53100": DiskFullError,
    "58030": StoreIOError,
    "XX001": CorruptError,
    "XX002": CorruptError,
    "25006": TransientError,
    "25P03": TransientError,
    "3D000": TransientError,
    "42P01": StructuralError,
    "42703": StructuralError,
    "42883": StructuralError,
    "42704": StructuralError,
    "42501": TransientError,
    "3F000": StructuralError,
}
_BY_CLASS: dict[str, type[StoreError]] = {
    "08": TransientError,
    "57": TransientError,
    "53": TransientError,
    "22": BadDataError,
    "23": BadDataError,
    "54": OverLimitError,
    "28": TransientError,
    "XX": CorruptError,
}


#: Why a ``TransientError`` of the server happened (``TransientError.reason``), by SQLSTATE
#: then class; an error without a SQLSTATE (no answer, a lost connection) is ``unreachable``.
REASONS: dict[str, str] = {
    "08": "unreachable",
    "57P01": "unreachable",
    "57P02": "unreachable",
    "57P03": "unreachable",
    "57014": "cancelled",
    "40001": "conflict",
    "40P01": "conflict",
    "55P03": "conflict",
    "25006": "read_only",
    "25P03": "idle_timeout",
    "28": "access",
    "42501": "access",
    "3D000": "no_database",
    "53": "resources",
}


def reason(exc: psycopg.Error) -> str:
    """``TransientError.reason`` for a psycopg error ``classify`` calls transient."""
    code = exc.sqlstate or ""
    if not code:
        return "unreachable"
    return REASONS.get(code) or REASONS.get(code[:2]) or "unreachable"


def classify(exc: psycopg.Error) -> type[StoreError]:
    """The store error class for a psycopg error (by ``sqlstate``)."""
    code = exc.sqlstate or ""
    if (
        code[:2] in ("", "08")
        and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
        and exhausted_now()
    ):
        return DescriptorsExhaustedError  # no socket (or file) to be had: not the server
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code[:2] in _BY_CLASS:
        return _BY_CLASS[code[:2]]
    if not code and isinstance(exc, psycopg.DataError):
        return (
            BadDataError  # refused by psycopg before sending (a NUL in text): class 22 all the same
        )
    if not code and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return TransientError  # no server answer at all: unreachable, connection lost
    return StoreError


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """Run a block, re-raising psycopg errors as the store tree (original chained)."""
    try:
        yield
    except psycopg.Error as exc:
        kind = classify(exc)
        err = kind(f"{type(exc).__name__}: {exc}".strip())
        err.sqlstate = exc.sqlstate  # type: ignore[attr-defined]
        err.backend = "postgresql"
        if isinstance(err, TransientError) and kind is TransientError:
            err.reason = reason(exc)
        raise err from exc
