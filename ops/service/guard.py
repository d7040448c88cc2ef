"""Connection-level limits for the HTTP service: a header deadline, a connection cap that
evicts the slowest talkers, and a per-client request budget.

uvicorn has the rest of what is needed and ``server.serve`` sets it: ``timeout_keep_alive``
(idle connections between requests), ``limit_concurrency`` (503 once every slot is busy),
``h11_max_incomplete_event_size`` (the size of a request head). What it lacks is a deadline
for the request head itself: a client that sends one header byte a second holds its
descriptor for as long as it likes, and a few hundred such clients exhaust the process's
descriptors (slowloris). ``GuardedH11Protocol`` adds it:

* every connection must deliver a complete request head within ``header_timeout_s`` of
  starting to wait for one (connection made, or the previous response sent), else it is
  closed;
* when a new connection would make more than ``max_connections`` open, the connection that
  has waited longest for its request head, among those that have sent part of one, is
  closed to make room (when there is none, the newcomer is closed). A connection that is
  mid-request (head received) is never evicted, and a real client sends its head at once,
  so trickling clients cannot crowd out real ones: they are the ones that go.

The body deadline is ``errors.BodyLimit``'s (the body is read there before a route runs).
"""

from __future__ import annotations

import asyncio
import math
import resource
import time
from typing import Any

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from quill.ops.service.errors import error_response

#: Descriptors kept back from the connection cap for the store, spool, logs and tokens files
#: (the route thread pool opens per-thread spool and store handles): at least this many, and
#: at least a quarter of the limit.
RESERVED_FDS = 128
#: Connections accepted per readiness event, and the kernel's queue of pending connections.
ACCEPT_BATCH = 64


def connection_cap(configured: int) -> int:
    """``configured`` lowered to what this process's descriptor limit (RLIMIT_NOFILE, soft)
    can hold with ``max(RESERVED_FDS, limit // 4)`` to spare; at least 8."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft - max(RESERVED_FDS, soft // 4)))


def guarded_protocol(header_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """An ``H11Protocol`` subclass (pass as ``uvicorn.Config(http=...)``) enforcing the header
    deadline (seconds) and the connection cap described in the module doc."""

    class GuardedH11Protocol(H11Protocol):
        #: Connections waiting for a request head -> when they started waiting (monotonic s).
        #: Insertion order is waiting order, so the first key is the one to evict.
        waiting: dict[GuardedH11Protocol, float] = {}

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            #: Whether bytes of the awaited head have arrived: a burst of accepts runs every
            #: connection_made before any read, so a connection is only judged slow once it
            #: has spoken (or has had a whole header deadline to).
            self._heard = False
            live = sum(1 for c in self.connections if not c.transport.is_closing())
            if live > max_connections:
                victim = self._slowest()
                (victim or self)._close("evicted")
            if not self.transport.is_closing():
                self._await_head()

        def _slowest(self) -> GuardedH11Protocol | None:
            """The connection that has waited longest for its head among those that have
            sent part of it; None when every waiting connection is still silent."""
            for conn in self.waiting:  # oldest first
                if conn._heard and conn is not self:
                    return conn
            return None

        def data_received(self, data: bytes) -> None:
            self._heard = True
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            # The head is in once h11 has left IDLE for this cycle (SEND_BODY, DONE, ...).
            if self.conn.their_state is not h11.IDLE:
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()

        def _await_head(self) -> None:
            if self in self.waiting:
                return
            self._heard = False
            self.waiting[self] = time.monotonic()
            self._deadline = self.loop.call_later(header_timeout_s, self._close, "header")

        def _stop_waiting(self) -> None:
            self.waiting.pop(self, None)
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _close(self, _why: str) -> None:
            self._stop_waiting()
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


class RequestBudget:
    """ASGI middleware: each client (peer address) may start ``rate`` requests a second on
    average, ``burst`` at once (a token bucket); past that it gets ``429 too-many-requests``
    with ``Retry-After`` (whole seconds). ``/healthz`` is outside the budget, so a liveness
    probe answers while a client is being throttled."""

    def __init__(self, app: ASGIApp, rate: float, burst: int):
        self.app, self.rate, self.burst = app, rate, burst
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, last monotonic s)

    def _take(self, client: str) -> float:
        """0 when ``client`` may go ahead (one token taken), else the seconds to wait."""
        now = time.monotonic()
        tokens, last = self.buckets.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens >= 1:
            self.buckets[client] = (tokens - 1, now)
            return 0.0
        self.buckets[client] = (tokens, now)
        if len(self.buckets) > 10_000:  # full buckets hold no information: forget them
            full = [k for k, (t, _) in self.buckets.items() if t >= self.burst - 1]
            for key in full:
                del self.buckets[key]
        return (1 - tokens) / self.rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        wait = self._take(client)
        if not wait:
            await self.app(scope, receive, send)
            return
        response = error_response(
            429,
            "too-many-requests",
            f"more than {self.rate:g} requests a second from this client; slow down",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )
        await response(scope, receive, send)


def uvicorn_settings(cfg: Any) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments that bound what one client can hold."""
    cap = connection_cap(cfg.http_max_connections)
    return {
        "http": guarded_protocol(cfg.http_header_timeout_s, cap),
        # Above the cap: eviction keeps open connections at the cap (closed ones leave
        # uvicorn's count a loop turn later), so uvicorn's 503 only comes when the cap is
        # full of requests in progress.
        "limit_concurrency": cap + ACCEPT_BATCH,
        "timeout_keep_alive": 5,
        # asyncio accepts up to ``backlog`` connections in one go before any of them reaches
        # connection_made (where the cap evicts): a small batch keeps descriptors within the
        # cap plus ``ACCEPT_BATCH`` instead of running out (EMFILE pauses accepting for 1 s
        # while the kernel queue fills with tricklers ahead of real clients).
        "backlog": ACCEPT_BATCH,
        "h11_max_incomplete_event_size": 64 * 1024,
    }
