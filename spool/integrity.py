"""Was anything acknowledged lost from the spool? One classification from all the evidence.

``assess`` is the one function behind ``quill spool verify``, ``quill status`` and ``quill
doctor``. It weighs:

* **segment structure** (cheap, always): segment numbers are consecutive — GC deletes the
  oldest first and never the newest, so a number missing between the first and the last
  segment is a segment lost; a *sealed* segment (one with a successor) is final, and the
  sealer terminates any torn tail before it creates the successor (``producer._seal_tail``,
  ``purge.seal``) and records its final size (``segments.SEALS_FILE``), so a sealed segment
  that is empty, ends without ``\\n`` or is shorter than its recorded size was cut short;
  a segment shorter than the store's cursor into it lost bytes the store had applied; a
  segment gone at or after the cursor (past its recorded end) lost records never applied,
  whether older segments remain or the cursor's segment went with every later one;
* **per-producer sequence numbers** (``scan=True``): a producer handle numbers its records
  1, 2, 3 … and consumes a number only once its line is written (``producer.Spool.append``),
  and its records lie in the spool in that order, so a number skipped between two of its
  records is a record that is gone (or damaged beyond decoding); while segment 1 is still
  present (nothing was garbage-collected) numbers missing before a producer's first record
  are gone too. A producer's *last* records lost leave no gap: no evidence counts them. A
  purge tombstone keeps its record's producer and number; one written without them (by an
  older purge) may explain one gap, so gaps count as loss only beyond such tombstones;
* **checksums**: with ``scan=True`` every line decoded (``SpoolReader``); a damaged line is
  loss, a proven torn write (``spool.torn``) is not. Without a scan, the lines the writer
  quarantined as damaged (``DAMAGE_REASONS``) count;
* **over-limit lines** (scan): a line longer than ``[spool] max_record_bytes`` (written by a
  producer that did not enforce it) is streamed past, never read whole (``spool.lines``). It
  is no loss — its bytes are intact, and the writer keeps them in the quarantine — so it is
  listed apart (``over_limit``), and its envelope (producer, sequence number) still counts
  as sequence evidence.

"Every other record is intact" is said of torn records (``verdict == "torn-writes-only"``)
only when the spool was scanned, the only irregular lines are torn records, and no segment,
tail or sequence number is missing. Never "nothing acknowledged was lost": a torn record is
what a producer killed mid-write leaves, and also what a cut of the newest segment leaves of
an acknowledged one (``spool.torn.TORN_SUMMARY``); its bytes cannot tell which.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS
from quill.spool.lines import OVER_LIMIT, envelope
from quill.spool.purge import PURGED_OP
from quill.spool.quarantine import Quarantine
from quill.spool.reader import SpoolReader
from quill.spool.segments import Position, list_segments, sealed_sizes, segment_name
from quill.spool.torn import TORN_SUMMARY, TORN_WRITE

#: Verdicts, worst first.
LOSS = "loss"
UNPROVEN = "unproven"  # structure intact, records not scanned (status): no loss found
TORN_ONLY = "torn-writes-only"
INTACT = "intact"

#: Quarantine reasons that mean a line's bytes were damaged (``record.decode``, the reader's
#: cut sealed tail): the acknowledged record it held is lost. Other reasons (a record the store
#: refused by its rules, a newer format) keep the record intact in the quarantine.
DAMAGE_REASONS = frozenset({"bad-json", "checksum", "nul-bytes", "shape", "torn-tail"})

#: What ``summary`` says, after ``TORN_SUMMARY``, of a spool whose only irregular lines are
#: torn records: what the evidence proves, and no more (module doc).
OTHERS_INTACT = "every other record is intact"


@dataclass
class Assessment:
    """The evidence and the verdict. Lists hold dicts ready for JSON:

    * ``missing_segments``: segment numbers absent between the first and the last;
    * ``truncated``: ``{"segment", "size", "detail"}`` per segment cut short;
    * ``damaged`` / ``torn_writes`` / ``over_limit``: ``{"position", "reason", "detail"}``
      per line (scan);
    * ``missing_by_producer``: ``{producer id: records missing}`` from sequence gaps (scan);
    * ``records``: lines read (scan), ``scanned``: whether lines were read at all.
    """

    segments: list[int]
    scanned: bool
    missing_segments: list[int] = field(default_factory=list)
    truncated: list[dict[str, Any]] = field(default_factory=list)
    damaged: list[dict[str, Any]] = field(default_factory=list)
    torn_writes: list[dict[str, Any]] = field(default_factory=list)
    over_limit: list[dict[str, Any]] = field(default_factory=list)
    missing_by_producer: dict[str, int] = field(default_factory=dict)
    records: int = 0

    @property
    def lost(self) -> bool:
        """True when acknowledged records cannot be accounted for."""
        return bool(
            self.missing_segments or self.truncated or self.damaged or self.missing_by_producer
        )

    @property
    def missing_records(self) -> int:
        """Records known missing from sequence gaps (a lower bound: see the module doc)."""
        return sum(self.missing_by_producer.values())

    @property
    def verdict(self) -> str:
        if self.lost:
            return LOSS
        if not self.scanned:
            return UNPROVEN
        return TORN_ONLY if self.torn_writes else INTACT

    def summary(self) -> str:
        """One line for humans: the verdict and its evidence."""
        if not self.lost:
            if self.verdict == TORN_ONLY:
                return f"{len(self.torn_writes)} {TORN_SUMMARY}; {OTHERS_INTACT}"
            if self.verdict == UNPROVEN:
                return (
                    "segments consecutive and sealed whole, no line quarantined as damaged "
                    "(records not read here: `quill spool verify` checks every checksum and "
                    "sequence number)"
                )
            return f"{self.records} record(s), every sequence number accounted for"
        parts = []
        if self.missing_segments:
            parts.append(
                "segment(s) missing: " + ", ".join(segment_name(n) for n in self.missing_segments)
            )
        parts += [t["detail"] for t in self.truncated]
        if self.damaged:
            parts.append(f"{len(self.damaged)} damaged line(s)")
        if self.missing_by_producer:
            parts.append(
                f"{self.missing_records} record(s) missing by sequence number from "
                f"{len(self.missing_by_producer)} producer(s)"
            )
        return "ACKNOWLEDGED RECORDS LOST: " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "lost": self.lost,
            "summary": self.summary(),
            "scanned": self.scanned,
            "missing_segments": self.missing_segments,
            "truncated": self.truncated,
            "damaged_lines": len(self.damaged),
            "over_limit": self.over_limit,
            "missing_by_producer": self.missing_by_producer,
            "missing_records": self.missing_records,
        }


def assess(
    spool_dir: str | os.PathLike[str],
    *,
    cursor: Position | None = None,
    scan: bool = False,
    progress: Callable[[int], None] | None = None,
    max_line: int = DEFAULTS.max_record_bytes,
) -> Assessment:
    """Classify the spool at ``spool_dir`` (module doc). ``cursor``: the store's applied
    position, when known (a segment shorter than it lost applied bytes; its segment gone with
    every later one lost the records after it). ``scan`` reads every
    line (checksums, sequence numbers: time linear in the spool's bytes); without it only
    sizes and last bytes are read. ``progress`` is called with bytes read. ``max_line``: the
    longest line read whole (``[spool] max_record_bytes``). Never raises for a
    damaged spool; raises ``OSError`` only when the directory cannot be read."""
    d = Path(spool_dir)
    segments = list_segments(d)
    out = Assessment(segments=segments, scanned=scan)
    # The cursor's segment gone with every later one: GC never deletes the newest segment, nor
    # one the cursor has not passed, so other hands removed them, and with them the records
    # after the cursor (acknowledged, never applied). The writer refuses such a cursor
    # (``spool.cursor_proof.check``).
    gone = (
        [cursor.segment]
        if cursor is not None
        and cursor > Position(1, 0)
        and not any(n >= cursor.segment for n in segments)
        else []
    )
    out.missing_segments = gone
    if not segments:
        return out
    present = set(segments)
    out.missing_segments = [
        *(n for n in range(segments[0], segments[-1]) if n not in present),
        *gone,
    ]
    recorded = sealed_sizes(d)
    if cursor is not None and cursor.segment < segments[0]:
        # Deleted before the store applied them: GC collects only segments the cursor passed
        # (the cursor's own once it sits at the size recorded when it was sealed).
        size = recorded.get(cursor.segment)
        first = cursor.segment if size is not None and size > cursor.offset else cursor.segment + 1
        out.missing_segments = [*range(first, segments[0]), *out.missing_segments]
    for n in segments[:-1]:  # sealed: a later segment exists
        problem = _sealed_problem(d / segment_name(n), recorded.get(n))
        if problem:
            out.truncated.append({"segment": n, **problem})
    if cursor is not None and cursor.segment in present:
        size = _size(d / segment_name(cursor.segment))
        if size is not None and size < cursor.offset and cursor.segment not in _numbers(out):
            out.truncated.append(
                {
                    "segment": cursor.segment,
                    "size": size,
                    "detail": f"{segment_name(cursor.segment)} is {size} bytes, shorter than "
                    f"the store's cursor {cursor}: applied records were cut off",
                }
            )
    if scan:
        _scan(d, segments, out, progress, max_line)
    else:  # the lines the writer already found damaged (it decoded each one it drained)
        out.damaged = [
            {"position": pos, "reason": reason, "detail": "quarantined by the writer as damaged"}
            for pos, reason in Quarantine(d).reasons()
            if reason in DAMAGE_REASONS
        ]
    return out


def _numbers(out: Assessment) -> set[int]:
    return {t["segment"] for t in out.truncated}


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _sealed_problem(path: Path, recorded: int | None) -> dict[str, Any] | None:
    """Why sealed segment ``path`` was cut short, or None when it ends whole and is no
    shorter than the size ``recorded`` when it was sealed (None: not recorded)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            last = os.pread(f.fileno(), 1, size - 1) if size else b""
    except FileNotFoundError:
        return None  # deleted meanwhile (GC): not a sealed segment any more
    if size == 0:
        return {
            "size": 0,
            "detail": f"{path.name} is empty although a later segment exists "
            "(a segment is sealed only once it holds records): it was cut to nothing",
        }
    if recorded is not None and size < recorded:
        return {
            "size": size,
            "detail": f"{path.name} is {size} bytes, shorter than the {recorded} bytes "
            "recorded when it was sealed: it was cut short, the acknowledged records in the "
            f"last {recorded - size} bytes are lost",
        }
    if last != b"\n":
        return {
            "size": size,
            "detail": f"{path.name} ends in a cut record ({size} bytes, no final newline) "
            "although a later segment exists: it was cut short, the acknowledged records "
            "after the cut are lost",
        }
    return None


def _scan(
    d: Path,
    segments: list[int],
    out: Assessment,
    progress: Callable[[int], None] | None,
    max_line: int,
) -> None:
    """Read every line: damaged, torn and over-limit lines, and per-producer sequence gaps."""
    reader = SpoolReader(d, max_line=max_line)
    last_seq: dict[str, int] = {}
    missing: dict[str, int] = {}
    unattributed = 0
    gc_free = segments[0] == 1  # segment 1 present: no record was ever garbage-collected
    pos = Position(segments[0], 0)
    while True:
        batch = list(reader.read(pos, max_bytes=32 << 20))
        if not batch:
            break
        for e in batch:
            out.records += 1
            rec = e.record
            if e.damage is not None and e.damage.reason == OVER_LIMIT:
                out.over_limit.append(
                    {"position": str(e.position), "reason": OVER_LIMIT, "detail": e.damage.detail}
                )
                rec = envelope(e.raw) or {}
            elif e.damage is not None:
                item = {
                    "position": str(e.position),
                    "reason": e.damage.reason,
                    "detail": e.damage.detail,
                }
                (out.torn_writes if e.damage.reason == TORN_WRITE else out.damaged).append(item)
                continue
            assert rec is not None  # an entry holds a record or its damage (``spool.Entry``)
            producer, seq = rec.get("producer"), rec.get("seq")
            if not isinstance(producer, str) or type(seq) is not int:
                # A purge tombstone that had no room for them (older purges) stands for one
                # record of some producer: it may explain one gap.
                unattributed += rec.get("op") == PURGED_OP
                continue
            prev = last_seq.get(producer)
            expected = prev + 1 if prev is not None else (1 if gc_free else seq)
            if seq > expected:
                missing[producer] = missing.get(producer, 0) + seq - expected
            if prev is None or seq > prev:
                last_seq[producer] = seq
        if progress:
            progress(sum(e.size for e in batch))
        pos = batch[-1].next
    if sum(missing.values()) > unattributed:
        out.missing_by_producer = dict(sorted(missing.items()))
