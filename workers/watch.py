"""The watcher: follows agent transcript folders as agents write them and hands each new,
grown or rewritten file to an ingest callable (the spool import, composed by the ``watch``
role's entry in ``ops/worker_main.py``: this layer may not import the importers).

* Roots: ``Settings.watch_paths`` (docs/configuration.md, ``[watch]``). Files under them
  ending in ``WATCHED_SUFFIXES`` (JSON, JSON lines, SWE-agent's ``.traj``) are followed;
  names starting with ``.`` (editors' and atomic writers' temp files) are not, but for
  ``WATCHED_NAMES`` (Aider's ``.aider.chat.history.md``). A root that does not exist yet
  is watched once it does (checked at every rescan).
* Events come from ``watchfiles`` (inotify/FSEvents); a full rescan every
  ``watch_rescan_s`` seconds (and one at start) catches what the OS dropped or what changed
  while no watcher ran.
* Durable position: ``watch-state.json`` in the data dir (``watch_state.WatchState``), per file,
  the mark it was last imported at: device, inode, size (the position: bytes imported),
  mtime and a hash of its first ``HEAD_BYTES``. A file whose stat differs from its mark is
  due; a different inode, a smaller size or a different head hash make it *rewritten* (Claude
  Code rewrites a file on resume, an agent may truncate or replace one), else it *grew*.
* One version per import: a due file is opened once; its mark is taken from that descriptor
  (``fstat``, head read with ``pread``) and the import reads only that descriptor, up to
  the mark's size (``ops/importers/source.py``). A file renamed over the path while it is
  read (an agent's atomic rewrite) is therefore never mixed with the one being read: this
  round imports the opened version and records its inode; the next scan finds another inode
  at the path and imports the new version as *rewritten*.
* Exactly once: the importers need a whole file's context (message trees, session headers,
  last-copy-wins records), so a due file is imported whole, and what makes that cheap and
  exact is the import path's own rule: messages the store already holds are not spooled
  (unless held in an older copy: a record the agent wrote again, whose last copy wins and
  rewrites the held row, ``store/apply/revise.py``), every batch id is derived from content,
  and the writer skips producer ids a session holds in the same copy.
  A file is read only up to its mark's size: the importers read a file more than once
  (sniffing, structure, content), and every pass must see the same records while it grows.
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
import errno
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.home import RunDir, Settings, is_exhaustion
from quill.home.throttle import Throttle
from quill.spool.errors import SpoolFullError
from quill.store.errors import LeaseHeldError
from quill.store.lease import Lease
from quill.workers.watch_state import WatchState, change_kind, mark_of, scan, watched

#: Milliseconds watchfiles waits for more changes before yielding a group of them.
STEP_MS = 50
DEBOUNCE_MS = 400
#: Seconds between looks at the watch lease while another watcher holds it.
LEASE_RETRY_S = 2.0
#: A round that meets a full disk (the spool, or ``watch-state.json``) is reported at most
#: once per this many seconds and left to the next round (a change, or the rescan).
FULL_REPORT_S = 5.0
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _reason(exc: BaseException) -> str:
    """Why a file could not be imported, for ``watch-state.json`` and ``quill status``. A
    ``MemoryError`` (a line or message larger than this process may allocate: its objects
    are freed as it unwinds) is the file's, like bad input: kept as unreadable at its mark and
    tried again once the file changes, while the other files go on being imported. Raised
    out of the round it would stop the watcher at the same file on every restart, and no
    file after it in the scan would ever be imported."""
    if isinstance(exc, MemoryError):
        return "out of memory importing it (a line too large for this process's memory)"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` means the disk under the data dir is full (by type and errno)."""
    return isinstance(exc, SpoolFullError) or (isinstance(exc, OSError) and exc.errno in _FULL)


