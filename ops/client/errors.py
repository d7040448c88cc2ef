"""Quill's public error tree: what the client raises and what every CLI command reports.

Each error says what went wrong *and what to do* (``hint``), and carries the CLI exit code
of its kind, so ``quill.Client`` users and ``quill`` command users see the same thing::

    QuillError                      exit 1  base; ``hint`` says what to do next
    ├── InvalidInputError           exit 2  bad argument, op or message: nothing was appended
    │   └── BadCursorError          exit 2  a page cursor (``after``) that is malformed, or of
    │                                       another listing or query: nothing was read
    ├── NotFoundError               exit 3  no such session / job / schedule (or no store yet)
    ├── WaitTimeoutError            exit 4  the writer did not deal with a batch in time
    │   └── NotDrainingError        exit 4  … and nothing drains the spool (no fleet, or the
    │                                       writer halted): a fail-fast wait stopped early
    ├── AbortedError                exit 7  the user declined a confirmation: nothing changed
    ├── QuarantinedError            exit 1  the writer refused a batch (``reason``); it is kept
    ├── SpoolFullError              exit 1  the disk holding the spool is full: nothing partial
    ├── StoreBusyError              exit 1  the store is locked right now: retry
    ├── OverloadedError             exit 1  no file descriptor left (EMFILE/ENFILE): retry
    ├── StoreDamagedError           exit 1  corruption found: the writer halts, `quill recover`
    │   └── StoreMissingError       exit 1  the store file is lost: `quill recover`
    ├── QueueUnavailableError       exit 8  the job queue (Redis, queue.db) is unreachable:
    │                                       nothing was queued; the spool is applied as ever
    ├── ScheduleUnreadableError     exit 1  ``schedule.db`` is damaged, locked or unreadable:
    │                                       no schedule was read or changed
    └── StorageError                exit 1  other I/O / permission / unreadable data dir, or a
                                            store database that does not exist (`createdb`)

Classification is by the type of the lower layer's exception (``quill.spool`` and
``quill.store`` trees, ``OSError``), never by message text (``from_exception``). The lower
packages stay import-free here: their error modules are looked up in ``sys.modules``, so
this module costs nothing at import (the fast ``quill push`` path imports it).
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The one exit-code table shared by every ``quill`` command."""

    OK = 0
    FAILED = 1  # failure, damage found, a batch quarantined
    USAGE = 2  # bad arguments or input; nothing was changed
    NOT_FOUND = 3  # no such session / job / schedule
    TIMEOUT = 4  # waited and gave up (the work may still happen)
    HALTED = 5  # `quill run`: the writer halted (`quill status` says why)
    CRASH_LOOP = 6  # `quill run`: a worker keeps exiting
    ABORTED = 7  # a confirmation was declined; nothing was changed
    QUEUE_UNAVAILABLE = 8  # the job queue is unreachable (`quill run --until-idle`: drained)
    INTERRUPTED = 130  # Ctrl-C (SIGINT), the shell's convention


class QuillError(Exception):
    """Base of every error Quill's public API raises.

    ``message`` says what happened, ``hint`` what to do about it (may be empty), ``kind`` a
    stable machine tag (also the ``error.kind`` of ``--json`` error output), ``exit_code``
    the CLI's exit code for this kind (``Exit``).
    """

    kind = "failed"
    exit_code = Exit.FAILED
    default_hint = ""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = self.default_hint if hint is None else hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    @property
    def notes(self) -> list[str]:
        """The notes added to this error (``BaseException.add_note``: what else happened, e.g.
        a job run that is not in its history yet), oldest first; empty when there are none."""
        return list(getattr(self, "__notes__", ()))

    def as_dict(self) -> dict:
        """The ``--json`` error object: ``{"kind", "message", "hint", "notes", "exit_code"}``
        (``hint`` is ``null`` when there is nothing to add, ``notes`` a list of strings, empty
        when there are none)."""
        return {
            "kind": self.kind,
            "message": self.message,
            "hint": self.hint or None,
            "notes": self.notes,
            "exit_code": int(self.exit_code),
        }


def with_notes(error: QuillError, exc: BaseException) -> QuillError:
    """``error`` (the public error for ``exc``) carrying the notes of ``exc`` and of every
    error ``exc`` was explicitly raised from (its ``__cause__`` chain: ``raise X from exc``),
    oldest first, each once. Classifying or wrapping an error must never drop what was noted
    on it. Returns ``error``."""
    chain: list[BaseException] = []
    at: BaseException | None = exc
    while at is not None and at not in chain:
        chain.append(at)
        at = at.__cause__
    held = set(error.notes)
    for cause in reversed(chain):  # the innermost error's notes were added first
        for note in getattr(cause, "__notes__", ()):
            if isinstance(note, str) and note not in held:
                error.add_note(note)
                held.add(note)
    return error


