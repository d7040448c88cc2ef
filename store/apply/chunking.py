"""What a chunk is, before any store is involved: the spool entries the appliers take
(``EntryLike``), how many of them make one chunk (``take_chunk``: sized in message rows), the
arrival time each op is applied with, the cursor and proof a chunk commits, and the one drain
step both backends run (``drain_chunk``). Store-free: the op rules that apply a chunk are in
``store.apply.chunk``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from quill.spool import cursor_proof


class EntryLike(Protocol):
    """What ``apply_chunk`` needs of a spool entry (``spool.Entry`` satisfies it)."""

    position: Any
    next: Any
    raw: bytes
    record: dict[str, Any] | None
    damage: Exception | None

    @property
    def size(self) -> int: ...  # the line's length in bytes


#: ``on_reject(entry, reason, detail)``: called inside the transaction, before COMMIT.
RejectFn = Callable[[EntryLike, str, str], None]


@dataclass
class ChunkResult:
    """Figures for one committed chunk (counts of entries, except ``rows``)."""

    applied: int = 0
    duplicates: int = 0
    rejected: int = 0
    rows: int = 0
    batches: list[str] = field(default_factory=list)


def entry_rows(entry: EntryLike) -> int:
    """How many message rows an entry will write: chunks are sized in rows, not ops."""
    rec = entry.record
    if rec and rec.get("op") == "messages.append" and isinstance(rec.get("data"), dict):
        msgs = rec["data"].get("messages")
        return max(1, len(msgs)) if isinstance(msgs, list) else 1
    return 1


def take_chunk(entries: Iterable[EntryLike], chunk_rows: int) -> list[EntryLike]:
    """The next chunk from ``entries``: consecutive entries totalling about ``chunk_rows``
    message rows (default 500 in the config). An op larger than that is a chunk of its own,
    because a batch is applied all-or-nothing."""
    chunk: list[EntryLike] = []
    rows = 0
    for entry in entries:
        n = entry_rows(entry)
        if chunk and rows + n > chunk_rows:
            break
        chunk.append(entry)
        rows += n
    return chunk


def arrival_time(record: dict[str, Any], now: float) -> float:
    """The arrival time an op is applied with (``created_at``, ``arrived_at``, default
    timestamps, ``ended_at``): the record's own append time ``ts`` (epoch seconds), so the live
    store and any rebuild from snapshot + replay write the same values. ``now`` only for a
    record without a usable ``ts`` (not a finite positive number)."""
    ts = record.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts) and ts > 0:
        return float(ts)
    return now


def cursor_values(entries: Sequence[EntryLike]) -> tuple[int, int, int, str]:
    """The cursor after ``entries`` and its proof: ``(segment, offset, proof_offset,
    proof)``, where ``proof_offset`` is the start of the last entry (in the cursor's segment:
    an entry never spans segments) and ``proof`` its digest (``spool.cursor_proof.proof``)."""
    last = entries[-1]
    return (last.next[0], last.next[1], last.position[1], cursor_proof.proof(last))


class ReaderLike(Protocol):
    """What ``drain_chunk`` needs of a spool reader (``spool.SpoolReader`` satisfies it)."""

    def read(self, start: Any, *, max_bytes: int) -> Iterable[EntryLike]: ...


class ApplyFn(Protocol):
    """A backend's chunk application: ``apply(entries, on_reject) -> ChunkResult`` (the
    contract's ``Backend.apply_chunk``; for SQLite, ``apply_chunk`` on a writer connection)."""

    def __call__(self, entries: Sequence[EntryLike], on_reject: RejectFn) -> ChunkResult: ...


def drain_chunk(
    apply: ApplyFn,
    reader: ReaderLike,
    position: Any,
    chunk_rows: int,
    on_reject: RejectFn,
    max_bytes: int = 8 << 20,
) -> tuple[list[EntryLike], ChunkResult]:
    """The one drain step shared by the writers of both backends, ``spool replay`` and
    ``recover``: read from ``position`` (at most ``max_bytes`` bytes), take one chunk of about
    ``chunk_rows`` message rows and apply it with the cursor (``apply``: the backend's
    ``apply_chunk``). Returns (entries applied, figures); no entries means the spool is
    drained up to its end."""
    entries = take_chunk(reader.read(position, max_bytes=max_bytes), chunk_rows)
    return entries, (apply(entries, on_reject) if entries else ChunkResult())


def chunk_batches(entries: Sequence[EntryLike]) -> list[str]:
    """The batch ids of ``entries`` that are strings, in spool order (what
    ``apply_entries`` asks ``Ledger.decided`` about)."""
    return [
        e.record["batch"] for e in entries if e.record and isinstance(e.record.get("batch"), str)
    ]
