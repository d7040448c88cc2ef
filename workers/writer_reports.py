"""What the supervisor tells its console about the writer: a halt (its cause and the command
that lifts it), a failure the writer keeps retrying, and that it applies again. Without these a
halted or retrying fleet looks, on the terminal that started it, like an idle one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from quill.home import WriterStatus

#: A failure the writer has retried this long (s) is said on the console: a short busy spell
#: is not, a store it cannot open (a missing database, a refused role) is.
RETRY_SAY_AFTER_S = 3.0


class WriterReports:
    """Console lines about the live writer, each said once per change of state.

    ``console``: a callable taking one line of text; ``log``: a structlog logger. Call
    ``update`` with each ``WriterStatus`` the supervisor reads (about twice a second)."""

    def __init__(self, console: Callable[[str], None], log: Any):
        self.console = console
        self.log = log
        self._halt_said: tuple[str, str] | None = None  # the halt last told to the console
        self._retry_since: float | None = None  # monotonic: the writer's failure first seen
        self._retry_said = False  # that failure was told to the console

    def failing_s(self) -> float:
        """Seconds the live writer has reported a failure without applying in between
        (since the first status that carried it; 0 while it reports none)."""
        return 0.0 if self._retry_since is None else time.monotonic() - self._retry_since

    def update(self, writer: WriterStatus) -> None:
        """Say what changed since the last call (halted, retrying, applying again)."""
        self._say_halt(writer)
        self._say_retrying(writer)

    def _say_halt(self, writer: WriterStatus) -> None:
        """Tell the console once when the writer halts (its cause and the command that lifts
        it) and once when it runs again: a halted fleet otherwise looks like an idle one."""
        halt = writer.halt if writer.halted else None
        key = (halt.cause, halt.detail) if halt is not None else None
        if key == self._halt_said:
            return
        if halt is not None:
            self.console(
                f"quill: the writer halted ({halt.cause}: {halt.detail}); nothing more is "
                f"applied until `{halt.next}` (`quill status` shows the cause)"
            )
            self.log.warning("supervisor.halt_reported", cause=halt.cause, next=halt.next)
        elif self._halt_said is not None:
            self.console("quill: the writer is applying again")
        self._halt_said = key

    def _say_retrying(self, writer: WriterStatus) -> None:
        """Tell the console once when the live writer has retried one failure for
        ``RETRY_SAY_AFTER_S`` (its error text) and once when it applies again: a fleet whose
        writer cannot open its store otherwise waits in silence, as if idle."""
        if writer.updated_at is None:  # no live writer: its next status says what remains
            return
        if not writer.error or writer.halted:
            if self._retry_said and not writer.halted:
                self.console("quill: the writer is applying again")
            self._retry_since, self._retry_said = None, False
            return
        now = time.monotonic()
        self._retry_since = self._retry_since or now
        if not self._retry_said and now - self._retry_since >= RETRY_SAY_AFTER_S:
            self.console(
                f"quill: the writer cannot apply and keeps retrying: {writer.error} "
                "(`quill status` shows it; each try is in logs/writer.log)"
            )
            self.log.warning("supervisor.retry_reported", error=writer.error)
            self._retry_said = True
