"""Spooling an importer's event stream as ops: only what the store lacks, in bounded batches.

``import_file(spool, path, store)`` reads one transcript file through
``importers.stream_file`` and appends ops to the spool as it goes, so memory stays bounded by
one batch per open session whatever the file size:

* ``SessionStart`` -> its session id is settled first: a ``legacy_id`` (the file-name id an
  older importer gave a format without conversation ids) is used instead when the store's
  session under it holds this conversation's opening messages (same producer ids and
  ``normalize.COMPARED_COLUMNS``: role, content, tool fields, reasoning; an opening entry
  that is only ``{"id"}`` — a uuid, Claude Code — by its id alone), so a file imported
  before content ids does not come back as a second session; a second start of a session
  already started in this file (the same conversation twice in one file) is reported and
  its messages count as stored. Then
  ``session.create``, unless the store already has the session; then
  only a changed title is sent (``session.title``, and only when no other session holds it —
  the title conflict rule of docs/ops.md, which would otherwise refuse the op);
* ``Message`` -> ``messages.append`` batches of at most ``BATCH_MESSAGES`` messages or
  ``BATCH_BYTES`` (approximate) bytes, split further where the store would refuse a batch
  for one message or the spool for its size (``[spool] max_record_bytes``): the message at
  fault is quarantined alone, or, over the record limit alone, reported as a ``skipped``
  problem (a compaction over it, which cannot be split, likewise); a message whose producer
  id the store already holds is not spooled (re-import is cheap: a second import of the same
  file spools nothing and says "0 new") unless the store holds it in a copy that differs
  (``revise.changed``): agents write records again (a Gemini CLI record re-appended whole
  once its tool ran, a ``.json`` session or an export rewritten, an Aider reply still
  growing), and the last copy wins. Every append carries ``revise: true``, so a copy
  reaching a writer that already holds an older one (the store view lagging behind the
  spool) rewrites it too. Messages on abandoned branches are appended, then named in a
  ``messages.rewind {ext_ids}`` right after their batch. A subagent message that a store
  filled by an older importer holds live in the *parent* session is rewound there (the
  parent keeps only its own turns) and appended to the child;
* ``Compact`` -> the pending batch is flushed, then ``messages.compact`` (when the store or
  this import left live rows to compact; else the compacted set is simply appended);
  when the store holds its messages already, only those held in another copy are sent
  again (as revisions);
* ``Rewind`` -> the pending batch is flushed, then ``messages.rewind {ext_ids}``;
* ``Usage`` -> ``usage.record`` (after the session's pending messages), unless the store
  (or this import) already counted its ``response_id`` with counts at least as large (the
  writer keeps each count's maximum over a call's records).

Batch ids are stable (``ingest.stable_batch_id`` over what a batch is: its ids and its
content), so an import racing a writer that has not yet applied the previous import is
still applied once, and a later copy of the same messages is a batch of its own (an id
over the message ids alone made it a reuse of the earlier batch id, quarantined).
The store view is a read-only ``Reader`` (None before any store exists); it may lag behind
the spool, which only costs spool space, never a duplicate row (the store skips known ids).
A lagging view is wrong in one way that loses data: a session whose ``sessions.delete`` is
still in the spool (``pending_deletes``) looks stored, but will be gone once the delete
applies. Invariant: the import decides as if the pending deletes were applied — a session an
unconditional delete names (or a delegate child that goes with it) is imported whole as a
session deleted once more (``deletions + 1`` in its batch ids, so none is a duplicate of its
deleted batches); one a conditional delete (``only_if``, a job's) names is skipped and
reported, since only the writer can tell whether it will be deleted.

``import_sessions.py`` holds the report, the per-session state and the ``SessionStart``
handling; this module the batching of the other events and ``import_file``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quill.ops.importers import (
    Compact,
    Message,
    Problem,
    Rewind,
    SessionStart,
    Usage,
    stream_file,
)
from quill.ops.importers.source import Source, opened
from quill.ops.transfer.import_sessions import FileReport, SessionStarts, SessionState
from quill.ops.transfer.pending_deletes import PendingDeletes, pending_deletes
from quill.spool import RecordTooLargeError, Spool
from quill.store.apply.message_rows import cut_rows
from quill.store.apply.precheck import precheck
from quill.store.apply.revise import changed
from quill.store.apply.rules import session_id_problem
from quill.store.apply.usage_fields import TOKEN_FIELDS, normalize_usage
from quill.store.errors import InvalidOpError
from quill.store.read.reader import Reader

#: Messages per ``messages.append`` op: a batch is all-or-nothing, so smaller batches confine
#: a bad message; 200 keeps records well under a megabyte for typical turns.
BATCH_MESSAGES = 200
#: Approximate bytes per batch (string lengths): bounds import memory and spool record size
#: when messages are large (a screenshot is ~0.5 MB of base64).
BATCH_BYTES = 4 << 20


def approx_size(value: Any) -> int:
    """Characters of every string in a JSON value (a cheap stand-in for its encoded size)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + approx_size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(approx_size(v) for v in value)
    return 8


