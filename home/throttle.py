"""Layer 0: the one rule for warnings that repeat. A process that meets the same condition
over and over (a reader blocking its checkpoints, a full disk refusing its status file) logs
it at most once every ``every_s`` seconds per key, and the line it does log says how many it
left out (``suppressed``), so the log stays readable and nothing is hidden."""

from __future__ import annotations

import time


class Throttle:
    """At most one report per key every ``every_s`` seconds (``now``: any monotonic clock in
    seconds; ``time.monotonic()`` when omitted). Not thread-safe; one per owner."""

    def __init__(self, every_s: float):
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def ready(self, key: str, now: float | None = None) -> int | None:
        """The number of reports of ``key`` left out since the last one (0 or more) when this
        one is due, else None (leave it out: it is counted)."""
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)

    def clear(self, key: str) -> None:
        """The condition ended: the next report of ``key`` is logged at once."""
        self._last.pop(key, None)
        self._suppressed.pop(key, None)
