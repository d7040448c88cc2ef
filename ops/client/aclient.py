"""``quill.AsyncClient``: ``quill.Client`` for asyncio agents.

Every method is a coroutine with the same arguments, result and errors as ``Client``'s. The
blocking work (an fsync'd append, a SQLite read) runs in a worker thread
(``asyncio.to_thread``) so the event loop never stalls on disk; ``wait`` is woken by the
writer's ring after a commit (an event-loop reader on its doorbell, ``quill.home.doorbell``),
looks again every ``WAIT_POLL_S`` in case a ring was lost, and holds no thread while it waits;
a ring whose note names the awaited acks as applied answers the wait without a look.

Cancellation: a write, once started, is finished before ``CancelledError`` propagates, so the
caller never has to guess whether a cancelled append happened (it did; its ack is dropped,
and a retry with the same ``batch_id`` is applied once).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

from quill.home import doorbell
from quill.ops.client.client import WAIT_POLL_S, Client, Outcome, _check_ack
from quill.ops.client.errors import InvalidInputError, NotDrainingError, WaitTimeoutError
from quill.spool import Ack

_WRITES = (
    "submit",
    "append",
    "create",
    "record_usage",
    "end",
    "compact",
    "rewind",
    "replace",
    "title",
    "flags",
    "mark_read",
    "adopt_orphans",
    "delete_sessions",
    "purge_sessions",
    "reprice_usage",
)
_READS = (
    "transcript",
    "messages",
    "session",
    "sessions",
    "sessions_page",
    "search",
    "search_results",
    "usage",
    "usage_page",
    "resume",
    "context",
    "orphans",
    "search_health",
    "applied",
    "fits",  # measures a record; appends nothing
)


async def _finish_then_cancel(coro: Any) -> Any:
    """Run ``coro`` to completion even if the caller is cancelled meanwhile; then re-raise."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


class AsyncClient:
    """``Client`` with coroutine methods; ``home`` as for ``Client``. Safe to share between
    tasks and threads (each worker thread gets its own spool handle)."""

    def __init__(self, home: str | os.PathLike[str] | None = None, *, client: Client | None = None):
        self.sync = client or Client(home)

    @property
    def home(self) -> Any:
        return self.sync.home

    def __repr__(self) -> str:
        return f"quill.AsyncClient({str(self.home)!r})"

    def __getattr__(self, name: str) -> Any:
        if name in _WRITES:
            method = getattr(self.sync, name)

            @functools.wraps(method)
            async def write(*args: Any, **kwargs: Any) -> Any:
                return await _finish_then_cancel(asyncio.to_thread(method, *args, **kwargs))

            return write
        if name in _READS:
            method = getattr(self.sync, name)

            @functools.wraps(method)
            async def read(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.to_thread(method, *args, **kwargs)

            return read
        raise AttributeError(f"'AsyncClient' object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *_WRITES, *_READS})

    async def wait(
        self, ack: Ack, timeout: float = 30.0, *, without_writer: float | None = None
    ) -> Outcome:
        """``Client.wait`` without blocking the event loop."""
        return (await self.wait_all([ack], timeout, without_writer=without_writer))[0]

    async def wait_all(
        self, acks: list[Ack], timeout: float = 30.0, *, without_writer: float | None = None
    ) -> list[Outcome]:
        """``Client.wait_all`` without blocking the event loop (woken by the writer's ring;
        looks again every ``WAIT_POLL_S`` seconds if a ring is lost). ``without_writer``: as
        for ``Client.wait`` (``NotDrainingError`` once nothing drained the spool that long)."""
        acks = [_check_ack(a) for a in acks]
        if not acks:
            return []
        if not timeout >= 0:
            raise InvalidInputError(f"timeout must be ≥ 0 seconds, got {timeout!r}")
        last = max(acks, key=lambda a: a.position)
        deadline = time.monotonic() + timeout
        # Listen before the first look: the writer rings after each commit (home.doorbell).
        bell = doorbell.listen(doorbell.waiter_path(self.sync.config.waiters_dir))
        rung = asyncio.Event()
        rings = bytearray()  # what the writer rang: notes of the ops its commits applied
        loop = asyncio.get_running_loop()
        if bell is not None:

            def ring(bell: doorbell.Doorbell = bell) -> None:
                rings.extend(bell.take())
                rung.set()

            loop.add_reader(bell.fileno(), ring)
        mine = {(str(a.position), a.batch_id) for a in acks}
        from quill.ops.client.wait import Draining

        draining = (
            Draining(self.sync.config, without_writer) if without_writer is not None else None
        )
        try:
            # The client's kept reader (``Client._looking``), for every look of this wait.
            with self.sync._looking() as look:
                while True:
                    if mine <= doorbell.applied_in(bytes(rings)):
                        # The writer's note names every ack as applied by a committed chunk:
                        # exactly what a look would read back, without reading the store.
                        return [Outcome("applied", a.batch_id, None, None) for a in acks]
                    # One thread hop per look: the cursor, and the outcomes once it is past.
                    found = await asyncio.to_thread(self.sync._look, look, last, acks)
                    if found is not None:
                        return found
                    stopped = draining.stopped() if draining is not None else None
                    if stopped is not None:
                        raise NotDrainingError(f"record at {last.position} not applied: {stopped}")
                    if time.monotonic() >= deadline:
                        raise WaitTimeoutError(
                            f"record at {last.position} not applied within {timeout:g} s"
                        )
                    try:  # the ring, or the poll interval if a ring was lost
                        await asyncio.wait_for(rung.wait(), WAIT_POLL_S)
                    except TimeoutError:
                        pass  # no ring: look anyway (the poll that bounds a lost ring)
                    rung.clear()
        finally:
            if bell is not None:
                loop.remove_reader(bell.fileno())
                bell.close(remove=True)
