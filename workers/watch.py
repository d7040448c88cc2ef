"""The watcher: follows agent transcript folders as agents write them and hands each new,
grown or rewritten file to an ingest callable (the spool import, composed by the ``watch``
role's entry in ``ops/worker_main.py``: this layer may not import the importers).

* Roots: ``Settings.watch_paths`` (docs/configuration.md, ``[watch]``). Files under them
  ending in ``WATCHED_SUFFIXES`` are followed; names starting with ``.`` (editors' and
  atomic writers' temp files) are not. A root that does not exist yet is watched once it
  does (checked at every rescan).
* Events come from ``watchfiles`` (inotify/FSEvents); a full rescan every
  ``watch_rescan_s`` seconds (and one at start) catches what the OS dropped or what changed
  while no watcher ran.
* Durable position: ``watch-state.json`` in the data dir (``WatchState``) holds, per file,
  the mark it was last imported at: device, inode, size (the position: bytes imported),
  mtime and a hash of its first ``HEAD_BYTES``. A file whose stat differs from its mark is
  due; a different inode, a smaller size or a different head hash make it *rewritten* (Claude
  Code rewrites a file on resume, an agent may truncate or replace one), else it *grew*.
* Exactly once: the importers need a whole file's context (message trees, session headers,
  last-copy-wins records), so a due file is imported whole, and what makes that cheap and
  exact is the import path's own rule: messages the store already holds are not spooled, and
  every batch id is derived from content, and the writer skips producer ids a session holds.
  A JSON-lines file is read only up to its mark's size: the importers read a file twice
  (structure, then content), and both passes must see the same records while it grows.
  The mark is taken *before* the import reads the file and saved (fsync'd) only after the
  ingest returned, i.e. after every spool append of it was acknowledged durable. A kill -9
  at any point therefore either finds the old mark (the file is imported again: same content,
  same ids, nothing applied twice) or the new one (everything up to it is in the spool).
* Never writes, renames or deletes anything under a root. A file that disappears is dropped
  from the state; its sessions stay in the store.
* Unreadable files (an ``OSError``, or content no importer recognises, or bad input) are kept
  in the state with the reason and the mark they failed at; they are tried again when they
  change (an ``OSError`` at every rescan).
* One watcher per data dir: the ``watch`` lease (``run/watch.lock``); a second one waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from quill.home import RunDir, Settings
from quill.store.errors import LeaseHeldError
from quill.store.lease import Lease

WATCHED_SUFFIXES = (".jsonl", ".json")
#: Bytes of a file's start hashed into its mark: a rewrite that changes the opening (a new
#: session in the same path) is told from growth even when the size grew.
HEAD_BYTES = 4096
#: Milliseconds watchfiles waits for more changes before yielding a group of them.
STEP_MS = 50
DEBOUNCE_MS = 400
#: Seconds between looks at the watch lease while another watcher holds it.
LEASE_RETRY_S = 2.0

#: ``ingest_session()`` opens what one round of imports needs (spool, store view) and yields
#: ``ingest(path, size) -> report``: import the first ``size`` bytes (the mark's);
#: ``report["format"]`` is None when no importer recognised the file. ``ingest`` raises
#: ``OSError`` (file unreadable) or ``ValueError`` (bad input); any other error (a spool or
#: store failure) propagates and stops the watcher without saving.
IngestSession = Callable[
    [], contextlib.AbstractContextManager[Callable[[Path, int], dict[str, Any]]]
]


class Mark(NamedTuple):
    """What a file looked like when it was last imported (sizes in bytes, mtime in ns)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    head: str

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.dev, self.ino, self.size, self.mtime_ns) == (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
        )