class _Importer(SessionStarts):
    """Turns one file's events into spool ops (see module doc): the session starts
    (``SessionStarts``), then messages batched, compactions, rewinds and usage."""

    def message(self, ev: Message) -> None:
        s = self.session(ev.session_id)
        if s.skipped:
            return
        ext = str(ev.message["id"])
        self.report.messages += 1
        self.report.rewound += ev.rewound
        parent = self.sessions.get(s.parent) if s.parent else None
        if parent is not None and parent.known.get(ext) == "live":
            # an earlier import (before subagents were children) put this turn in the parent:
            # take it back there, so the parent holds only its own turns
            parent.pending_rewound.append(ext)
            parent.known[ext] = "moved"
        if s.known.get(ext) == "refused":  # over the record limit: reported once already
            return
        if ext in s.known:
            self.report.stored += 1
            if s.known[ext] != "pending" and self._older_copy(s, ev.message):
                self._revision(s, ev.message)
            if ev.rewound and s.known[ext] == "live":  # the file grew a branch that abandons it
                s.pending_rewound.append(ext)
            return
        s.known[ext] = "pending"
        s.pending.append(ev.message)
        s.pending_bytes += approx_size(ev.message)
        if ev.rewound:
            s.pending_rewound.append(ext)
        else:
            s.has_live = True
        if len(s.pending) >= BATCH_MESSAGES or s.pending_bytes >= BATCH_BYTES:
            self.flush(s)

    def compact(self, ev: Compact) -> None:
        s = self.session(ev.session_id)
        if s.skipped:
            return
        self.flush(s)
        self.report.compactions += 1
        ids = [str(m["id"]) for m in ev.messages]
        self.report.messages += len(ids)  # read from the file too: read = new + already stored
        if all(i in s.known for i in ids):
            self.report.stored += len(ids)
            for m in ev.messages:  # a carried message re-appended since: its last copy wins
                if s.known[str(m["id"])] != "pending" and self._older_copy(s, m):
                    self._revision(s, m)
            return
        self.report.new += len(ids)
        self.report.compacted_new += len(ids)
        for i in ids:
            s.known[i] = "pending"
        if not s.has_live:  # nothing live to summarise (e.g. a file that starts compacted)
            self._append(s, ev.messages)
        else:
            try:
                self.spool.append(
                    "messages.compact",
                    s.fenced(
                        {"session_id": s.sid, "messages": ev.messages, "tail_count": ev.tail_count}
                    ),
                    batch_id=s.batch_id("import-compact", s.sid, ids, ev.messages),
                )
            except RecordTooLargeError as exc:  # one op, all or nothing: it cannot be split
                what = f"compaction of {len(ids)} message(s)"
                self._refused(s, ids, what, exc, compacted=True)
                return
        s.has_live = True

    def rewind(self, ev: Rewind) -> None:
        s = self.session(ev.session_id)
        if s.skipped:
            return
        self.flush(s)
        self.report.rewound += len(ev.ext_ids)
        self._rewind(s, [i for i in ev.ext_ids if s.known.get(i) in ("live", "pending")])

    def usage(self, ev: Usage) -> None:
        s = self.session(ev.session_id)
        if s.skipped:
            return
        rid = ev.data.get("response_id")
        counts = _counts(ev.data.get("usage"))
        if rid in s.counted and not _more(counts, s.counted[rid]):
            return  # counted, and this copy counts nothing more
        self.flush(s)
        data = {"session_id": s.sid, **ev.data}
        batch = s.batch_id("import-usage", data)
        self.spool.append("usage.record", s.fenced(data), batch_id=batch)
        if rid is not None:  # the store keeps each field's maximum over a call's records
            known = s.counted.get(rid) or {}
            s.counted[rid] = {f: max(counts.get(f, 0), known.get(f, 0)) for f in TOKEN_FIELDS}

    def _older_copy(self, s: SessionState, msg: dict) -> bool:
        """Whether the store holds ``msg``'s id in a copy that differs from it (a record the
        agent wrote again since the store read it: ``store.apply.revise``). A message the
        writer would refuse is not sent again (its first copy stays)."""
        if self.store is None:
            return False
        if s.versions is None:
            s.versions = self.store.message_versions(s.sid)
        held = s.versions.get(str(msg["id"]))
        if not held:
            return False
        try:  # as the writer stores it: binary payloads cut out as blob references
            row = cut_rows([msg], time.time())[0][0]
        except InvalidOpError:
            return False
        return any(changed(v, row, msg) for v in held)

    def _revision(self, s: SessionState, msg: dict) -> None:
        """Queue ``msg``, a later copy of a held message, in the session's next append."""
        self.report.revised += 1
        s.pending.append(msg)
        s.pending_bytes += approx_size(msg)
        s.pending_revised += 1
        if len(s.pending) >= BATCH_MESSAGES or s.pending_bytes >= BATCH_BYTES:
            self.flush(s)

    def flush(self, s: SessionState) -> None:
        if s.pending:
            self.report.new += len(s.pending) - s.pending_revised
            self._append(s, s.pending)
        self._rewind(s, [i for i in s.pending_rewound if s.known.get(i) != "refused"])
        s.pending, s.pending_bytes, s.pending_rewound = [], 0, []
        s.pending_revised = 0

    def _append(self, s: SessionState, messages: list[dict]) -> None:
        """Spool ``messages`` as ``messages.append`` records, each one the store takes whole:
        a batch is all or nothing, so a batch the store would refuse for one message
        (``precheck``: an id over the limits, a bad role…) or the spool for its size
        (``RecordTooLargeError``: nothing of it was appended) is split in halves, down to one
        message, and the rest of the file is stored. A message the store refuses alone is
        spooled alone (the writer quarantines it with its reason, where
        ``quill spool quarantine`` finds it) and reported; one over the record limit alone
        cannot be spooled and is reported (``skipped`` problems naming it). The split depends
        only on the batch, so an import of the same file again derives the same batch ids.
        A session whose id itself is refused is not split (every part would be refused).

        ``revise``: a message the store holds by the time this applies (an earlier round's
        append the store view did not show yet) is rewritten by this later copy, never
        skipped. The batch id covers the content, so a later copy is a new batch."""
        ids = [str(m["id"]) for m in messages]
        data = s.fenced({"session_id": s.sid, "messages": messages, "revise": True})
        batch = s.batch_id("import-append", s.sid, ids, messages)
        try:
            plain = precheck("messages.append", data, batch)
        except InvalidOpError as exc:
            if len(messages) > 1 and session_id_problem(s.sid) is None:
                self._halves(s, messages)
                return
            plain = False  # spooled as it is: the writer quarantines it, with this reason
            self.report.problems.append(
                Problem(
                    str(self.report.path),
                    None,
                    "skipped",
                    f"session {s.sid}: message {ids[0]!r}"
                    + (f" (and {len(ids) - 1} more)" if len(ids) > 1 else "")
                    + f": {exc}; spooled alone: the writer quarantines it "
                    "(`quill spool quarantine list`)",
                )
            )
        try:
            self.spool.append("messages.append", data, batch_id=batch, plain=plain)
        except RecordTooLargeError as exc:
            if len(messages) == 1:
                self._refused(s, ids, f"message {ids[0]!r}", exc)
                return
            self._halves(s, messages)

    def _halves(self, s: SessionState, messages: list[dict]) -> None:
        half = len(messages) // 2
        self._append(s, messages[:half])
        self._append(s, messages[half:])

    def _refused(
        self, s: SessionState, ids: list[str], what: str, exc: Exception, *, compacted: bool = False
    ) -> None:
        """``ids`` of ``s`` were not spooled: over the record limit alone (``exc``). A later
        copy of a message the store holds (a revision) keeps the held copy and its state."""
        fresh = [i for i in ids if s.known.get(i) == "pending"]
        self.report.new -= len(fresh)
        self.report.compacted_new -= len(fresh) if compacted else 0
        for i in fresh:
            s.known[i] = "refused"
        self.report.problems.append(
            Problem(str(self.report.path), None, "skipped", f"session {s.sid}: {what}: {exc}")
        )

    def _rewind(self, s: SessionState, ids: list[str]) -> None:
        if ids:
            self.spool.append(
                "messages.rewind",
                s.fenced({"session_id": s.sid, "ext_ids": ids}),
                batch_id=s.batch_id("import-rewind", s.sid, ids),
            )
            for i in ids:
                s.known[i] = "rewound"

    def finish(self) -> None:
        for s in self.sessions.values():
            self.flush(s)


