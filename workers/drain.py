"""The one drain loop: spool entries from the store's committed cursor into the store.

Used by the writer (``workers.writer``), by ``spool replay`` and ``quill recover`` on both
backends (``ops``) and by the tests' harness. Each step is
``store.apply.chunking.drain_chunk``: read from the cursor, take one chunk of about
``chunk_rows`` message rows, apply it in ONE transaction that also moves the store's cursor
(the store contract's ``apply_chunk``). So:

* a crash replays at most the uncommitted chunk, and batch ids make a replay a no-op;
* a refused op is quarantined (``reject``) inside its chunk's transaction, before the commit,
  so it is never lost; the rest of the chunk is applied;
* a failure raises the store error tree with nothing of the chunk committed and ``cursor``
  unmoved, so the caller may retry the same step.

It lives in ``workers`` (not ``store``) because draining is the writer's role: the caller
must hold the writer lease of the spool, and nothing below the workers drains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quill.spool import START, Entry, Position, Quarantine, SpoolReader, cursor_proof
from quill.spool.lines import envelope
from quill.spool.retention import collected_before
from quill.spool.segments import sealed_sizes, segment_name
from quill.store.apply.chunking import ChunkResult, drain_chunk
from quill.store.errors import CursorMismatchError, HistoryNotInSpoolError, SpoolGapError

#: Bytes read per spool scan; bounds memory whatever the spool size.
READ_BYTES = 8 << 20
#: The figures a drain adds up over its steps.
TOTALS = ("applied", "duplicates", "rejected", "rows")


@dataclass
class Step:
    """One drain step: the ``entries`` applied (none: the spool is drained to its end), the
    chunk's figures and the bytes of spool consumed."""

    entries: list[Entry] = field(default_factory=list)
    result: ChunkResult = field(default_factory=ChunkResult)
    nbytes: int = 0


