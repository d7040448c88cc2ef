"""A child of the supervisor (``workers.supervisor``): its command line, its process and its
restart history, and the restart delays: 0.5 s doubling to 10 s, one a minute in a crash loop,
never more than ``WRITER_MAX_DELAY_S`` for the writer.
"""

from __future__ import annotations

import collections
import subprocess
from dataclasses import dataclass, field
from typing import Any

CRASH_LOOP = (5, 60.0)  # exits, within seconds
CRASH_LOOP_BACKOFF_S = 60.0
#: The writer's restart delay never exceeds this (seconds): while it is down nothing is
#: applied. A writer that fails at once costs one short-lived process per second at most.
WRITER_MAX_DELAY_S = 1.0


@dataclass
class Child:
    """A supervised child process and its restart history."""

    role: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    exits: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=CRASH_LOOP[0])
    )
    restart_at: float = 0.0
    backoff: float = 0.5
    restarts: int = 0  # exits since the fleet started (published for status/metrics)
    last_exit_code: int | None = None
    last_exit_at: float | None = None
    crash_loop: bool = False

    def max_delay(self, crash_loop: bool) -> float:
        """Longest restart delay for this role (seconds)."""
        if self.role == "writer":
            return WRITER_MAX_DELAY_S
        return CRASH_LOOP_BACKOFF_S if crash_loop else 10.0

    def summary(self) -> dict[str, Any]:
        """What ``quill status`` shows for this child."""
        proc = self.proc
        return {
            "pid": proc.pid if proc is not None and proc.poll() is None else None,
            "restarts": self.restarts,
            "last_exit_code": self.last_exit_code,
            "last_exit_at": self.last_exit_at,
            "crash_loop": self.crash_loop,
        }