def _counts(usage: Any) -> dict[str, int]:
    """A usage object's ``TOKEN_FIELDS`` counts as the store reads them; ``{}`` for one it
    cannot read (the writer refuses that usage with its reason)."""
    try:
        return normalize_usage(usage)
    except InvalidOpError:
        return {}


def _more(counts: dict[str, int], known: dict[str, int]) -> bool:
    """Whether a later copy of a call's record counts more than the store holds for it (a
    record written again as its call's usage grew): sent again, merged by the writer."""
    return any(v > known.get(f, 0) for f, v in counts.items())


def import_file(
    spool: Spool,
    path: Path | Source,
    store: Reader | None,
    pending: PendingDeletes | None = None,
) -> FileReport:
    """Import one file into ``spool`` (see module doc); returns its report. ``path``: a
    path (opened once here) or a ``Source`` the caller opened (one version of a file an
    agent is still writing: the watcher's); every read is from that one descriptor
    (``stream_file``). ``pending``: the deletes still in the spool (``pending_deletes``;
    read here when not given — a command importing many files reads it once). Raises
    ``OSError`` for an unreadable file and ``quill.spool.SpoolError`` when appending fails."""
    with opened(path) as src:
        return _import(spool, src, store, pending)


def _import(
    spool: Spool, src: Source, store: Reader | None, pending: PendingDeletes | None
) -> FileReport:
    report = FileReport(path=str(src.path), format=None)
    report.format, events = stream_file(src, report.problems)
    if pending is None:
        pending = pending_deletes(spool.dir, store)
    imp = _Importer(spool, store, report, pending)
    for ev in events:
        if isinstance(ev, SessionStart):
            imp.start(ev)
        elif isinstance(ev, Message):
            imp.message(ev)
        elif isinstance(ev, Compact):
            imp.compact(ev)
        elif isinstance(ev, Usage):
            imp.usage(ev)
        else:
            imp.rewind(ev)
    imp.finish()
    return report


def open_store_view(cfg: Any) -> Reader | None:
    """A read-only view of ``cfg``'s store for import decisions (``stores.open_reader``), or
    None when there is none yet (everything read is then spooled; the writer's batch ids
    still keep a repeat from being applied twice). Raises the store error tree when the store
    exists but cannot be read (damaged, or its server unreachable): deciding "new" without it
    would report every message as new."""
    from quill.ops.client.stores import open_reader
    from quill.store.errors import CantOpenError

    try:
        return open_reader(cfg)
    except CantOpenError:
        return None
