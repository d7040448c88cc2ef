"""psycopg errors → the store error tree, classified by SQLSTATE class (never message text).

    SQLSTATE                                   store error             writer does
    08xxx connection exception, 57P0x shutdown TransientError          back off, reconnect, retry
      (and psycopg.OperationalError without a SQLSTATE: server unreachable)
    40001 serialization failure, 40P01 deadlock TransientError         retry the chunk
    55P03 lock not available, 57014 cancelled  TransientError          retry
    53100 disk full, 53xxx insufficient resources DiskFullError / TransientError
    58030 io error                              StoreIOError
    XX001 data corrupted, XX002 index corrupted CorruptError            sticky halt
    25006 read-only transaction                 ReadOnlyError
    22xxx data exception, 23xxx integrity       BadDataError            quarantine the op
      (and psycopg.DataError without a SQLSTATE: a value psycopg refuses to send, e.g. NUL in text)
    anything else                               StoreError

Source: PostgreSQL docs, Appendix A "PostgreSQL Error Codes".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from quill.store.contract import BadDataError
from quill.store.errors import (
    CorruptError,
    DiskFullError,
    ReadOnlyError,
    StoreError,
    StoreIOError,
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
    "25006": ReadOnlyError,
}
_BY_CLASS: dict[str, type[StoreError]] = {
    "08": TransientError,
    "57": TransientError,
    "53": TransientError,
    "22": BadDataError,
    "23": BadDataError,
    "XX": CorruptError,
}


def classify(exc: psycopg.Error) -> type[StoreError]:
    """The store error class for a psycopg error (by ``sqlstate``)."""
    code = exc.sqlstate or ""
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
        raise err from exc
