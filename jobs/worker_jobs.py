"""Jobs that never write ``state.db``; the huey consumer runs them: integrity checks on a
read-only connection and snapshots through the SQLite backup API."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import apsw

from quill.home import DEFAULTS, SNAPSHOT_GLOB, parse_snapshot_name, read_halt, snapshot_name
from quill.home.layout import EVIDENCE_DIR, private_dirs
from quill.jobs.value_damage import damaged_json, damaged_packed
from quill.spool import Position, retention
from quill.store.errors import (
    CantOpenError,
    CorruptError,
    HaltedError,
    StoreError,
    mapped,
    translate,
)
from quill.store.read.reader import Reader
from quill.store.sqlite import fts_repair
from quill.store.sqlite.connection import open_reader
from quill.store.sqlite.swap import integrity


class DamageFound(CorruptError):
    """A check found damage. ``followups`` are store jobs ``(name, params)`` to queue *after*
    the check's own run record, so the record lands before the writer acts on them."""

    def __init__(self, followups: list[tuple[str, dict[str, Any]]], message: str):
        super().__init__(message)
        self.followups = followups


def latest_snapshot(snapshots_dir: Path) -> tuple[Path, Position] | None:
    """The newest verified snapshot and the spool position it covers, or None.

    Only verified snapshots get a final ``quill.home.snapshot_name`` (``snapshot()`` renames
    a copy into place after its integrity_check passed), so the name is the proof.
    """
    found = sorted(Path(snapshots_dir).glob(SNAPSHOT_GLOB))
    if not found:
        return None
    return found[-1], snapshot_position(found[-1])


def spool_gc(
    spool_dir: str,
    db_path: str,
    snapshots_dir: str,
    retention_s: float = DEFAULTS.spool_retention_s,
) -> dict[str, Any]:
    """Delete spool segments that are applied, covered by a verified snapshot and older than
    ``retention_s`` seconds. Figures: deleted segment numbers, bytes freed, positions used."""
    try:
        with Reader(Path(db_path)) as reader:
            cursor = reader.figures()["cursor"]
    except CantOpenError:
        cursor = None
    applied = Position.parse(cursor) if cursor else None
    snap = latest_snapshot(Path(snapshots_dir))
    damaged: list[str] = []
    if snap and retention.collectable(Path(spool_dir), applied, snap[1], retention_s):
        # Deleting a segment leaves the snapshot as its only copy besides the live store: the
        # snapshot must be sound now, not only when it was taken (its name's proof).
        snap, damaged = sound_snapshot(Path(snapshots_dir), Path(db_path).parent)
    result = retention.collect(Path(spool_dir), applied, snap[1] if snap else None, retention_s)
    return {
        **result,
        "applied": cursor,
        "snapshot": str(snap[1]) if snap else None,
        **({"damaged_snapshots": damaged} if damaged else {}),
    }


def sound_snapshot(
    snapshots_dir: Path, home: Path, copy_to: Path | None = None
) -> tuple[tuple[Path, Position] | None, list[str]]:
    """The newest snapshot in ``snapshots_dir`` that passes ``integrity_check`` now, with the
    position it covers (None when none does), and ``"<name>: <why>"`` for each newer one that
    failed. A snapshot was verified when it was taken (its name is that proof), but a file can
    be damaged on disk since: a damaged one is moved to ``home``'s
    ``evidence/snapshots-damaged-<UTC>/`` so that nothing (recover, spool GC) trusts it again.
    With ``copy_to``, each candidate is copied there (owner-only) and the copy is checked, so
    the bytes checked are the bytes used; ``copy_to`` is absent when None is returned."""
    damaged: list[str] = []
    for path in sorted(Path(snapshots_dir).glob(SNAPSHOT_GLOB), reverse=True):
        checked = path
        if copy_to is not None:
            shutil.copyfile(path, copy_to)
            os.chmod(copy_to, 0o600)
            checked = copy_to
        try:
            check = integrity(checked)
        except CorruptError as exc:
            check = [f"{type(exc).__name__}: {exc}"]
        if check == ["ok"]:
            return (path, snapshot_position(path)), damaged
        if copy_to is not None:
            copy_to.unlink()
        damaged.append(f"{path.name}: {'; '.join(check[:2])}")
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = Path(home) / EVIDENCE_DIR / f"snapshots-damaged-{stamp}"
        aside.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.replace(path, aside / path.name)
    return None, damaged


