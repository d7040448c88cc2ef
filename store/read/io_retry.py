"""The store readers' retry of a read after an I/O error (``retry_io``): reads are idempotent,
and a transient EIO (network filesystems, a busy disk) should not fail a UI's read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import apsw

from quill.store.errors import StoreIOError

#: A read that fails with an I/O error is retried on the same connection this many times,
#: ``IO_RETRY_DELAY_S`` × attempt apart: transient EIO (network filesystems, a busy disk)
#: should not fail a UI's read; a persistent one still surfaces as ``StoreIOError``.
IO_RETRIES = 3
IO_RETRY_DELAY_S = 0.05


def retry_io(method: Callable[..., Any]) -> Callable[..., Any]:
    """Retry a read-only method on ``StoreIOError`` (reads are idempotent)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, IO_RETRIES + 1):
            try:
                return method(self, *args, **kwargs)
            except (StoreIOError, apsw.IOError) as exc:
                if attempt == IO_RETRIES:
                    raise (
                        exc if isinstance(exc, StoreIOError) else StoreIOError(str(exc))
                    ) from exc
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                time.sleep(IO_RETRY_DELAY_S * attempt)
        raise AssertionError("unreachable")

    return run