class InvalidInputError(QuillError, ValueError):
    """A bad argument, op or message. Nothing was appended; fix the input and retry.

    ``reason`` is the op rule's tag (``invalid-role``, ``invalid-field`` … see docs/ops.md)
    when the refusal comes from an op check, else ``usage``."""

    kind = "usage"
    exit_code = Exit.USAGE

    def __init__(self, message: str, *, hint: str | None = None, reason: str = "usage"):
        super().__init__(message, hint=hint)
        self.reason = reason


class BadCursorError(InvalidInputError):
    """A page cursor (``after=``, ``--after``, ``?after=``) that the listing cannot continue
    from: malformed, or the cursor of another listing or query (``foreign``). Nothing was
    read; start from the first page (no ``after``) or pass the cursor the previous page of
    this same listing gave."""

    def __init__(self, message: str, *, foreign: bool = False):
        super().__init__(
            message,
            hint="pass the `next` cursor the previous page of this same listing gave, or "
            "leave it out for the first page",
            reason="bad-cursor",
        )
        self.foreign = foreign


class NotFoundError(QuillError, LookupError):
    """No such session, job or schedule (or no store yet: nothing was applied so far)."""

    kind = "not_found"
    exit_code = Exit.NOT_FOUND


def no_session(
    session_ids: str | list[str], *, store_missing: bool = False, deleted: bool = False
) -> NotFoundError:
    """The one "no such session" error (client, CLI and HTTP API alike): names the ids and,
    in ``hint``, where to look; ``store_missing`` when nothing has been applied yet;
    ``deleted`` when a ``sessions.delete`` of every one of them was applied (the hint then
    names the command that finishes an interrupted ``--purge``)."""
    ids = [session_ids] if isinstance(session_ids, str) else list(session_ids)
    what = f"no session {ids[0]!r}" if len(ids) == 1 else f"no sessions {', '.join(map(repr, ids))}"
    if deleted:
        import shlex

        return NotFoundError(
            f"{what}: deleted already",
            hint="to remove its content from the spool and snapshots too: "
            f"`quill spool purge {' '.join(shlex.quote(i) for i in ids)}`",
        )
    if store_missing:
        return NotFoundError(
            f"{what} (no store yet: nothing has been applied)",
            hint="push or import something, then `quill run` applies it",
        )
    return NotFoundError(what, hint="`quill sessions list` shows the session ids")


def no_key(key: str, *, store_missing: bool = False) -> NotFoundError:
    """The one "no session has this conversation key" error."""
    if store_missing:
        return NotFoundError(
            f"no session has key {key!r} (no store yet: nothing has been applied)",
            hint="push or import something, then `quill run` applies it",
        )
    return NotFoundError(
        f"no session has key {key!r}", hint="`quill sessions list --json` shows each session's key"
    )


class WaitTimeoutError(QuillError, TimeoutError):
    """A wait gave up before the writer dealt with the batch. The batch is durable and will
    still be applied once a writer runs."""

    kind = "timeout"
    exit_code = Exit.TIMEOUT
    default_hint = (
        "the batch is durable and is applied when a writer gets to it "
        "(`quill run` starts one, `quill status` shows it)"
    )


class NotDrainingError(WaitTimeoutError):
    """A wait that fails fast (``QuillSession``; ``Client.wait(..., without_writer=s)``) gave
    up before its timeout because nothing drains this data dir's spool: no fleet (nor a
    writer) has run for the grace seconds, or the writer has halted. The batch is durable in
    the spool and is applied once a writer runs; the message says which case it is."""

    kind = "not_draining"
    default_hint = (
        "the batch is durable in the spool: start the fleet (`quill run`) and it is applied; "
        "`quill status` shows the fleet and any halt"
    )


class AbortedError(QuillError):
    """The user answered no to a confirmation (``quill sessions delete``); nothing was changed."""

    kind = "aborted"
    exit_code = Exit.ABORTED


