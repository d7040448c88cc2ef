"""``quill.Client``: the library agents use to write and read transcripts.

::

    import quill
    q = quill.Client()                      # data dir: argument, else $QUILL_HOME
    ack = q.append("s1", [{"role": "user", "content": "hi"}], source="my-agent")
    q.wait(ack, timeout=10)                 # Outcome(status='applied')
    q.messages("s1")                        # what `quill sessions show s1 --json` lists

Writes are spool ops (docs/ops.md): each method checks its op the way the writer will
(``store.apply.precheck``), so a batch that can never apply raises ``InvalidInputError`` before
anything is appended, then appends it durably (fsync'd) and returns its ``Ack`` — the record's
spool position and batch id. The fleet's writer (``quill run``) applies it; ``wait`` blocks
until it did and says how (applied, or quarantined with the reason). Pass ``batch_id`` to
retry safely: a batch id is applied once.

Reads return exactly what the matching CLI command prints with ``--json`` (the CLI calls these
methods). Before the store exists, listings are empty and single-session reads raise
``NotFoundError``.

Threads and ``fork``: each thread of each process gets its own spool handle (a ``Spool`` is
single-threaded; concurrent handles group-commit their fsyncs), created on first use and
re-created after ``fork`` (a pid check), so one ``Client`` may be shared by threads and used
in a forked child. Reads open a short-lived read-only connection per call.

Errors are ``quill.QuillError`` subclasses (``ops/client/errors.py``) whose ``hint`` says what
to do.

This module holds the constructor and ``wait``; the writes are ``ops/client/writes.py``
(``Writes``), the writes that read first (orphans, deletes, re-pricing)
``ops/client/maintenance.py`` (``Maintenance``) and the reads ``ops/client/reads.py``
(``Reads``): the base classes of ``Client``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quill.home import Settings, load
from quill.ops.client.errors import InvalidInputError, NotDrainingError, WaitTimeoutError
from quill.ops.client.listings import Listings
from quill.ops.client.maintenance import Maintenance
from quill.ops.client.reads import VIEWS, Reads, _public_errors
from quill.ops.client.search import Search
from quill.ops.client.writes import Writes
from quill.spool import Ack

__all__ = ["VIEWS", "WAIT_POLL_S", "Client", "Outcome"]
#: How often ``wait`` looks at the store's cursor if no ring came (seconds): the writer rings
#: every waiting client after each commit (``quill.home.doorbell``), so this only bounds what a
#: lost ring costs.
WAIT_POLL_S = 0.02


@dataclass(frozen=True)
class Outcome:
    """How the writer dealt with a batch: ``status`` is ``"applied"``, ``"quarantined"`` or
    ``"missing"``; for a quarantined batch ``reason`` is the rule's tag (docs/ops.md, e.g.
    ``no-such-turn``) and ``detail`` the explanation. The quarantined record is kept (``quill
    spool``). ``"missing"`` (reason ``not-found``): the writer is past the ack's position but
    the store has no record of the batch, applied or refused (``ops.client.wait``)."""

    status: str
    batch_id: str
    reason: str | None = None
    detail: str | None = None

    @property
    def applied(self) -> bool:
        return self.status == "applied"


def _check_ack(ack: Any) -> Ack:
    """``ack`` if it is an ``Ack`` (what the write methods return), else ``InvalidInputError``."""
    if isinstance(ack, Ack):
        return ack
    if isinstance(ack, tuple) and len(ack) == 2 and isinstance(ack[1], (Ack, type(None))):
        raise InvalidInputError(
            f"expected an Ack, got the (ids, ack) pair `delete_sessions` returns: {ack!r}",
            hint="`ids, ack = q.delete_sessions(...)`, then `q.wait(ack)` (ack is None when "
            "nothing was deleted)",
        )
    if not isinstance(ack, Ack):
        raise InvalidInputError(
            f"expected the Ack a write method returned (append, create …), got {ack!r}",
            hint="pass the value `append` returned; its batch id alone is not enough",
        )
    return ack


class Client(Maintenance, Writes, Search, Listings, Reads):
    """A producer and reader on one data dir: ``home`` (a path), else ``$QUILL_HOME``, else
    the XDG data dir. ``config_`` (loaded ``quill.home.Settings``) may be given instead.
    Raises ``StorageError`` if ``config.toml`` there is invalid."""

    def __init__(
        self, home: str | os.PathLike[str] | None = None, *, config_: Settings | None = None
    ):
        with _public_errors():
            self.config = config_ or load(str(home) if home is not None else None)
        self._local = threading.local()

    @property
    def home(self) -> Path:
        return self.config.home

    def __repr__(self) -> str:
        return f"quill.Client({str(self.home)!r})"

    # -- read-your-writes ---------------------------------------------------------------------

    def wait(
        self, ack: Ack, timeout: float = 30.0, *, without_writer: float | None = None
    ) -> Outcome:
        """Block until the writer dealt with ``ack``'s batch (at most ``timeout`` seconds) and
        return its ``Outcome``. Raises ``WaitTimeoutError`` (the batch stays durable and is
        applied when a writer runs) — the usual cause is that ``quill run`` is not running.
        ``without_writer`` (seconds, e.g. ``wait.WRITER_GRACE_S``): fail fast instead, with
        ``NotDrainingError`` (a ``WaitTimeoutError``), once nothing has drained the spool for
        that long (no fleet nor writer holds its lease, or the writer halted); None (the
        default) waits out ``timeout`` (a writer started meanwhile applies it)."""
        return self.wait_all([ack], timeout, without_writer=without_writer)[0]

    def wait_all(
        self, acks: list[Ack], timeout: float = 30.0, *, without_writer: float | None = None
    ) -> list[Outcome]:
        """``wait`` for several acks at once; outcomes in the same order. Raises
        ``InvalidInputError`` for anything that is not an ``Ack``."""
        acks = [_check_ack(a) for a in acks]
        if not acks:
            return []
        if not timeout >= 0:
            raise InvalidInputError(f"timeout must be ≥ 0 seconds, got {timeout!r}")
        from quill.ops.client.wait import wait_applied
        from quill.spool import NotDrainingError as SpoolNotDraining
        from quill.spool import WaitTimeoutError as SpoolWaitTimeout

        last = max(acks, key=lambda a: a.position)
        awaited = {(str(a.position), a.batch_id) for a in acks}
        with _public_errors(), self._looking() as look:  # one reader for every look
            try:
                wait_applied(
                    self.config,
                    last.position,
                    timeout,
                    poll=WAIT_POLL_S,
                    look=look,
                    awaited=awaited,
                    without_fleet=without_writer,
                )
            except SpoolNotDraining as exc:
                raise NotDrainingError(str(exc)) from None
            except SpoolWaitTimeout:
                raise WaitTimeoutError(
                    f"batch {last.batch_id} (spool position {last.position}) not applied "
                    f"within {timeout:g} s"
                ) from None
            if not awaited:  # the writer's ring named every one as applied by its commit
                return [Outcome("applied", a.batch_id) for a in acks]
            return self._as_outcomes(acks, look.outcomes(acks))

    @contextlib.contextmanager
    def _looking(self) -> Iterator[Any]:
        """A ``wait.Looker`` for one wait: the one this client kept from its last wait
        (``wait.Lookers``: no store connection opened per wait), kept again after a wait
        that ended without an error, closed after one that raised."""
        lookers = self.__dict__.get("_lookers")
        if lookers is None:
            from quill.ops.client.wait import Lookers

            lookers = self._lookers = Lookers(self.config)
        look = lookers.take()
        try:
            yield look
        except BaseException:
            look.close()
            raise
        lookers.give(look)

    def _look(self, look: Any, last: Ack, acks: list[Ack]) -> list[Outcome] | None:
        """One look on ``look`` (a ``wait.Looker``): the outcomes of ``acks`` once ``last``
        (the furthest of them) is past the cursor, else None."""
        with _public_errors():
            cursor = look.cursor()
            if cursor is None or not cursor > last.position:
                return None
            return self._as_outcomes(acks, look.outcomes(acks))

    @staticmethod
    def _as_outcomes(acks: list[Ack], found: list[dict[str, Any]]) -> list[Outcome]:
        return [
            Outcome(o["outcome"], a.batch_id, o.get("reason"), o.get("detail"))
            for a, o in zip(acks, found)
        ]

    def _outcomes(self, acks: list[Ack]) -> list[Outcome]:
        """The outcome of each ack already past the store's cursor (``ops.client.wait``)."""
        from quill.ops.client.wait import outcomes

        with _public_errors():
            found = outcomes(self.config, self.config.spool_dir, acks)
        return self._as_outcomes(acks, found)

    def applied(self, ack: Ack) -> bool:
        """Whether the writer has dealt with ``ack`` yet (never blocks). Raises
        ``InvalidInputError`` for anything that is not an ``Ack``."""
        ack = _check_ack(ack)
        from quill.ops.client.wait import applied_position

        with _public_errors():
            cursor = applied_position(self.config)
        return cursor is not None and cursor > ack.position