def integrity_check(db_path: str, queue_db: str | None = None) -> dict[str, Any]:
    """The full ``PRAGMA integrity_check`` (also verifies index contents against their
    tables; slower than quick_check), with quick_check's damage handling."""
    return quick_check(db_path, queue_db, pragma="integrity_check")


#: How long a check waits for a store file that does not exist yet (seconds): on a new data
#: dir the scheduler may fire a missed check before the writer has created the file.
STORE_APPEAR_WAIT_S = 30.0


def _wait_for_store(db_path: Path, wait_s: float) -> None:
    """Return once ``db_path`` exists; raises ``CantOpenError`` naming it after ``wait_s``
    seconds without it (a check of no file is no finding either way)."""
    deadline = time.monotonic() + wait_s
    while not db_path.exists():
        if time.monotonic() >= deadline:
            raise CantOpenError(f"{db_path} does not exist (waited {wait_s:g} s for the writer)")
        time.sleep(0.1)


def quick_check(
    db_path: str,
    queue_db: str | None = None,
    pragma: str = "quick_check",
    wait_s: float = STORE_APPEAR_WAIT_S,
) -> dict[str, Any]:
    """``PRAGMA quick_check`` on a read-only connection (it reads the whole file, so it is
    scheduled, never on the drain path; SQLite ≥ 3.44 checks FTS5 indexes too). A store file
    that does not exist yet is waited for up to ``wait_s`` seconds (the writer creates it at
    its first start), then ``CantOpenError``.

    On damage, the damaged tables are identified (``fts_repair.classify``); if only the
    search indexes are damaged and ``queue_db`` is given, the writer is asked to detach and
    rebuild them. Raises ``CorruptError`` naming the damaged tables either way."""
    if pragma not in ("quick_check", "integrity_check"):
        raise ValueError(f"unknown check {pragma!r}")
    start = time.monotonic()
    _wait_for_store(Path(db_path), wait_s)
    conn = open_reader(Path(db_path))
    try:
        try:
            with mapped():
                rows = [r[0] for r in conn.execute(f"PRAGMA {pragma}")]
        except CorruptError as exc:
            rows = [str(exc)]
        damaged = fts_repair.classify(conn) if rows != ["ok"] else None
        if damaged is None:
            bad = [f"packed text of message {i} is damaged" for i in damaged_packed(conn)]
            bad += damaged_json(conn)
            if bad:  # the file is sound, a value in it is not: the writer must stop
                damaged = {"canonical": ["messages"], "fts": []}
                rows = bad
        try:
            with mapped():
                generation = conn.execute("PRAGMA application_id").fetchone()[0]
        except CorruptError:
            generation = None
    finally:
        conn.close()
    if damaged is None:
        return {"result": "ok", "seconds": round(time.monotonic() - start, 3)}
    fts_only = not damaged["canonical"] and bool(damaged["fts"])
    followups: list[tuple[str, dict[str, Any]]] = []
    if queue_db:
        if fts_only:
            followups.append(("fts_rebuild", {}))
        else:  # damage in the store's own tables (or unattributed): the writer must stop
            followups.append(
                (
                    "declare_corrupt",
                    {
                        "generation": generation,
                        "detail": f"{pragma} found damage: {damaged} ({'; '.join(rows[:3])})",
                    },
                )
            )
    raise DamageFound(
        followups,
        f"{pragma} of {db_path} failed; damaged tables: canonical={damaged['canonical']} "
        f"fts={damaged['fts']}"
        + (
            "; search indexes detached, rebuild queued"
            if fts_only and queue_db
            else "; the writer was asked to halt"
            if queue_db
            else ""
        )
        + f" ({'; '.join(rows[:3])})",
    )


