"""Opening ``state.db``: the writer's one read-write connection and read-only connections.

* Writer: WAL, ``synchronous=NORMAL`` by default (FULL configurable), a busy timeout, and
  every write transaction begun with ``BEGIN IMMEDIATE`` (``transaction()``), so a lock
  conflict surfaces at BEGIN, never half way through a transaction.
* Readers: a ``file:`` URI built from the *resolved* path with ``mode=ro``; the path is
  percent-quoted so names with ``?``, ``#`` or spaces open the right file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw

from quill.home.descriptors import EXHAUSTED_ERRNOS
from quill.home.layout import private_dirs
from quill.store import packed, schema
from quill.store.errors import (
    CantOpenError,
    DescriptorsExhaustedError,
    SharedMemoryError,
    cant_open_cause,
    mapped,
)

#: The writer waits this long for a lock before SQLITE_BUSY (ms). Only readers and the
#: backup API can contend with the single writer, and they hold locks briefly.
WRITER_BUSY_MS = 5000
READER_BUSY_MS = 2000
FILE_MODE = 0o600


def reader_uri(path: Path) -> str:
    """``file:`` URI for a read-only open of ``path`` (resolved, percent-quoted)."""
    return "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"


#: SQLite before 3.51.3 can corrupt a WAL database when the WAL is reset while another
#: connection checkpoints (the WAL-reset bug, fixed in 3.51.3; docs/architecture.md "The store").
MIN_SQLITE = (3, 51, 3)


def check_sqlite_version(version: str | None = None) -> None:
    """Raise ``CantOpenError`` if the SQLite that apsw links has the WAL-reset bug."""
    version = version or apsw.sqlite_lib_version()
    if tuple(int(x) for x in version.split(".")[:3]) < MIN_SQLITE:
        raise CantOpenError(
            f"SQLite {version} has the WAL-reset corruption bug; Quill needs "
            f"≥ {'.'.join(map(str, MIN_SQLITE))} (upgrade apsw)"
        )


def shm_problem(path: Path) -> str | None:
    """Why ``<path>-shm`` (SQLite's shared-memory WAL index) is unusable, or None when it is
    absent or fine. Checked before opening, because SQLite does not say: with an -shm that is
    a directory it opened the store as if it were *empty* (no tables), and with one it cannot
    write, writes fail as "attempt to write a readonly database". Usable means:
    a regular file (not a symlink), owned by this user, that this process can open
    read-write. Fix: stop every Quill process, then delete the -shm file (SQLite rebuilds it
    from the WAL at the next open) or restore its owner and mode 600. Raises
    ``DescriptorsExhaustedError`` when no descriptor was left to open it (not a bad file)."""
    shm = Path(str(path) + "-shm")
    try:
        st = os.lstat(shm)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{shm} cannot be examined: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{shm} is a symbolic link, not SQLite's own shared-memory file"
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a special file"
        return f"{shm} is not a regular file ({kind})"
    if st.st_uid != os.geteuid():
        return f"{shm} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    try:
        os.close(os.open(shm, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        if exc.errno in EXHAUSTED_ERRNOS:
            raise DescriptorsExhaustedError.of(exc.errno) from exc
        return (
            f"{shm} cannot be opened read-write: {exc.strerror} "
            f"(mode {oct(stat.S_IMODE(st.st_mode))})"
        )
    return None


#: ``PRAGMA auto_vacuum`` of every store: INCREMENTAL keeps pointer-map pages, through which
#: SQLite finds the next page of a large value's overflow chain without reading the page
#: itself, so a read of a field stored after a 50 MB value costs a few pages, not 50 MB
#: (``store/read/clipped.py``). It frees nothing by itself (no ``incremental_vacuum`` is
#: run): space comes back through the ``vacuum`` job, as before. A store made before it
#: gets it at its next ``vacuum`` job (``jobs.store_jobs``).
AUTO_VACUUM = "INCREMENTAL"


def has_pointer_map(conn: apsw.Connection) -> bool:
    """Whether the store keeps pointer-map pages (``AUTO_VACUUM`` or FULL): one header read."""
    return conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 0


def open_writer(
    path: Path,
    *,
    synchronous: str = "NORMAL",
    on_journal_mode: Callable[[str], None] | None = None,
    pack_min_bytes: int | None = None,
) -> apsw.Connection:
    """Open (creating if needed) ``state.db`` for writing and bring its schema to v1.

    Only the process holding the writer lease may call this. A store found in another
    journal mode (switched while stopped) is put back into WAL and ``on_journal_mode(old)``
    is called so the caller logs the correction. Message texts of ``pack_min_bytes`` or more
    (default ``Settings.pack_min_bytes``) are stored packed (``store.packed.register``).
    Raises the store error tree: ``CantOpenError`` when the linked SQLite has the WAL-reset
    bug, ``SharedMemoryError`` when the -shm file is unusable (``shm_problem``).
    """
    check_sqlite_version()
    path = Path(path)
    private_dirs(path.parent)
    problem = shm_problem(path)
    if problem:
        raise SharedMemoryError(problem)
    existed = (
        path.exists() and path.stat().st_size > 0
    )  # a new file starts in rollback mode: no correction
    with mapped():
        conn = apsw.Connection(
            str(path), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        conn.set_busy_timeout(WRITER_BUSY_MS)
        packed.register(conn, pack_min_bytes)
        if not existed:  # only before the first table: later, a VACUUM sets it
            conn.execute(f"PRAGMA auto_vacuum={AUTO_VACUUM}")
        before = conn.execute("PRAGMA journal_mode").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if before.lower() != "wal" and mode.lower() == "wal" and existed and on_journal_mode:
            on_journal_mode(before)
        if mode.lower() != "wal":
            raise apsw.CantOpenError(f"could not enable WAL on {path} (journal_mode={mode})")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=OFF")  # sessions are auto-created; no FK enforcement
        schema.create(conn)
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            os.chmod(p, FILE_MODE)  # chmod the path; never open+close a live db file
    return conn


def open_reader(path: Path, *, vfs: str | None = None) -> apsw.Connection:
    """Open ``state.db`` read-only. Raises ``CantOpenError`` when it does not exist yet,
    ``DescriptorsExhaustedError`` when no file descriptor was left to open it.
    ``vfs`` names a registered SQLite VFS (default: the OS one); tests use it to inject I/O
    faults without mocking anything above SQLite."""
    try:
        with mapped():
            conn = apsw.Connection(
                reader_uri(path),
                flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                **({"vfs": vfs} if vfs else {}),
            )
    except CantOpenError as exc:
        cause = cant_open_cause(path)  # out of descriptors is not "no store yet"
        if cause is not None:
            raise cause from exc
        raise
    conn.set_busy_timeout(READER_BUSY_MS)
    packed.register(conn)
    return conn


@contextlib.contextmanager
def transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception; apsw errors mapped."""
    with mapped():
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if not conn.in_transaction:
                raise
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
