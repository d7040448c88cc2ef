"""The spool's error tree: every error the spool raises is a ``SpoolError``.

Classified by type (and by ``errno`` where the OS gives one), never by message text.
"""

from __future__ import annotations

from typing import Any


class SpoolError(Exception):
    """Base of every error raised by the ``spool`` package."""

    #: Set only on an error raised by ``Spool.append_many``: the ``Ack`` of each record made
    #: durable before the failure (absent otherwise: test with ``hasattr``).
    acks: list[Any]


class SpoolFullError(SpoolError):
    """The filesystem holding the spool is full (ENOSPC / EDQUOT).

    No partial record is left behind: the append was rolled back (ftruncate) before this
    was raised. ``path`` is the segment, ``free_bytes`` the free space seen at the time.
    """

    def __init__(self, path: str, free_bytes: int):
        super().__init__(f"spool is full: no space to append to {path} ({free_bytes} bytes free)")
        self.path = path
        self.free_bytes = free_bytes


class DescriptorsExhaustedError(SpoolError):
    """No file descriptor was left (errno EMFILE or ENFILE, ``quill.home.descriptors``) to
    open a segment, its seal record or the doorbell: nothing was appended and nothing is
    wrong with the spool; retry shortly (HTTP: 503 ``overloaded``)."""

    descriptors_exhausted = True


class SpoolLocationError(SpoolError, ValueError):
    """A producer was pointed at a directory that is neither a spool directory nor a Quill
    data dir (or at a file): appending there would acknowledge records no writer drains.
    ``path`` is the directory given, ``found`` a few of the unrelated entries in it."""

    def __init__(self, path: str, found: list[str]):
        shown = ", ".join(found[:5]) + (" …" if len(found) > 5 else "")
        super().__init__(
            f"{path} is neither a spool directory (segments NNNNNNNN.jsonl, quarantine/) "
            "nor a Quill data dir (spool/, state.db, config.toml); "
            f"it holds {shown}. Pass the data dir or its spool/ folder"
        )
        self.path = path
        self.found = found


class InvalidOpError(SpoolError, ValueError):
    """A producer asked to append something that is not a valid op (unknown kind, bad shape)."""


class RecordTooLargeError(InvalidOpError):
    """A record whose encoded line (``size`` bytes) exceeds the spool's ``limit``
    (``[spool] max_record_bytes``): refused before anything is written, so never acknowledged."""

    def __init__(self, size: int, limit: int):
        super().__init__(
            f"the record is {size} bytes encoded; the limit is {limit} bytes "
            "([spool] max_record_bytes): nothing was appended"
        )
        self.size = size
        self.limit = limit


class DamagedRecordError(SpoolError):
    """A spool line that cannot be decoded: bad JSON, checksum mismatch, unknown version, NULs.

    ``reason`` is a short machine-readable tag (``bad-json``, ``checksum``, ``version``,
    ``shape``) and ``detail`` a human explanation.
    """

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class WaitTimeoutError(SpoolError, TimeoutError):
    """Read-your-writes wait gave up before the writer applied the batch."""


class NotDrainingError(WaitTimeoutError):
    """A read-your-writes wait that was told to fail fast gave up early: nothing drains the
    spool (no fleet and no writer holds its lease, or the writer's sticky halt applies to
    the store), so waiting longer could not see the record applied. The record is durable."""