#: ``ingest_session()`` opens what one round of imports needs (spool, store view) and yields
#: ``ingest(path, fd, size) -> report``: import the first ``size`` bytes (the mark's) of the
#: version open on ``fd`` (the watcher's descriptor: every read is from it; it stays open);
#: ``report["format"]`` is None when no importer recognised the file. ``ingest`` raises
#: ``OSError`` (file unreadable) or ``ValueError`` (bad input); any other error (a spool or
#: store failure) propagates and stops the watcher without saving.
IngestSession = Callable[
    [], contextlib.AbstractContextManager[Callable[[Path, int, int], dict[str, Any]]]
]


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
        self.full: str | None = None  # why the last round stopped on a full disk
        self._throttle = Throttle(FULL_REPORT_S)

    # -- one round -------------------------------------------------------------------------

    def round(self, paths: Iterable[str] | None = None) -> dict[str, int]:
        """Import every due file: all under the roots (``paths`` None: a full scan, which also
        forgets files that are gone) or just ``paths`` (from events). Returns this round's
        counts ``{"imported", "new_messages", "rewritten", "gone"}``."""
        counts = dict.fromkeys(self.totals, 0)
        if paths is None:
            try:
                found, errors = scan(self.cfg.watch_paths)
            except OSError as exc:
                if not is_exhaustion(exc, chain=False):
                    raise
                self._overloaded(error=exc.strerror)
                return counts  # nothing forgotten, nothing marked: the next round scans again
            gone = [p for p in self.state.files if p not in found]
            # An unreadable file (or folder) neither found nor failing any more is gone too:
            # kept, it would be listed as unreadable by `quill status` for ever.
            stale = [p for p in self.state.unreadable if p not in found and p not in errors]
            self.last_scan_at = time.time()
        else:
            found, errors, gone, stale = {}, {}, [], []
            for p in set(paths):
                try:
                    if watched(p) and os.path.isfile(p):
                        found[p] = os.stat(p)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    errors[p] = exc.strerror or type(exc).__name__
                if not os.path.exists(p):
                    (gone if p in self.state.files else stale).append(p)
        due = [p for p, st in sorted(found.items()) if self._due(p, st)]
        stale = [p for p in stale if p in self.state.unreadable and p not in self.state.files]
        for p in stale:
            del self.state.unreadable[p]
        changed = bool(gone or stale)
        changed = any([self._note_unreadable(p, r) for p, r in errors.items()]) or changed
        for p in gone:  # the agent deleted or renamed it: its sessions stay in the store
            del self.state.files[p]
            self.state.unreadable.pop(p, None)
            counts["gone"] += 1
        if due:
            try:
                with self.ingest_session() as ingest:
                    for p in due:
                        self._import(ingest, p, counts)
                        changed = False  # _import saved the state
            except Exception as exc:
                if not is_exhaustion(exc, chain=False):
                    raise
                # No descriptor to open the spool or the store: every file stays due.
                self._overloaded(error=type(exc).__name__, due=len(due))
        if changed:
            self._save()
        for k, v in counts.items():
            self.totals[k] += v
        return counts

    def _save(self) -> None:
        """Write the watch state; with no descriptor left to write it, keep it in memory for
        the next save (the imports it records are in the spool already: a restart before
        then imports them again, and the store skips what it holds)."""
        try:
            self.state.save()
        except OSError as exc:
            if not is_exhaustion(exc, chain=False):
                raise
            self.log.warning("watch.state_unsaved", error=exc.strerror)

    def _overloaded(self, **fields: Any) -> None:
        """Log ``watch.overloaded`` (no descriptor left) at most every ``FULL_REPORT_S``, as a
        full disk is logged; ``suppressed`` counts the reports left out meanwhile."""
        left_out = self._throttle.ready("overloaded")
        if left_out is not None:
            self.log.warning("watch.overloaded", suppressed=left_out, **fields)

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
        self, ingest: Callable[[Path, int, int], dict[str, Any]], path: str, counts: dict
    ) -> None:
        # One descriptor: the mark is taken from it before the import reads it, so it names
        # the version read and never claims more than was read; saved only once ingest
        # returned (every spool append acknowledged).
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return  # gone since the scan: the next scan forgets it
        except OSError as exc:
            self._note_unreadable(path, exc.strerror or type(exc).__name__)
            self._save()
            return
        try:
            self._import_version(ingest, path, fd, counts)
        finally:
            os.close(fd)

    def _import_version(
        self, ingest: Callable[[Path, int, int], dict[str, Any]], path: str, fd: int, counts: dict
    ) -> None:
        try:
            mark = mark_of(fd)
        except OSError as exc:
            self._note_unreadable(path, exc.strerror or type(exc).__name__)
            self.state.save()
            return
        try:
            kind = change_kind(self.state.files.get(path), mark, fd)
            report = ingest(Path(path), fd, mark.size)
        except FileNotFoundError:
            return
        except Exception as exc:
            if is_exhaustion(exc, chain=False):
                # No descriptor left (to read the file or append to the spool): the file is
                # fine, so it is not marked unreadable at this content (which would skip it
                # until it changes); the next round imports it.
                self._overloaded(path=path, error=type(exc).__name__)
                return
            if disk_full(exc) or not isinstance(exc, (OSError, ValueError, MemoryError)):
                raise  # a full disk is ridden out by ``_round``; the file itself is fine
            reason = _reason(exc)
            self.state.unreadable[path] = {"reason": reason, "at": time.time(), "mark": mark}
            self.state.files.pop(path, None)
            self.log.warning("watch.unreadable", path=path, reason=reason)
            self._save()
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
        self._save()
        skipped = [p for p in report.get("problems", ()) if p["kind"] == "skipped"]
        if skipped:  # bad lines, records over the spool's limit: not imported, said here
            self.log.warning("watch.skipped", path=path, count=len(skipped), first=skipped[:5])
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
            self._round()
            while not stop.is_set():
                roots = [r for r in self.cfg.watch_paths if r.is_dir()]
                if not roots:
                    stop.wait(self.cfg.watch_rescan_s)
                    self._round()
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
                self._round(p for _c, p in changes)
            if time.monotonic() >= next_scan:
                next_scan = time.monotonic() + rescan
                self._round()
                if [r for r in self.cfg.watch_paths if r.is_dir()] != roots:
                    return

    def _round(self, paths: Iterable[str] | None = None) -> None:
        """``round(paths)`` then ``publish``, riding out a full disk: the round stops there,
        is logged (``watch.disk_full``, at most every ``FULL_REPORT_S``, ``suppressed``
        counting the rest; ``watch.disk_writable_again`` once a round completes) and published
        (``waiting: disk full …``), and the next round — the next change, or the rescan within
        ``watch_rescan_s`` — tries again. Nothing is lost: a mark not saved is kept in memory
        when its import was acknowledged, else the file is imported again (same batch ids)."""
        try:
            self.round(paths)
        except Exception as exc:
            if not disk_full(exc):
                raise
            self.full = f"{type(exc).__name__}: {exc}"
            left_out = self._throttle.ready("full")
            if left_out is not None:
                self.log.error("watch.disk_full", error=self.full, suppressed=left_out)
            self.publish(f"waiting: disk full ({self.full}); retried at the next change or rescan")
            return
        if self.full is not None:
            self.full = None
            self._throttle.clear("full")
            self.log.warning("watch.disk_writable_again")
        self.publish()

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
