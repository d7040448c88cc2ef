"""A producer's record line: the envelope (version, op, batch id, producer, seq, time) around
an op's data, checked and encoded (``record.encode``), for ``spool.producer.Spool``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from quill.spool import forks, record
from quill.spool.errors import InvalidOpError, RecordTooLargeError

#: Batch ids drawn per ``os.urandom`` call by ``RandomIds``.
_IDS_PER_DRAW = 32


def uuid4(random16: bytes | None = None) -> str:
    """A random UUID (version 4, RFC 9562 §5.4) as its canonical 36-character text: the
    ``str(uuid.uuid4())`` value, without importing ``uuid`` (which imports ``platform``; the
    producer runs once per agent turn in `quill push`, bench/cli.py). ``random16``: 16 bytes
    from ``os.urandom`` to use (``RandomIds``); drawn here when None."""
    raw = bytearray(random16 if random16 is not None else os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant 10xx (RFC 9562)
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class RandomIds:
    """Batch ids for one producer handle, from ``os.urandom`` bytes drawn ``_IDS_PER_DRAW``
    ids at a time (one ``getrandom`` system call for many appends instead of one each). Not
    thread-safe, like the handle that owns it. A forked child never uses bytes its parent
    drew (``spool.forks``): the same bytes in two processes would give two records one
    batch id, and the store applies a batch id once."""

    __slots__ = ("_bytes", "_at", "_generation")

    def __init__(self) -> None:
        self._bytes, self._at, self._generation = b"", 0, -1

    def __call__(self) -> str:
        """A fresh version-4 UUID text (``uuid4``)."""
        at = self._at
        if at >= len(self._bytes) or self._generation != forks.generation():
            self._bytes, at = os.urandom(16 * _IDS_PER_DRAW), 0
            self._generation = forks.generation()
        self._at = at + 16
        return uuid4(self._bytes[at : at + 16])


def line(
    op: str,
    data: dict[str, Any],
    batch_id: str | None,
    *,
    producer: str,
    seq: int,
    fast: bool,
    limit: int,
    plain: bool = False,
) -> tuple[bytes, str]:
    """``(the record's encoded line, its batch id)``: ``line_into`` a fresh buffer. Raises
    what ``line_into`` raises."""
    buf = bytearray()
    _, batch_id = line_into(
        buf, 0, op, data, batch_id, producer=producer, seq=seq, fast=fast, limit=limit, plain=plain
    )
    return bytes(buf), batch_id


def line_into(
    buf: bytearray,
    start: int,
    op: str,
    data: dict[str, Any],
    batch_id: str | None,
    *,
    producer: str,
    seq: int,
    fast: bool,
    limit: int,
    plain: bool = False,
    new_id: Callable[[], str] = uuid4,
) -> tuple[int, str]:
    """Write the record's line into ``buf`` at ``start`` (``record.encode_into``); returns
    ``(the line's end, its batch id)``, a fresh UUID from ``new_id()`` (``uuid4``; a
    producer's ``RandomIds``) when ``batch_id`` is None or empty.

    Raises ``InvalidOpError`` (``op`` not one of ``record.OP_KINDS``, ``data`` not a dict or
    not encodable, nesting past ``record.MAX_NESTING``, a bad batch id) or
    ``RecordTooLargeError`` (the line is over ``limit`` bytes). ``fast``/``plain``: as
    ``record.encode``."""
    if not isinstance(op, str) or op not in record.OP_KINDS:  # a list op is unhashable
        raise InvalidOpError(f"unknown op {op!r}; expected one of {sorted(record.OP_KINDS)}")
    if not isinstance(data, dict):
        raise InvalidOpError(f"op data must be a JSON object, got {type(data).__name__}")
    batch_id = batch_id or new_id()
    if not isinstance(batch_id, str):
        raise InvalidOpError(f"batch id must be a string, got {type(batch_id).__name__}")
    problem = record.id_size_problem(batch_id, "batch id")
    if problem:
        raise InvalidOpError(problem)
    body = {
        "v": record.VERSION,
        "op": op,
        "batch": batch_id,
        "producer": producer,
        "seq": seq,
        "ts": time.time(),
        "data": data,
    }
    try:
        end = record.encode_into(buf, start, body, fast=fast, plain=plain)
    except (TypeError, ValueError) as exc:
        raise InvalidOpError(f"op data is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidOpError(
            f"op data nests too deeply to encode (readers accept at most "
            f"{record.MAX_NESTING} levels)"
        ) from None
    if end - start > limit:
        raise RecordTooLargeError(end - start, limit)
    return end, batch_id
