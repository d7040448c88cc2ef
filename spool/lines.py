"""Reading spool lines in bounded memory, whoever wrote them.

Producers refuse a record over ``[spool] max_record_bytes`` before the ack, but a line written
by a foreign or older producer (or by hand) can be any length. Every reader of spool lines
reads through ``read_line``: a line of at most ``limit`` bytes (its ``\\n`` included) comes
back whole; a longer one is *streamed* past — never held — and comes back as an ``OverLimit``
with its first ``HEAD_BYTES``, its size and the digest of all its bytes. The memory for one
line is therefore at most ``limit`` bytes plus one block, whatever the line's length.

The digest is the one ``spool.cursor_proof.proof`` gives a line that holds no record
(sha256 of ``b"raw\\0"`` and the line's bytes), so a cursor after an over-limit line is proved
like any other.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

#: Bytes of an over-limit line kept (quarantine entry, attribution by ``decode_lenient``): the
#: envelope (op, batch, producer, seq, ts) always fits.
HEAD_BYTES = 64 << 10
#: Block size used to stream past an over-limit line.
_BLOCK = 1 << 20
#: Quarantine reason of a line over the record-size limit.
OVER_LIMIT = "over-limit"
_STR = rb'"(?:[^"\\\x00-\x1f]|\\.)*"'
#: The envelope producers write first (``record.encode``: keys v, op, batch, producer, seq).
_ENVELOPE = re.compile(
    rb'\{"v":1,"op":(' + _STR + rb'),"batch":(' + _STR + rb")"
    rb'(?:,"producer":(' + _STR + rb'),"seq":(-?[0-9]+)[,}])?'
)


@dataclass(frozen=True)
class OverLimit:
    """A line longer than the limit: ``head`` (its first ``HEAD_BYTES``), ``size`` (bytes,
    its ``\\n`` included when ``terminated``), ``digest`` (hex sha256 of ``b"raw\\0"`` + all
    its bytes) and whether a ``\\n`` ended it (False: the file ended first)."""

    head: bytes
    size: int
    digest: str
    terminated: bool


def read_line(f: BinaryIO, limit: int) -> bytes | OverLimit:
    """The next line of ``f`` (with its ``\\n``; without one at the end of the file), or an
    ``OverLimit`` when it is longer than ``limit`` bytes: then ``f`` is left after the
    line's ``\\n`` (or at the end of the file). ``b""`` at the end of the file. Reads at most
    ``limit + 1`` bytes into one object, then blocks of 1 MiB. Raises ``OSError``."""
    line = f.readline(limit + 1)
    if len(line) <= limit:
        return line
    digest = hashlib.sha256(b"raw\0")
    digest.update(line)
    head, size, terminated = bytes(line[:HEAD_BYTES]), len(line), line.endswith(b"\n")
    del line
    while not terminated:
        block = f.readline(_BLOCK)
        if not block:
            break
        digest.update(block)
        size += len(block)
        terminated = block.endswith(b"\n")
    return OverLimit(head, size, digest.hexdigest(), terminated)


def iter_lines(
    path: str | os.PathLike[str], limit: int, start: int = 0
) -> Iterator[tuple[int, bytes | OverLimit]]:
    """``(offset, line)`` for each line of the file at ``path`` from byte ``start`` on, in
    bounded memory (``read_line``: a line over ``limit`` comes as an ``OverLimit``); the last
    line may lack its ``\n``. Raises ``OSError`` (``FileNotFoundError`` for a missing file)."""
    with open(path, "rb", buffering=_BLOCK) as f:
        f.seek(start)
        offset = start
        while True:
            line = read_line(f, limit)
            if not line:
                return
            yield offset, line
            offset += line.size if isinstance(line, OverLimit) else len(line)


def envelope(head: bytes) -> dict[str, object] | None:
    """``{"op", "batch", "producer"?, "seq"?}`` from the first bytes of a record line (the
    envelope ``record.encode`` writes before ``data``), checksum unchecked, or None when
    ``head`` does not open like a record. For attributing an over-limit line (quarantine,
    sequence evidence, its cursor proof), never for applying it."""
    m = _ENVELOPE.match(head)
    if m is None:
        return None
    try:
        out: dict[str, object] = {"op": json.loads(m[1]), "batch": json.loads(m[2])}
        if m[3] is not None:
            out["producer"], out["seq"] = json.loads(m[3]), int(m[4])
    except ValueError:
        return None
    return out


def over_limit_detail(size: int, limit: int) -> str:
    """The quarantine detail of an over-limit line of ``size`` bytes."""
    return (
        f"line of {size} bytes exceeds [spool] max_record_bytes ({limit} bytes): written by a "
        "producer that did not enforce the limit, and never read whole (to apply it, raise "
        "the limit and retry its quarantine entry)"
    )
