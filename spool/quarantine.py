"""``spool/quarantine/``: records that could not be applied, kept with the reason.

One JSON file per quarantined line, named by its spool position, so quarantining the same
line twice (a crash between quarantine and cursor commit replays it) rewrites the same file
instead of adding a second entry. Files are written to a temp name, fsynced and renamed.

A quarantine belongs to one store: the live store's is ``<spool>/quarantine/``; a replay
into another file keeps its own beside that file (``for_store``), so the live store never
reports records that were refused by a scratch copy. An entry leaves the quarantine only by
``resolve`` (retried or dropped by an operator), which first appends an audit line holding
the whole entry to ``audit.jsonl`` — nothing is deleted without a trace.

Invariant: a resolution is final. ``put`` consults the audit first and does not re-open an
entry the audit says was retried, dropped or purged (same position and the same raw line, or
the same batch where a purge left no raw text), so a recover or replay from an older snapshot,
a replay into a scratch file (which also consults the live spool's audit, ``consult``) and a
writer re-reading a record after a restart all leave the operator's decision standing.

A line over the record-size limit (``spool.lines``) is never read whole: its entry holds the
line's first bytes as ``raw`` and its whole length in ``raw_bytes``, and its bytes are copied
from the segment, in the kernel, to ``<entry>.line`` beside it (``raw_file``), so nothing is
lost when the segment is collected. Resolving or purging the entry removes that file too.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from quill.spool import record
from quill.spool.errors import SpoolFullError
from quill.spool.lines import HEAD_BYTES
from quill.spool.quarantine_audit import Resolutions
from quill.spool.quarantine_files import LINE_SUFFIX, UNCOMMITTED_SUFFIX, copy_line, write_json
from quill.spool.segments import FILE_MODE, Position, ensure_dir, fsync_dir
from quill.spool.torn import TORN_WRITE

AUDIT_FILE = "audit.jsonl"
#: The ``reason`` member near the start of an entry file (``put`` writes it second).
_REASON = re.compile(rb'"reason": "([^"]*)"')
#: The ``position`` member at the start of an entry file (``put`` writes it first).
_POSITION = re.compile(rb'"position": "([^"]*)"')


class Quarantine:
    """The quarantine folder of one spool directory (or of one scratch store, ``for_store``).

    Entry ids are the position ``SEGMENT:OFFSET`` (``1:4096``); the file stem
    (``00000001-000000004096``) is accepted too."""

    def __init__(
        self, spool_dir: str | os.PathLike[str], *, directory: str | os.PathLike[str] | None = None
    ):
        self.dir = Path(directory) if directory is not None else Path(spool_dir) / "quarantine"
        #: Quarantine folders whose ``audit.jsonl`` resolutions ``put`` honours (its own first).
        self._audit_dirs: list[Path] = [self.dir]
        self._resolutions = Resolutions()

    def consult(self, other: Quarantine) -> Quarantine:
        """Also honour the resolutions in ``other``'s audit (a scratch store's quarantine
        consults the live one's: the same spool positions name the same records). Returns self."""
        if other.dir not in self._audit_dirs:
            self._audit_dirs.append(other.dir)
        return self

    def resolution(self, position: Position, raw: bytes, batch: Any) -> dict[str, Any] | None:
        """The audit line (retry, drop or purge) that already resolved the record at
        ``position`` with these bytes, or None when no audit consulted here resolved it."""
        text = raw.decode("utf-8", errors="replace")
        for folder in self._audit_dirs:
            line = self._resolutions.find(folder / AUDIT_FILE, str(position), text, batch)
            if line is not None:
                return line
        return None

    @classmethod
    def for_store(cls, db_path: str | os.PathLike[str]) -> Quarantine:
        """The quarantine of a store file other than the live one: ``<db>.quarantine/``
        beside it."""
        db_path = Path(db_path)
        return cls("", directory=db_path.with_name(db_path.name + ".quarantine"))

    def _path(self, entry_id: str) -> Path:
        """The file of entry ``entry_id``; raises ``KeyError`` if there is none."""
        try:
            pos = (
                Position.parse(entry_id)
                if ":" in entry_id
                else Position(*map(int, entry_id.split("-")))
            )
        except (TypeError, ValueError):
            raise KeyError(entry_id) from None
        path = self.dir / f"{pos.segment:08d}-{pos.offset:012d}.json"
        if not path.exists():
            raise KeyError(entry_id)
        return path

    def has(self, position: Position) -> bool:
        """Whether an entry for the record at ``position`` is quarantined now."""
        return (self.dir / f"{position.segment:08d}-{position.offset:012d}.json").exists()

    def get(self, entry_id: str) -> dict[str, Any]:
        """One entry (``put``'s fields plus ``id``); raises ``KeyError`` if there is none (or
        it was resolved by another process meanwhile)."""
        entry = _read_entry(self._path(entry_id), entry_id)
        return {"id": entry["position"], **entry}

    def resolve(self, entry_id: str, action: str, actor: str, **details: Any) -> dict[str, Any]:
        """Take entry ``entry_id`` out of the quarantine: first append (fsynced) an audit line
        ``{"at", "action", "actor", "entry", **details}`` to ``audit.jsonl``, then remove the
        entry's file. Returns the audit line. Raises ``KeyError`` if there is no such entry."""
        path = self._path(entry_id)
        entry = _read_entry(path, entry_id)
        line = {
            "at": time.time(),
            "action": action,
            "actor": actor,
            "id": entry["position"],
            **details,
            "entry": entry,
        }
        self._append_audit(line)
        path.unlink()
        path.with_suffix(LINE_SUFFIX).unlink(missing_ok=True)
        fsync_dir(self.dir)
        return line

    def purge(self, wants: Callable[[dict[str, Any], Position], bool], actor: str) -> list[str]:
        """Remove the content of the records ``wants(record, position)`` selects (``quill
        sessions delete --purge``): their entries go, each with an audit line that holds no
        content (``{"at", "action": "purge", "actor", "id", "op", "batch"}``), and earlier
        audit lines about them keep only those fields (``audit.jsonl`` is rewritten: temp
        file, fsync, rename). A damaged line is judged by its JSON body when that still
        parses. Returns the purged entry ids. Idempotent."""
        gone = []
        for entry in list(self.entries()):
            rec = _lenient(entry.get("raw"))
            if rec is not None and wants(rec, Position.parse(entry["position"])):
                try:
                    path = self._path(entry["position"])
                except KeyError:
                    continue  # resolved meanwhile (retried or dropped by another process)
                self._append_audit(
                    {
                        "at": time.time(),
                        "action": "purge",
                        "actor": actor,
                        "id": entry["position"],
                        "op": entry.get("op"),
                        "batch": entry.get("batch"),
                    }
                )
                path.unlink(missing_ok=True)
                path.with_suffix(LINE_SUFFIX).unlink(missing_ok=True)
                gone.append(entry["position"])
        if gone:
            fsync_dir(self.dir)
        path = self.dir / AUDIT_FILE
        if path.exists():
            lines, changed = [], False
            for line in self.audit():
                entry = line.get("entry")
                rec = _lenient(entry.get("raw")) if isinstance(entry, dict) else None
                if rec is not None and wants(rec, Position.parse(entry["position"])):
                    line["entry"] = {k: entry.get(k) for k in ("position", "reason", "op", "batch")}
                    line["entry"]["purged"] = True
                    changed = True
                lines.append(json.dumps(line, ensure_ascii=False) + "\n")
            if changed:
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
                try:
                    os.write(fd, "".join(lines).encode())
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
                fsync_dir(self.dir)
        return gone

    def _append_audit(self, line: dict[str, Any]) -> None:
        fd = os.open(
            self.dir / AUDIT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE
        )
        try:
            os.write(fd, (json.dumps(line, ensure_ascii=False) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def audit(self) -> list[dict[str, Any]]:
        """Every audit line (retries and drops), oldest first."""
        path = self.dir / AUDIT_FILE
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    def put(
        self,
        position: Position,
        reason: str,
        detail: str,
        raw: bytes,
        record: dict[str, Any] | None = None,
        *,
        source: tuple[Path, int] | None = None,
    ) -> Path | None:
        """Durably store a quarantined line; returns the entry's path, or None when the audit
        says an operator already resolved this record (``resolution``): then nothing is written.

        ``reason`` is a short tag (``checksum``, ``bad-json``, ``invalid-op`` ...), ``detail``
        the human explanation, ``raw`` the exact bytes of the line (kept as UTF-8 text with
        replacement characters, plus its length, so the entry is readable and self-contained).
        ``source``: ``(segment path, line length)`` of a line over the limit, of which ``raw``
        is only the head: the line is copied from ``position.offset`` of that segment to the
        entry's ``.line`` file (module doc) without passing through this process's memory.
        Raises ``SpoolFullError`` when the quarantine's filesystem has no room (ENOSPC,
        EDQUOT: the writer waits for space and tries the chunk again, as for a full store)
        and ``OSError`` otherwise; nothing is recorded then (no partial file is left), and
        the caller's chunk is not committed.
        """
        if self.resolution(position, raw, (record or {}).get("batch")) is not None:
            return None
        try:
            return self._put(position, reason, detail, raw, record, source)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            import shutil

            free = shutil.disk_usage(self.dir).free if self.dir.exists() else 0
            raise SpoolFullError(str(self.dir), free) from exc

    def _put(
        self,
        position: Position,
        reason: str,
        detail: str,
        raw: bytes,
        record: dict[str, Any] | None,
        source: tuple[Path, int] | None,
    ) -> Path:
        """``put``'s writes (the audit consulted)."""
        ensure_dir(self.dir)
        path = self.dir / f"{position.segment:08d}-{position.offset:012d}.json"
        entry = {
            "position": str(position),
            "reason": reason,
            "detail": detail,
            "quarantined_at": time.time(),
            "raw_bytes": len(raw) if source is None else source[1],
            "raw": raw[: HEAD_BYTES if source else len(raw)].decode("utf-8", errors="replace"),
            "batch": (record or {}).get("batch"),
            "op": (record or {}).get("op"),
        }
        if source is not None:
            entry["raw_file"] = copy_line(source[0], position.offset, source[1], path)
        write_json(path, entry)
        # A refusal decided again: the trace of an earlier uncommitted one is superseded.
        path.with_suffix(UNCOMMITTED_SUFFIX).unlink(missing_ok=True)
        fsync_dir(self.dir)
        return path

    def withdraw(self, position: Position, error: str) -> Path | None:
        """The refusal of the record at ``position`` was not committed (the chunk that refused
        it failed: ``error``): its entry leaves the quarantine for ``<stem>.uncommitted``,
        with ``uncommitted`` (``{"error", "at"}``) added, so nothing lists or counts it as
        quarantined — the store holds no refusal and the cursor is before it. The writer
        decides again when it re-reads the record: a refusal then ``put``s the entry back
        (and removes this file); an apply leaves this file as the trace of the failed chunk
        (``uncommitted()`` lists it); a ``COMMIT`` that succeeded after all (its answer lost)
        is found by the next writer, which ``restore``s the entry. Returns the new path, None
        when there was no entry."""
        path = self.dir / f"{position.segment:08d}-{position.offset:012d}.json"
        try:
            entry = _read_entry(path, str(position))
        except KeyError:
            return None
        entry["uncommitted"] = {"error": error, "at": time.time()}
        target = path.with_suffix(UNCOMMITTED_SUFFIX)
        try:
            write_json(target, entry)
        except OSError:  # no room for the note (a full disk failed the chunk): moved as it is
            os.replace(path, target)
        else:
            path.unlink()
        fsync_dir(self.dir)
        return target

    def restore(self, position: Position) -> Path | None:
        """Undo ``withdraw``: the refusal of the record at ``position`` was committed after
        all (a ``COMMIT`` whose answer was lost with the connection: the store's cursor is
        past the record and its ledger holds the refusal, ``workers.drain.Drain.start``), so
        its entry is quarantined again, without the ``uncommitted`` note. Returns the entry's
        path, None when no withdrawn entry is there. Raises ``OSError``."""
        stem = f"{position.segment:08d}-{position.offset:012d}"
        withdrawn = self.dir / (stem + UNCOMMITTED_SUFFIX)
        try:
            entry = _read_entry(withdrawn, str(position))
        except KeyError:
            return None
        entry.pop("uncommitted", None)
        path = self.dir / (stem + ".json")
        write_json(path, entry)
        withdrawn.unlink()
        fsync_dir(self.dir)
        return path

    def uncommitted(self) -> list[dict[str, Any]]:
        """Entries ``withdraw`` took out (refusals whose chunk did not commit), in spool order,
        each with ``id`` and ``uncommitted``."""
        if not self.dir.exists():
            return []
        out = []
        for path in sorted(self.dir.glob("*" + UNCOMMITTED_SUFFIX)):
            try:
                entry = _read_entry(path, path.stem)
            except KeyError:
                continue  # put back by the writer meanwhile
            entry.setdefault("uncommitted", {"error": "not recorded (no room)", "at": None})
            out.append({"id": entry["position"], **entry})
        return out

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every quarantined entry (``put``'s fields plus ``id``), in spool order. An entry
        resolved (retried, dropped, purged) by another process while this runs is left out:
        its file was listed but is gone."""
        if not self.dir.exists():
            return
        for path in sorted(self.dir.glob("*.json")):
            try:
                entry = _read_entry(path, path.stem)
            except KeyError:
                continue  # resolved meanwhile
            yield {"id": entry["position"], **entry}

    def count(self) -> int:
        """Number of quarantined entries."""
        return sum(1 for _ in self.dir.glob("*.json")) if self.dir.exists() else 0

    def reasons(self) -> list[tuple[str, str]]:
        """``(position, reason)`` of every entry, in spool order. Reads only the head of each
        file (``put`` writes ``position`` and ``reason`` first)."""
        if not self.dir.exists():
            return []
        out = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                with open(path, "rb") as f:
                    head = f.read(256)
            except FileNotFoundError:
                continue  # resolved meanwhile
            pos, reason = _POSITION.search(head), _REASON.search(head)
            if pos and reason:
                out.append((pos.group(1).decode(), reason.group(1).decode()))
            else:  # not the head ``put`` writes: the file is damaged
                out.append(
                    (_unreadable(path, "no position and reason")["position"], UNREADABLE_ENTRY)
                )
        return out

    def torn_count(self) -> int:
        """Number of entries quarantined as ``torn-write`` (a producer's unacknowledged partial
        write, ``spool.torn``; not damage). Reads only the head of each file: ``put`` writes
        ``position`` and ``reason`` first, so a 40 MB torn line is not read to count it."""
        if not self.dir.exists():
            return 0
        n = 0
        for path in self.dir.glob("*.json"):
            try:
                with open(path, "rb") as f:
                    m = _REASON.search(f.read(256))
            except FileNotFoundError:
                continue  # resolved meanwhile
            n += bool(m and m.group(1) == TORN_WRITE.encode())
        return n


#: The reason of an entry whose own file cannot be read (disk damage: ``put`` writes it whole
#: by rename). It is listed, shown and can be dropped; a retry finds no op in it.
UNREADABLE_ENTRY = "entry-unreadable"


def _read_entry(path: Path, entry_id: str) -> dict[str, Any]:
    """The entry file at ``path``; ``KeyError(entry_id)`` when another process resolved it
    since it was found. A file that is not an entry's JSON object gives an entry of reason
    ``UNREADABLE_ENTRY`` at the position its name holds, whose ``detail`` says why."""
    try:
        entry = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise KeyError(entry_id) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return _unreadable(path, f"{type(exc).__name__}: {exc}")
    if not isinstance(entry, dict) or not isinstance(entry.get("position"), str):
        return _unreadable(path, f"not a quarantine entry: {type(entry).__name__}")
    return entry


def _unreadable(path: Path, why: str) -> dict[str, Any]:
    segment, _, offset = path.stem.partition("-")
    return {
        "position": str(Position(int(segment), int(offset))),
        "reason": UNREADABLE_ENTRY,
        "detail": f"the quarantine entry file {path.name} cannot be read ({why})",
        "raw": "",
    }


def _lenient(raw: Any) -> dict[str, Any] | None:
    """The record body of a quarantined line's text (``record.decode_lenient``)."""
    return record.decode_lenient(raw.encode("utf-8")) if isinstance(raw, str) else None
