"""The proof a store keeps with a spool cursor, and the check a writer makes before resuming.

A cursor ``(segment, offset)`` alone is a byte offset: resumed against another spool (a data
dir copied with its id, a store restored from another host's backup, a cursor row copied by
hand) it silently skips records or lands in the middle of a line. So the store keeps, in the
same transaction as the cursor, the start offset of the last entry it applied and a digest of
that entry (``proof``); before resuming, the writer re-reads that entry from its own spool
(``check``): it must start at ``proof_offset``, end exactly at the cursor (a record boundary)
and have the same digest. Records carry a random batch id, so two spools agree on that entry
only when they hold the same record at the same place.

The digest is over what a purge keeps (``spool.purge``: a same-length tombstone keeps the
batch id, producer, sequence number and length): batch, producer, seq and the line's length.
A damaged line (no record) is digested by its bytes; purge never rewrites one. A line over
the record-size limit is never read whole (``spool.lines``): its digest is computed while it
is streamed past, the same value. A change of ``[spool] max_record_bytes`` can turn the line
before a cursor from a record into an over-limit line or back; ``check`` accepts the proof in
either form, so that change never reads as another spool's cursor.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool.lines import envelope
from quill.spool.segments import Position, list_segments, segment_name

#: Bytes read to find the proved entry: one line of the spool (its reader streams past a line
#: over the limit, so this bounds nothing but the count of lines).
_READ_BYTES = 1


def proof(entry: Any) -> str:
    """The hex digest (sha256) that proves ``entry`` (a ``spool.Entry``): of its batch id,
    producer, sequence number and byte length when it holds a record, else of its bytes."""
    rec = entry.record
    if rec is not None and isinstance(rec.get("batch"), str):
        return _record_proof(rec, len(entry.raw))
    over = getattr(entry, "over", None)
    if over is not None:  # over the limit: the digest of all its bytes, taken while streaming
        return over.digest
    return hashlib.sha256(b"raw\0" + bytes(entry.raw)).hexdigest()


def _record_proof(rec: dict[str, Any], size: int) -> str:
    key = "\0".join((rec["batch"], str(rec.get("producer")), str(rec.get("seq")), str(size)))
    return hashlib.sha256(b"record\0" + key.encode("utf-8", "surrogatepass")).hexdigest()


def _forms(entry: Any) -> set[str]:
    """Every proof ``entry`` may carry in a store: ``proof(entry)``, and the other form the
    same line takes under another record-size limit (module doc)."""
    forms = {proof(entry)}
    if entry.record is not None:  # read whole now; maybe over the limit when applied
        forms.add(hashlib.sha256(b"raw\0" + bytes(entry.raw)).hexdigest())
    elif entry.over is not None:  # over the limit now; maybe a record when applied
        env = envelope(entry.over.head)
        if env is not None and isinstance(env["batch"], str):
            forms.add(_record_proof(env, entry.over.size))
    return forms


def check(
    spool_dir: str | os.PathLike[str],
    cursor: Position,
    proof_offset: int | None,
    expected: str | None,
    *,
    max_line: int = DEFAULTS.max_record_bytes,
) -> str | None:
    """Whether the store's ``cursor`` belongs to the spool at ``spool_dir``: None when it
    does, else what is wrong (one sentence).

    With a proof (``proof_offset``, ``expected``): the entry at ``proof_offset`` of the
    cursor's segment must end exactly at the cursor and digest to ``expected``. Without one (a
    cursor written by an older Quill) only the boundary is checked: the cursor is at the start
    of its segment, right after a ``\\n``, or at the end of a sealed segment (a torn tail).
    Either way a cursor past the end of the spool is refused. A cursor in a segment that
    retention deleted (a later segment exists) cannot be checked and is accepted: retention
    deletes only segments the cursor is past. ``max_line``: the reader's line limit (the
    data dir's ``[spool] max_record_bytes``)."""
    from quill.spool.reader import SpoolReader

    spool_dir = Path(spool_dir)
    segments = list_segments(spool_dir)
    if cursor.segment not in segments:
        if any(n > cursor.segment for n in segments):
            return None
        last = segments[-1] if segments else None
        return (
            f"the cursor {cursor} is past the end of this spool "
            f"({'no segments' if last is None else f'its last segment is {segment_name(last)}'})"
        )
    size = os.stat(spool_dir / segment_name(cursor.segment)).st_size
    if cursor.offset > size:
        return (
            f"the cursor {cursor} is past the end of {segment_name(cursor.segment)} "
            f"({size} bytes): it was written for another spool"
        )
    if expected is None or proof_offset is None:
        return _boundary(spool_dir, cursor, size, segments)
    if cursor.offset == 0 or proof_offset >= cursor.offset:
        return f"the cursor {cursor} does not follow the entry it names ({proof_offset})"
    start = Position(cursor.segment, proof_offset)
    reader = SpoolReader(spool_dir, max_line=max_line)
    entry = next(iter(reader.read(start, max_bytes=_READ_BYTES)), None)
    if entry is None or entry.position != start or entry.next != cursor:
        found = "nothing" if entry is None else f"an entry from {entry.position} to {entry.next}"
        return (
            f"the cursor {cursor} does not end the entry the store applied last "
            f"(at {start}); this spool has {found} there: the cursor is another spool's"
        )
    if expected not in _forms(entry):
        return (
            f"the entry before the cursor {cursor} (at {start}) is not the one the store "
            "applied: the cursor is another spool's"
        )
    return None


def _boundary(spool_dir: Path, cursor: Position, size: int, segments: list[int]) -> str | None:
    if cursor.offset == 0:
        return None
    with open(spool_dir / segment_name(cursor.segment), "rb") as f:
        f.seek(cursor.offset - 1)
        before = f.read(1)
    sealed_end = cursor.offset == size and segments[-1] > cursor.segment
    if before == b"\n" or sealed_end:
        return None
    return f"the cursor {cursor} is in the middle of a line of this spool: it is another spool's"
