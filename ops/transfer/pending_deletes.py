"""Deletes still pending in the spool: ``sessions.delete`` records past the store's cursor.

A command that decides from the store view what to spool (``quill import``: "the store holds
these messages, spool nothing") decides wrong for a session whose delete is in the spool but
not yet applied: once the writer applies the delete, what the view showed is gone. So such a
command asks here first and decides as if the pending deletes were applied
(docs/importers.md, "A delete still in the spool").

Invariant: records are read from the store's cursor (every record before it is already in the
view) to the end of the spool; no store is read as "nothing applied" (cursor = the oldest
segment). Cost: one read of the unapplied part of the spool, a line at a time (a line over the
record-size limit is streamed past, ``spool.lines``: the writer refuses it, so it deletes
nothing), with a byte filter (only lines naming ``sessions.delete`` are decoded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool import Position, record
from quill.spool.errors import DamagedRecordError
from quill.spool.lines import OverLimit, iter_lines
from quill.spool.segments import list_segments, segment_name

OP = "sessions.delete"
_NEEDLE = OP.encode()  # the byte filter: only lines naming the op are decoded


@dataclass
class PendingDeletes:
    """Sessions named by an unapplied ``sessions.delete``: ``certain`` by one without
    ``only_if`` (it deletes the session whatever the store holds), ``conditional`` by one whose
    ``only_if`` the writer decides when it applies it (its outcome cannot be known here). A
    delete's ``deletions_seen`` leaves it certain: it skips a session only when another delete
    came first, so the session is deleted either way; a caller that takes it as deleted
    once too often only spools more than needed (the writer skips what the store holds)."""

    certain: set[str] = field(default_factory=set)
    conditional: dict[str, str] = field(default_factory=dict)  # sid -> the delete's reason

    def __bool__(self) -> bool:
        return bool(self.certain or self.conditional)

    def __contains__(self, sid: object) -> bool:
        """Whether any pending delete (certain or conditional) names ``sid``."""
        return sid in self.certain or sid in self.conditional


def _cursor(store: Any) -> Position | None:
    """The store's spool cursor, or None when there is no store or it applied nothing yet."""
    if store is None:
        return None
    cursor = store.figures().get("cursor")
    return Position.parse(cursor) if cursor else None


def pending_deletes(spool_dir: str | Path, store: Any) -> PendingDeletes:
    """The ``sessions.delete`` records of ``spool_dir`` at or past ``store``'s cursor (a
    ``Reader``, or None when there is no store yet; module doc)."""
    return pending_deletes_from(spool_dir, _cursor(store))


def pending_deletes_from(spool_dir: str | Path, start: Position | None) -> PendingDeletes:
    """The ``sessions.delete`` records of ``spool_dir`` at or past ``start`` (None: the whole
    spool). A delete with ``only_if`` makes its sessions ``conditional`` unless another
    pending delete names them without one."""
    spool_dir = Path(spool_dir)
    found = PendingDeletes()
    for n in list_segments(spool_dir):
        if start is not None and n < start.segment:
            continue
        skip = start.offset if start is not None and n == start.segment else 0
        try:  # the unapplied part only
            lines = list(_deletes(spool_dir / segment_name(n), skip))
        except FileNotFoundError:  # collected meanwhile: it was applied, so not pending
            continue
        for line in lines:
            try:  # strict: a damaged delete is quarantined by the writer, never applied
                rec = record.decode(line)
            except DamagedRecordError:
                continue
            if rec["op"] != OP or not isinstance(rec["data"], dict):
                continue
            sids = [s for s in rec["data"].get("session_ids") or () if isinstance(s, str)]
            if rec["data"].get("only_if"):
                reason = str(rec["data"].get("reason") or "deleted")
                for sid in sids:
                    found.conditional.setdefault(sid, reason)
            else:
                found.certain.update(sids)
    for sid in found.certain:
        found.conditional.pop(sid, None)
    return found


def _deletes(path: Path, start: int) -> Any:
    """The lines of the segment at ``path`` from byte ``start`` that name the op (byte filter),
    read a line at a time; lines over the record-size limit are skipped unread."""
    for _, line in iter_lines(path, DEFAULTS.max_record_bytes, start):
        if not isinstance(line, OverLimit) and _NEEDLE in line:
            yield line