def _refuse_if_halted(db_path: str, halt_file: str | None) -> None:
    """Raise ``HaltedError`` when the writer's sticky halt (``halt_file``) names ``db_path``."""
    halt = read_halt(Path(halt_file), Path(db_path)) if halt_file else None
    if halt is not None:
        raise HaltedError(
            f"no snapshot taken: the writer has halted on {db_path} ({halt.cause}: "
            f"{halt.detail}); a snapshot now would copy the file it "
            "refused, and `quill recover` would rebuild from it",
            halt.to_json(),
        )


def _backup_failed(exc: apsw.Error, db_path: str) -> StoreError:
    """The store error for an apsw error raised while copying ``db_path``, classified by its
    type like any other (``translate``). The backup API reports its result code with the
    destination connection's message, which is SQLite's text for SQLITE_OK ("not an error"),
    so the message is built from the result code instead of the exception's text."""
    err = translate(exc)
    code = apsw.mapping_result_codes.get(getattr(exc, "result", None), type(exc).__name__)
    what = (
        " (the file, or the -wal beside it, is not one consistent database: was state.db replaced "
        "or restored while the fleet ran?)"
        if isinstance(err, CorruptError)
        else ""
    )
    return type(err)(f"snapshot of {db_path} failed: SQLite reported {code} while copying it{what}")


def snapshot(
    db_path: str,
    snapshots_dir: str,
    keep: int = DEFAULTS.snapshot_keep,
    compact: bool = False,
    halt_file: str | None = None,
) -> dict[str, Any]:
    """Copy the store with the backup API, verify the copy (``integrity_check``), stamp it
    with the spool position it covers (read from the copy itself, so the stamp is exactly
    consistent with its rows) and keep the newest ``keep`` snapshots. ``compact=True``
    (``--purge``) also rebuilds the copy with no trace of deleted rows (``compact_copy``).
    ``halt_file`` (``run/halt.json``): while the writer's sticky halt names ``db_path``
    (checked before and after the copy), no snapshot is kept.

    Temps of earlier snapshots/compactions whose process is gone are removed first
    (``remove_temp_leftovers``). Returns ``{"path", "bytes", "position", "seconds", "removed",
    "removed_temps"}``; raises ``HaltedError``
    during such a halt, ``CorruptError`` when the copy fails verification or the file cannot
    be copied (the bad copy is deleted).
    """
    start = time.monotonic()
    _refuse_if_halted(db_path, halt_file)
    out_dir = Path(snapshots_dir)
    private_dirs(out_dir)
    os.chmod(out_dir, 0o700)
    # Temps of snapshots/compactions killed mid-copy are store-sized: each run removes those
    # whose process is gone (kept: a live one's), so repeated kills do not fill the disk.
    swept, _ = remove_temp_leftovers(out_dir)
    tmp = out_dir / f".snapshot-{os.getpid()}-{time.time_ns()}.tmp"
    source = open_reader(Path(db_path))
    try:
        dest = apsw.Connection(str(tmp))
        try:
            with dest.backup("main", source, "main") as backup:
                while not backup.done:
                    backup.step(1024)  # pages per step; the source is never locked for long
        except apsw.Error as exc:
            dest.close()
            tmp.unlink(missing_ok=True)
            raise _backup_failed(exc, db_path) from exc
        with mapped():
            if compact:
                compact_copy(dest)
            check = [r[0] for r in dest.execute("PRAGMA integrity_check")]
            cursor = dest.execute(
                'SELECT segment, "offset" FROM spool_cursor WHERE id = 1'
            ).fetchone()
            dest.execute("PRAGMA journal_mode=DELETE")
        dest.close()
    finally:
        source.close()
    if check != ["ok"]:
        tmp.unlink(missing_ok=True)
        raise CorruptError(f"snapshot of {db_path} failed integrity_check: {'; '.join(check[:5])}")
    try:
        _refuse_if_halted(db_path, halt_file)  # the writer may have halted on it during the copy
    except HaltedError:
        tmp.unlink(missing_ok=True)
        raise
    seg, off = cursor if cursor else (1, 0)
    final = out_dir / snapshot_name(seg, off)
    os.chmod(tmp, 0o600)
    os.replace(tmp, final)
    removed = []
    for old in sorted(out_dir.glob(SNAPSHOT_GLOB))[: -keep or None]:
        old.unlink()
        removed.append(old.name)
    return {
        "path": str(final),
        "bytes": final.stat().st_size,
        "position": f"{seg}:{off}",
        "seconds": round(time.monotonic() - start, 3),
        "removed": removed,
        "removed_temps": swept,
    }


