"""Descriptor exhaustion, classified by errno for every layer: the process (EMFILE) or the
system (ENFILE) had no file descriptor left to open a file or a socket. Nothing is wrong
with the data; the answer is to wait and retry (HTTP: 503 ``overloaded`` with Retry-After;
workers: back off). Each package names it in its own error tree (the store's and the spool's
``DescriptorsExhaustedError``, the client's ``OverloadedError``), all decided here.

Some libraries do not hand the errno on: SQLite keeps it beside the connection
(``sqlite3_system_errno``), and libpq only writes it into its message text. Where a failed
open gives no errno, ``exhausted_now`` asks the kernel the same question again: it opens
``/dev/null`` and reads the errno of that. A limit lifted between the two leaves the failure
as the library reported it (never the other way round: a descriptor cannot appear full when
it is not).
"""

from __future__ import annotations

import errno
import os

#: errno values of descriptor exhaustion: this process (EMFILE), the system (ENFILE).
EXHAUSTED_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


def is_exhaustion(exc: BaseException | None, *, chain: bool = True) -> bool:
    """True when ``exc`` (or, with ``chain``, an exception it was raised from:
    ``__cause__``/``__context__``) is an ``OSError`` with errno EMFILE/ENFILE, or any
    exception with a truthy ``descriptors_exhausted`` class attribute (each tree's
    exhaustion error sets it)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if not chain and seen:
            break
        seen.add(id(exc))
        if getattr(exc, "descriptors_exhausted", False) or (
            isinstance(exc, OSError) and exc.errno in EXHAUSTED_ERRNOS
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def exhausted_now() -> int | None:
    """EMFILE or ENFILE when opening a file fails for want of a descriptor right now, else
    None (one ``open``/``close`` of ``/dev/null``)."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as exc:
        return exc.errno if exc.errno in EXHAUSTED_ERRNOS else None
    return None