class Drain:
    """Drains ``reader``'s spool into ``store`` (``store.contract.Store``) from ``cursor``.

    ``quarantine``: where refused records go. ``log``: a structlog logger (None: silent);
    events are ``<event>.chunk``, ``<event>.quarantined``, ``<event>.quarantine_resolved``,
    ``<event>.torn_tail_sealed``. ``totals`` adds up applied, duplicates, rejected, rows and
    chunks; ``already_resolved`` counts refused records whose quarantine entry an operator had
    already retried or dropped (re-read after a restart: they stay resolved)."""

    def __init__(
        self,
        store: Any,
        reader: SpoolReader,
        quarantine: Quarantine,
        chunk_rows: int,
        *,
        log: Any = None,
        event: str = "writer",
        max_bytes: int = READ_BYTES,
        check_gaps: bool = True,
    ):
        self.store = store
        self.reader = reader
        self.quarantine = quarantine
        self.chunk_rows = chunk_rows
        self.log = log
        self.event = event
        self.max_bytes = max_bytes
        self.cursor: Position = START
        self.totals = {**dict.fromkeys(TOTALS, 0), "chunks": 0}
        self.already_resolved = 0
        self._fresh: list[Position] = []  # entries the chunk under way made (``step``)
        #: Refuse to move past segments deleted before they were applied (``_crossing``);
        #: False for a replay whose caller checked the spool's gaps itself.
        self.check_gaps = check_gaps
        #: The segment the user accepted to go on at (``RunDir.accepted_start``), if any.
        self.accepted: int | None = None

    def start(self, default: Position = START, accepted: int | None = None) -> Position:
        """Set ``cursor`` to the store's committed cursor (``default`` before the first
        chunk) and return it, once the cursor is proved to be this spool's: it must end the
        entry the store applied last (``spool.cursor_proof.check``). Raises
        ``CursorMismatchError`` (nothing applied; ``cursor`` unmoved) when it does not — a
        cursor shared, copied or restored from another spool would otherwise skip records or
        resume mid-line — and the rest of the store error tree.

        A store with no cursor for this spool starts at the spool's beginning, which holds the
        whole history only while segment 1 is there: past it, ``HistoryNotInSpoolError``
        (nothing applied) unless ``accepted`` (the first segment the user accepted as this
        store's start, ``RunDir.accepted_start``) is at or past the spool's oldest segment."""
        self.accepted = accepted
        row = self.store.read_cursor_proof()
        if not row:
            first = collected_before(self.reader.dir)
            if first is not None and (accepted is None or accepted < first):
                if self.log is not None:
                    self.log.critical(f"{self.event}.history_not_in_spool", first_segment=first)
                raise HistoryNotInSpoolError(
                    f"the store holds no cursor for spool {self.store.spool_id!r} and the "
                    f"spool in {self.reader.dir} starts at segment {first}: segments before it "
                    "were collected after an earlier store applied them, so "
                    "starting here would leave their sessions out; nothing was applied",
                    first,
                )
            self.cursor = default
            return self.cursor
        cursor = Position(row[0], row[1])
        problem = cursor_proof.check(
            self.reader.dir, cursor, row[2], row[3], max_line=self.reader.max_line
        )
        if problem is not None:
            if self.log is not None:
                self.log.critical(f"{self.event}.cursor_mismatch", cursor=str(cursor), why=problem)
            raise CursorMismatchError(
                f"the store's cursor for spool {self.store.spool_id!r} does not belong to "
                f"the spool in {self.reader.dir}: {problem}; nothing was applied"
            )
        if row[3] is None and self.log is not None:
            self.log.warning(
                f"{self.event}.cursor_unproved",
                cursor=str(cursor),
                why="written before cursors kept a proof: only its record boundary was checked",
            )
        self.cursor = cursor
        self._restore_committed()
        return self.cursor

    def _restore_committed(self) -> None:
        """Quarantine again each withdrawn entry (``Quarantine.withdraw``) whose refusal was
        committed after all: a chunk's ``COMMIT`` can fail for this process yet succeed on
        the server (PostgreSQL: the connection lost with the ``COMMIT`` in flight), and then
        the cursor is past the record, so no re-read puts its entry back. Invariant: a
        withdrawn entry before the committed cursor is either such a refusal (its batch's
        refusal at that position is in this spool's ledger, or it has no batch: a record
        refused for its envelope is refused whenever it is read, so a re-read would have put
        it back) or the trace of a record applied on the re-read (left as it is)."""
        withdrawn = [e for e in self.quarantine.uncommitted() if _before(e, self.cursor)]
        if not withdrawn:
            return
        batches = {e["batch"]: e["position"] for e in withdrawn if isinstance(e.get("batch"), str)}
        refused = self.store.refused(batches)
        for e in withdrawn:
            if isinstance(e.get("batch"), str) and e["batch"] not in refused:
                continue  # applied (or decided elsewhere) on a re-read: the trace stays
            try:
                path = self.quarantine.restore(Position.parse(e["position"]))
            except OSError as exc:  # left withdrawn; the next start tries again
                if self.log is not None:
                    self.log.warning(
                        f"{self.event}.quarantine_not_restored",
                        position=e["position"],
                        error=str(exc),
                    )
                continue
            if self.log is not None and path is not None:
                self.log.warning(
                    f"{self.event}.quarantine_restored", position=e["position"], path=str(path)
                )

    def step(self, on_commit: Callable[[Step], None] | None = None) -> Step:
        """Read and apply one chunk from ``cursor``; on success move ``cursor`` past it and
        add its figures to ``totals``. ``on_commit(step)``: called once a chunk is committed,
        before anything else, with the ``Step`` this returns (the writer rings its waiting
        clients there). Raises the store error tree (nothing committed): the quarantine
        entries this chunk made are then withdrawn (``Quarantine.withdraw``), since no
        refusal of theirs was committed; the writer decides again when it re-reads them. Raises
        ``SpoolGapError`` (``check_gaps``) before a chunk that would skip records deleted
        before they were applied."""
        self._fresh: list[Position] = []
        try:
            entries, result = drain_chunk(
                self.store.apply_chunk,
                self._gap_checked() if self.check_gaps else self.reader,
                self.cursor,
                self.chunk_rows,
                self.reject,
                max_bytes=self.max_bytes,
            )
        except BaseException as exc:  # a signal mid-chunk rolls the transaction back too
            self._withdraw(exc)
            raise
        if not entries:
            return Step()
        done = Step(entries, result, sum(e.size for e in entries))
        if on_commit is not None:
            on_commit(done)
        self.cursor = entries[-1].next
        self.totals["chunks"] += 1
        for key in TOTALS:
            self.totals[key] += getattr(result, key)
        if self.log is not None:
            self.log.info(
                f"{self.event}.chunk",
                entries=len(entries),
                rows=result.rows,
                applied=result.applied,
                duplicates=result.duplicates,
                rejected=result.rejected,
                cursor=str(self.cursor),
            )
        return done

    def _gap_checked(self) -> Any:
        """``reader``, with each move to a later segment checked by ``_crossing`` first."""
        drain = self

        class Checked:
            def read(self, start: Position, *, max_bytes: int) -> Any:
                at = start
                for entry in drain.reader.read(start, max_bytes=max_bytes):
                    if entry.position.segment != at.segment:
                        drain._crossing(at, entry.position.segment)
                    yield entry
                    at = entry.next

        return Checked()

    def _crossing(self, at: Position, segment: int) -> None:
        """The read moves from ``at`` on to ``segment``: raise ``SpoolGapError`` when that
        skips records never applied: whole segments between them are missing, or ``at``'s
        own segment is gone with a size recorded when sealed past ``at``. Spool GC deletes
        only segments the cursor passed, so either was deleted by something else. Accepted
        when ``accepted`` (``quill recover --accept-loss``) is at or past ``segment``. A move
        off the recorded end of a collected segment (or one whose size was never recorded)
        is not a gap."""
        if self.accepted is not None and self.accepted >= segment:
            return
        whole = segment - at.segment - 1
        size = None
        if not (self.reader.dir / segment_name(at.segment)).exists():
            size = sealed_sizes(self.reader.dir).get(at.segment)
        if whole <= 0 and (size is None or size <= at.offset):
            return
        unread = f"{size - at.offset} byte(s) of segment {at.segment} past it, " if size else ""
        if self.log is not None:
            self.log.critical(f"{self.event}.spool_gap", at=str(at), next_segment=segment)
        raise SpoolGapError(
            f"the spool's records after {at} were deleted before the writer applied them "
            f"({unread}{whole} whole segment(s) before segment {segment}); nothing was applied",
            segment,
        )

    def until_empty(
        self,
        progress: Callable[[int], None] | None = None,
        *,
        stop: Any = None,
        seal_torn: bool = False,
    ) -> dict[str, int]:
        """Step until the spool is drained to its end (or ``stop``, a ``threading.Event``, is
        set); ``progress(bytes)`` after each chunk. ``seal_torn``: then seal torn tails and
        go on, so the records behind them are read (only a lease holder may). Returns
        ``totals``. Raises the store error tree."""
        while not (stop is not None and stop.is_set()):
            done = self.step()
            if done.entries:
                if progress:
                    progress(done.nbytes)
                continue
            if not (seal_torn and self.seal_torn_tails()):
                break
        return self.totals

    def reject(self, entry: Entry, reason: str, detail: str) -> None:
        """Quarantine a refused op with its reason (called inside the chunk's transaction,
        before its commit). A record the quarantine's audit says an operator already retried
        or dropped stays resolved (counted in ``already_resolved``). A line over the limit is
        copied to the quarantine from its segment, never read whole (``Quarantine.put``)."""
        if not self.quarantine.has(entry.position):
            self._fresh.append(entry.position)  # made by this chunk: withdrawn if it fails
        over = getattr(entry, "over", None)
        if over is None:
            path = self.quarantine.put(entry.position, reason, detail, entry.raw, entry.record)
        else:
            segment = self.reader.dir / segment_name(entry.position.segment)
            path = self.quarantine.put(
                entry.position,
                reason,
                detail,
                entry.raw,
                envelope(entry.raw),
                source=(segment, over.size),
            )
        if path is None:
            self.already_resolved += 1
            if self.log is not None:
                self.log.info(
                    f"{self.event}.quarantine_resolved", position=str(entry.position), reason=reason
                )
            return
        if self.log is not None:
            self.log.warning(
                f"{self.event}.quarantined",
                position=str(entry.position),
                reason=reason,
                detail=detail,
                path=str(path),
            )

    def _withdraw(self, exc: BaseException) -> None:
        """Withdraw the entries the failed chunk made (module doc); an entry that was there
        before it (a refusal committed earlier, re-read) stands."""
        error = f"{type(exc).__name__}: {exc}"
        for position in self._fresh:
            try:
                path = self.quarantine.withdraw(position, error)
            except OSError as failure:  # the entry stays listed; the chunk's error is raised
                exc.add_note(f"quarantine entry {position} not withdrawn: {failure}")
                continue
            if self.log is not None and path is not None:
                self.log.warning(
                    f"{self.event}.quarantine_withdrawn",
                    position=str(position),
                    error=error,
                    path=str(path),
                )
        self._fresh = []

    def seal_torn_tails(self) -> bool:
        """Terminate torn tails (a producer died mid-record) at or after the cursor's segment,
        so the next read quarantines them and the drain moves on. True if any was sealed."""
        sealed = False
        for seg in range(self.cursor.segment, self.reader.end().segment + 1):
            if self.reader.seal_torn_tail(seg):
                if self.log is not None:
                    self.log.warning(f"{self.event}.torn_tail_sealed", segment=seg)
                sealed = True
        return sealed


def _before(entry: dict[str, Any], cursor: Position) -> bool:
    """Whether quarantine ``entry``'s record lies before ``cursor`` (an entry whose position
    cannot be read is left alone)."""
    try:
        return Position.parse(entry["position"]) < cursor
    except (ValueError, TypeError):
        return False