class QuarantinedError(QuillError):
    """The writer refused a batch: it broke a rule only the store can check (``reason``, e.g.
    ``duplicate-tool-result``, ``stale-head``; docs/ops.md). Nothing of it was applied; the
    record is kept in the spool's quarantine. Raised by callers that need the batch applied
    (``Client.wait`` itself returns an ``Outcome`` instead)."""

    kind = "quarantined"
    default_hint = (
        "fix what the reason names and send the batch again; "
        "`quill spool status` counts quarantined records"
    )

    def __init__(self, message: str, *, reason: str, detail: str = "", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason
        self.detail = detail


class SpoolFullError(QuillError):
    """The filesystem holding the spool is full; no partial record was left."""

    kind = "disk_full"
    default_hint = (
        "free disk space under the data dir, then retry the same call (nothing was appended)"
    )


class StoreBusyError(QuillError):
    """The store could not be used right now; retrying may succeed: locked (SQLITE_BUSY/
    LOCKED) past the retry budget, or (PostgreSQL) its server out of reach, a conflict with
    another transaction, a standby, a refused role (``TRANSIENT_HINTS`` by the store error's
    ``reason``)."""

    kind = "busy"
    default_hint = (
        "retry shortly; the writer holds the store during a checkpoint or maintenance job"
    )


class OverloadedError(QuillError):
    """The process (EMFILE) or the system (ENFILE) had no file descriptor left to open the
    store, a file or a socket: nothing is wrong with the data; retry shortly."""

    kind = "overloaded"
    descriptors_exhausted = True  # quill.home.descriptors.is_exhaustion
    default_hint = (
        "retry shortly; if it lasts, raise the descriptor limit (`ulimit -n`, LimitNOFILE=) "
        "or find what holds descriptors (`ls /proc/PID/fd`)"
    )


class StoreDamagedError(QuillError):
    """The store file is damaged (SQLITE_CORRUPT / NOTADB) or was replaced."""

    kind = "damaged"
    default_hint = (
        "`quill status` shows whether the writer halted on it; `quill recover` rebuilds the "
        "store from the newest snapshot plus the spool"
    )


class StoreMissingError(StoreDamagedError):
    """The SQLite store file is gone and the spool alone no longer holds its history (a
    snapshot exists, or the spool starts past segment 1): reads refuse to answer as if
    nothing had been applied. ``quill recover`` restores the newest snapshot and replays the
    spool (``ops.client.stores.lost_store``; ``quill status`` says "store MISSING")."""


class QueueUnavailableError(QuillError):
    """The job queue (the Redis server of ``[queue] url``, or ``queue.db``) cannot be
    reached: nothing was queued. Appends and the drain do not need it."""

    kind = "queue_unavailable"
    exit_code = Exit.QUEUE_UNAVAILABLE
    default_hint = (
        "start or reach the queue's server (`[queue] url` in config.toml), then retry; "
        "`quill status` shows since when it is unreachable"
    )


class ScheduleUnreadableError(QuillError):
    """``schedule.db`` cannot be read or written (damaged, not a database, locked, full):
    nothing was read or changed. ``damaged``: the file itself is bad (it stays so until it is
    replaced or moved aside), else it is busy or out of reach right now."""

    kind = "schedule_unreadable"

    def __init__(self, message: str, *, damaged: bool, hint: str | None = None):
        if hint is None and damaged:
            hint = (
                "move schedule.db aside: the scheduler recreates the default schedules by "
                "itself (your own `quill schedule` changes in it are lost; re-apply them); "
                "`quill status` shows the state"
            )
        elif hint is None:
            hint = "retry shortly; if it lasts, check the data dir's free space (`quill doctor`)"
        super().__init__(message, hint=hint)
        self.damaged = damaged


class StorageError(QuillError):
    """Any other I/O, permission or configuration problem with the data dir."""

    kind = "storage"
    default_hint = "check the data dir's permissions and free space (`quill doctor`)"


def busy_with(
    exc: BaseException,
    doing: str,
    hint: str,
    held: str = "the store (a running `quill run`?)",
) -> StorageError:
    """The error for a lease another process holds (``quill.store.errors.LeaseHeldError``):
    who holds it (its pid) and ``held``, what it holds, in the message, what to do in the
    hint — never the raw lease record."""
    holder = getattr(exc, "holder", None) or {}
    who = f"pid {holder['pid']}" if holder.get("pid") else "another process"
    return StorageError(f"{doing}: {who} holds {held}", hint=hint)


# The mapping of lower layers' exceptions to the classes above (``from_exception``) and its
# hints live in ``error_map``; re-exported here, the one public name for callers.
from quill.ops.client.error_map import (  # noqa: E402
    POSTGRES_HINTS,
    TRANSIENT_HINTS,
    from_exception,
)

__all__ = ["POSTGRES_HINTS", "TRANSIENT_HINTS", "from_exception"]