def compact_copy(conn: apsw.Connection) -> None:
    """Leave no bytes of deleted rows in a database copy (a snapshot, never the live store):
    FTS5 'optimize' merges each search index into one b-tree, dropping deleted entries that
    are otherwise only masked, then VACUUM rewrites the file from its live rows, so freed
    pages and the unused space inside pages (where SQLite leaves deleted cells and the
    remains of page splits) are gone. The rows read back the same."""
    from quill.store.sqlite.indexer import FTS_TABLES, fts_state

    with mapped():
        if fts_state(conn) == "ok":
            for table in FTS_TABLES:  # names from the indexer's fixed tuple
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        conn.execute("VACUUM")


def compact_snapshot(path: Path) -> dict[str, Any]:
    """Rewrite the verified snapshot ``path`` in place with ``compact_copy``: copy to a temp
    file, compact, ``integrity_check``, fsync, rename over (its name, hence its position
    stamp, is kept). A crash leaves the old file or the new one. Returns ``{"path", "bytes"}``;
    raises ``CorruptError`` if the compacted copy fails the check (the original is kept)."""
    path = Path(path)
    tmp = path.with_name(f".compact-{os.getpid()}-{time.time_ns()}.tmp")
    source = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        dest = apsw.Connection(str(tmp))
        with mapped():
            with dest.backup("main", source, "main") as backup:
                while not backup.done:
                    backup.step(1024)
        compact_copy(dest)
        with mapped():
            check = [r[0] for r in dest.execute("PRAGMA integrity_check")]
            dest.execute("PRAGMA journal_mode=DELETE")
        dest.close()
    finally:
        source.close()
    if check != ["ok"]:
        tmp.unlink(missing_ok=True)
        raise CorruptError(
            f"compacted copy of {path} failed integrity_check: {'; '.join(check[:5])}"
        )
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return {"path": str(path), "bytes": path.stat().st_size}


#: Temp files ``snapshot`` and ``compact_snapshot`` write before their rename, with SQLite's
#: own side files (``-wal``, ``-shm``, ``-journal``): a process killed before the rename
#: leaves them, and they hold the store's pages (deleted rows' bytes included).
TEMP_GLOBS = (".snapshot-*.tmp*", ".compact-*.tmp*")


def maybe_named_by(pid: int, named: float) -> bool:
    """Whether process ``pid`` may be the one that named a file at ``named`` (epoch s) and so
    may still be writing it: it runs (not a zombie) and had started by then (1 s of slack for
    the start time's rounding). False proves the namer gone: a pid that is free, or held by
    a process started after the file was named, is not its namer. Never raises."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= named + 1
    except (psutil.Error, ValueError, OverflowError):
        return False


def remove_temp_leftovers(snapshots_dir: Path) -> tuple[list[str], list[str]]:
    """Delete the temp files (``TEMP_GLOBS``) of snapshots/compactions whose process is gone.
    The writing process's pid and the time it named the file are in the name
    (``.snapshot-PID-NS.tmp``); a temp of a live process that had started by then may be a
    snapshot job running now, so it is kept and returned as in use. A pid alone proves nothing
    (recycled, or another machine's in a copied data dir): a process that started after the
    file was named did not write it. Returns ``(removed names, kept names)``. Raises
    ``OSError`` from unlink."""
    removed, kept = [], []
    d = Path(snapshots_dir)
    for path in sorted({p for pattern in TEMP_GLOBS for p in d.glob(pattern)}):
        parts = path.name.split(".")[1].split("-")  # kind, pid, ns
        try:
            in_use = maybe_named_by(int(parts[1]), int(parts[2]) / 1e9)
        except (IndexError, ValueError):
            in_use = False
        if in_use:
            kept.append(path.name)
            continue
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed, kept


def snapshot_position(path: Path) -> Position:
    """The spool position a verified snapshot covers, from its name (``snapshot_name``)."""
    return Position(*parse_snapshot_name(Path(path).name))