def head_hash(path: Path, size: int) -> str:
    """sha256 (hex, 32 chars) of the first ``min(size, HEAD_BYTES)`` bytes of ``path``.
    Raises ``OSError``."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(min(size, HEAD_BYTES))).hexdigest()[:32]


def mark_of(path: Path) -> Mark:
    """The current mark of ``path`` (raises ``OSError``)."""
    st = os.stat(path)
    return Mark(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, head_hash(path, st.st_size))


def change_kind(old: Mark | None, new: Mark, path: Path) -> str:
    """``"new"`` (never imported), ``"rewritten"`` (another inode, smaller, or its first bytes
    differ from those ``old`` hashed) or ``"grown"``. Raises ``OSError``."""
    if old is None:
        return "new"
    if (old.dev, old.ino) != (new.dev, new.ino) or new.size < old.size:
        return "rewritten"
    same = new.head if old.size >= HEAD_BYTES else head_hash(path, old.size)
    return "grown" if same == old.head else "rewritten"


class WatchState:
    """The watcher's durable state (``Settings.watch_state``): ``files`` maps a path to the
    ``Mark`` it was imported at; ``unreadable`` maps a path to ``{"reason", "at", "mark"}``.
    ``save`` replaces the file atomically and fsyncs it and its folder."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.files: dict[str, Mark] = {}
        self.unreadable: dict[str, dict[str, Any]] = {}
        self.damaged: str | None = None  # why the saved state could not be read (then empty)

    @classmethod
    def load(cls, path: Path) -> WatchState:
        """The saved state, or an empty one when there is none. A state file that cannot be
        decoded is set aside as empty with ``damaged`` saying why: every file is then imported
        again, which stores nothing twice (module doc). Raises ``OSError`` when unreadable."""
        state = cls(path)
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            return state
        try:
            data = json.loads(raw)
            state.files = {p: Mark(*m) for p, m in data["files"].items()}
            state.unreadable = {
                p: {**u, "mark": Mark(*u["mark"]) if u.get("mark") else None}
                for p, u in data["unreadable"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            state.files, state.unreadable = {}, {}
            state.damaged = f"{type(exc).__name__}: {exc}"
        return state

    def save(self) -> None:
        """Write the state durably (temp file, fsync, rename, fsync of the folder)."""
        body = {
            "files": {p: list(m) for p, m in self.files.items()},
            "unreadable": {
                p: {**u, "mark": list(u["mark"]) if u.get("mark") else None}
                for p, u in self.unreadable.items()
            },
        }
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def watched(path: str | Path) -> bool:
    """Whether a file name is one the watcher follows (suffix, not hidden)."""
    name = os.path.basename(path)
    return name.endswith(WATCHED_SUFFIXES) and not name.startswith(".")


def scan(roots: Iterable[Path]) -> tuple[dict[str, os.stat_result], dict[str, str]]:
    """Every watched file under ``roots`` with its stat, and the files (or folders) that
    could not be listed or stat'ed with the reason. Symlinks are not followed into folders."""
    found: dict[str, os.stat_result] = {}
    errors: dict[str, str] = {}

    def on_error(exc: OSError) -> None:
        errors[str(exc.filename)] = exc.strerror or type(exc).__name__

    for root in roots:
        if not root.is_dir():
            continue
        for folder, _dirs, names in os.walk(root, onerror=on_error):
            for name in names:
                if not watched(name):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # gone between listing and stat
                except OSError as exc:
                    errors[path] = exc.strerror or type(exc).__name__
                    continue
                if os.path.isfile(path):
                    found[path] = st
    return found, errors


def lag(cfg: Settings, state: WatchState | None = None) -> dict[str, Any]:
    """How far behind the watcher of ``cfg`` is, from its saved state and a scan of the roots
    (stat only): ``roots`` [{path, exists}], ``files`` (imported and followed), ``pending``
    (files new or changed since their mark), ``bytes_behind`` (bytes grown past the marks,
    whole size for new or rewritten files), ``unreadable`` [{path, reason, at}] and
    ``state_damaged`` (why the saved state was unreadable, else None)."""
    state = state or WatchState.load(cfg.watch_state)
    roots = cfg.watch_paths
    found, errors = scan(roots)
    pending, behind = 0, 0
    for path, st in found.items():
        old = state.files.get(path)
        bad = state.unreadable.get(path)
        if old is not None and old.same_stat(st):
            continue
        if bad is not None and bad.get("mark") and bad["mark"].same_stat(st):
            continue
        pending += 1
        grew = old is not None and (old.dev, old.ino) == (st.st_dev, st.st_ino)
        behind += st.st_size - old.size if grew and st.st_size >= old.size else st.st_size
    unreadable = [
        {"path": p, "reason": u["reason"], "at": u.get("at")} for p, u in state.unreadable.items()
    ]
    unreadable += [
        {"path": p, "reason": r, "at": None} for p, r in errors.items() if p not in state.unreadable
    ]
    return {
        "roots": [{"path": str(r), "exists": r.is_dir()} for r in roots],
        "files": sum(1 for p in state.files if p in found),
        "pending": pending,
        "bytes_behind": behind,
        "unreadable": sorted(unreadable, key=lambda u: u["path"]),
        "state_damaged": state.damaged,
    }


class Watcher:
    """Follows ``cfg.watch_paths`` and imports what changes through ``ingest_session`` (module
    doc). ``run(stop)`` until ``stop`` is set; ``round(paths)`` once (``None``: a full scan)."""

    def __init__(self, cfg: Settings, log: Any, ingest_session: IngestSession):
        self.cfg, self.log, self.ingest_session = cfg, log, ingest_session
        self.state = WatchState.load(cfg.watch_state)
        if self.state.damaged:
            log.error("watch.state_damaged", error=self.state.damaged, next="importing all again")
        self.run_dir = RunDir(cfg.home)
        self.totals = {"imported": 0, "new_messages": 0, "rewritten": 0, "gone": 0}
        self.last_scan_at: float | None = None

    # -- one round -------------------------------------------------------------------------

    def round(self, paths: Iterable[str] | None = None) -> dict[str, int]:
        """Import every due file: all under the roots (``paths`` None: a full scan, which also
        forgets files that are gone) or just ``paths`` (from events). Returns this round's
        counts ``{"imported", "new_messages", "rewritten", "gone"}``."""
        counts = dict.fromkeys(self.totals, 0)
        if paths is None:
            found, errors = scan(self.cfg.watch_paths)
            gone = [p for p in self.state.files if p not in found]
            self.last_scan_at = time.time()
        else:
            found, errors, gone = {}, {}, []
            for p in set(paths):
                try:
                    if watched(p) and os.path.isfile(p):
                        found[p] = os.stat(p)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    errors[p] = exc.strerror or type(exc).__name__
                if p in self.state.files and not os.path.exists(p):
                    gone.append(p)
        due = [p for p, st in sorted(found.items()) if self._due(p, st)]
        changed = bool(gone) or any(self._note_unreadable(p, r) for p, r in errors.items())
        for p in gone:  # the agent deleted or renamed it: its sessions stay in the store
            del self.state.files[p]
            self.state.unreadable.pop(p, None)
            counts["gone"] += 1
        if due:
            with self.ingest_session() as ingest:
                for p in due:
                    self._import(ingest, p, counts)
                    changed = False  # _import saved the state
        if changed:
            self.state.save()
        for k, v in counts.items():
            self.totals[k] += v
        return counts

    def _due(self, path: str, st: os.stat_result) -> bool:
        old = self.state.files.get(path)
        if old is not None and old.same_stat(st):
            return False
        bad = self.state.unreadable.get(path)
        if bad is not None and bad.get("mark") and bad["mark"].same_stat(st):
            return False  # failed at exactly this content: try again once it changes
        return True

    def _note_unreadable(self, path: str, reason: str) -> bool:
        if self.state.unreadable.get(path, {}).get("reason") == reason:
            return False
        self.state.unreadable[path] = {"reason": reason, "at": time.time(), "mark": None}
        self.log.warning("watch.unreadable", path=path, reason=reason)
        return True

    def _import(
        self, ingest: Callable[[Path, int], dict[str, Any]], path: str, counts: dict
    ) -> None:
        # The mark is taken before the import reads the file, so it never claims more than
        # was read; saved only once ingest returned (every spool append acknowledged).
        try:
            mark = mark_of(Path(path))
        except FileNotFoundError:
            return  # gone since the scan: the next scan forgets it
        except OSError as exc:
            self._note_unreadable(path, exc.strerror or type(exc).__name__)
            self.state.save()
            return
        try:
            kind = change_kind(self.state.files.get(path), mark, Path(path))
            report = ingest(Path(path), mark.size)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.state.unreadable[path] = {"reason": reason, "at": time.time(), "mark": mark}
            self.state.files.pop(path, None)
            self.log.warning("watch.unreadable", path=path, reason=reason)
            self.state.save()
            return
        if report.get("format") is None:
            self.state.unreadable[path] = {
                "reason": "format not recognised",
                "at": time.time(),
                "mark": mark,
            }
            self.state.files.pop(path, None)
        else:
            self.state.files[path] = mark
            self.state.unreadable.pop(path, None)
            counts["imported"] += 1
            counts["new_messages"] += report.get("new", 0)
            counts["rewritten"] += kind == "rewritten"
        self.state.save()
        self.log.info(
            "watch.imported",
            path=path,
            change=kind,
            format=report.get("format"),
            new=report.get("new"),
            already_stored=report.get("already_stored"),
            position=mark.size,
        )

    # -- the loop --------------------------------------------------------------------------

    def publish(self, state: str = "watching") -> None:
        """Publish ``run/watch.json``: state, roots, totals since start, last full scan."""
        self.run_dir.publish(
            "watch",
            {
                "state": state,
                "roots": [str(r) for r in self.cfg.watch_paths],
                "totals": self.totals,
                "last_scan_at": self.last_scan_at,
            },
        )

    def run(self, stop: threading.Event, *, wait: bool = True) -> None:
        """Watch until ``stop`` is set: wait for the ``watch`` lease (``wait`` False: raise
        ``LeaseHeldError`` instead), a full scan, then events and a full rescan every
        ``watch_rescan_s``. Spool and store errors propagate."""
        with self._lease(stop, wait) as held:
            if not held:
                return
            self.round()
            self.publish()
            while not stop.is_set():
                roots = [r for r in self.cfg.watch_paths if r.is_dir()]
                if not roots:
                    stop.wait(self.cfg.watch_rescan_s)
                    self.round()
                    self.publish()
                    continue
                self._follow(roots, stop)
        self.publish("stopped")

    def _follow(self, roots: list[Path], stop: threading.Event) -> None:
        """Events under ``roots`` until ``stop``, with a full rescan every ``watch_rescan_s``;
        returns when the set of existing roots changed (so the caller watches the new set)."""
        import watchfiles

        rescan = self.cfg.watch_rescan_s
        next_scan = time.monotonic() + rescan
        for changes in watchfiles.watch(
            *roots,
            watch_filter=lambda _change, path: watched(path),
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=stop,
            rust_timeout=max(1, int(rescan * 1000)),
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if changes:
                self.round(p for _c, p in changes)
                self.publish()
            if time.monotonic() >= next_scan:
                next_scan = time.monotonic() + rescan
                self.round()
                self.publish()
                if [r for r in self.cfg.watch_paths if r.is_dir()] != roots:
                    return

    def once(self) -> dict[str, int]:
        """One full round under the ``watch`` lease (``quill watch --once``); raises
        ``LeaseHeldError`` when another watcher runs."""
        with Lease(self.run_dir.lock("watch")):
            return self.round()

    @contextlib.contextmanager
    def _lease(self, stop: threading.Event, wait: bool = True) -> Iterator[bool]:
        lease = Lease(self.run_dir.lock("watch"))
        while True:
            try:
                lease.acquire()
                break
            except LeaseHeldError as exc:
                if not wait:
                    raise
                self.log.info("watch.lease_held", holder=exc.holder)
                self.publish(f"waiting: another watcher holds {self.run_dir.lock('watch')}")
                if stop.wait(LEASE_RETRY_S):
                    yield False
                    return
        try:
            yield True
        finally:
            lease.release()
