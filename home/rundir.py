"""Layer 0, the run directory (``run/``) of a data dir: ``RunDir`` names its files and decides
whether what they say is current; the records kept there are typed: the writer's sticky halt
(``Halt``, ``read_halt``), ``quill recover``'s swap request (``SwapRequest``) and the
writer's published status (``WriterStatus``).

Records are NamedTuples, not dataclasses: every command, the per-turn ``quill push`` included,
imports ``quill.home``, and ``dataclasses`` imports ``inspect``, a measurable part of that
process's start (bench/cli.py; figure in bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

from quill.home.identity import holder_alive, process_identity, read_holder
from quill.home.layout import RUN_DIR
from quill.home.throttle import Throttle

#: A bookkeeping file that cannot be written (a full disk) is reported at most this often
#: per file (``Throttle``); each later publish retries it.
UNWRITABLE_REPORT_S = 5.0

# -- run-directory records --------------------------------------------------------------------

#: ``Halt.store_ino`` of a halt recorded before halts named their store file: it applies to
#: whatever file is in place (inodes are never negative).
ANY_STORE = -1


class Halt(NamedTuple):
    """The writer's sticky halt (``run/halt.json``; also the ``halt`` of the writer's status and
    of a PostgreSQL store's halt row): a fact about the store *file* whose inode it records, so
    it outlives the writer and stops applying once that file is replaced."""

    cause: str  # the error class, e.g. "CorruptError", "StoreMissing"
    detail: str
    at: float | None  # epoch s; None when the record's time is unreadable (never "now" or 0)
    next: str = "quill recover"  # the command that lifts it
    cursor: str | None = None  # the writer's spool cursor when it halted
    store_ino: int | None = ANY_STORE  # the store file's inode; None: the file was missing
    #: The store job whose run met the damage (its ``job_runs`` row: name + ``started_at``,
    #: epoch s), or None when the drain, the indexer or the open did. That row cannot be
    #: finished in the damaged store; recovery finishes it as ``halted`` from this record.
    job: str | None = None
    job_started: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready dict (``cursor``/``store_ino``/``job`` only when known)."""
        out = {"cause": self.cause, "detail": self.detail, "at": self.at, "next": self.next}
        if self.cursor is not None:
            out["cursor"] = self.cursor
        if self.store_ino != ANY_STORE:
            out["store_ino"] = self.store_ino
        if self.job is not None:
            out["job"], out["job_started"] = self.job, self.job_started
        return out

    @classmethod
    def from_json(cls, data: Any) -> Halt | None:
        """The halt a recorded dict describes; None for an empty or non-dict value. Lenient on
        the rest: any non-empty record is a halt (older writers wrote fewer fields)."""
        if not isinstance(data, dict) or not data:
            return None
        at = data.get("at")
        return cls(
            str(data.get("cause", "halt")),
            str(data.get("detail", "see quill status")),
            float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
            str(data.get("next", "quill recover")),
            str(data["cursor"]) if data.get("cursor") is not None else None,
            data.get("store_ino", ANY_STORE),
            str(data["job"]) if data.get("job") is not None else None,
            float(data["job_started"])
            if isinstance(data.get("job_started"), (int, float))
            else None,
        )

    def applies_to(self, store: Path) -> bool:
        """True while ``store`` is the file this halt names (same inode, or missing both times),
        or when the halt names no file (``ANY_STORE``)."""
        if self.store_ino == ANY_STORE:
            return True
        try:
            ino: int | None = os.stat(store).st_ino
        except OSError:
            ino = None
        return self.store_ino == ino


def read_halt(halt_file: Path, store: Path) -> Halt | None:
    """The halt recorded in ``halt_file`` if it still applies to ``store``, else None. The one
    reading shared by ``RunDir.halt`` and the snapshot job (which must not copy a file the writer
    refused)."""
    try:
        halt = Halt.from_json(json.loads(Path(halt_file).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return halt if halt is not None and halt.applies_to(store) else None


class SwapRequest(NamedTuple):
    """``quill recover`` asking the halted writer to swap the rebuilt store ``new`` in
    (``run/swap.json``); honoured only while the requester is alive (``RunDir.swap_request``)."""

    new: Path

    def to_json(self) -> dict[str, Any]:
        return {"new": str(self.new)}

    @classmethod
    def from_json(cls, data: Any) -> SwapRequest | None:
        """The request a recorded dict describes, None when it names no file."""
        new = data.get("new") if isinstance(data, dict) else None
        return cls(Path(new)) if isinstance(new, str) and new else None


class WriterStatus(NamedTuple):
    """What the writer last published about itself (``run/writer.json``): the one spelling of
    each of its keys. The writer publishes ``RunDir.publish("writer", status.to_json())``;
    readers take ``WriterStatus.from_json(RunDir.last("writer"))`` (or ``live``) and read
    attributes. Never a dataclass, for the import cost (module doc). Counters restart from 0
    with each writer process; times are epoch s."""

    idle: bool = False  # nothing left to apply or index (published at most every few s)
    halted: bool = False  # in the sticky halt: ``halt`` says why
    halt: Halt | None = None
    cursor: str | None = None  # the writer's spool cursor, ``segment:offset``
    backend: str | None = None  # the store's kind: "sqlite" or "postgres"
    spool_id: str | None = None
    job: str | None = None  # the store job running now, if any
    error: str | None = None  # the retryable failure being retried (a full disk says so)
    #: Chunk commit times (read+apply+commit): ``{"counts": per bucket, "count", "sum"}``.
    commit_hist: dict[str, Any] | None = None
    applied: int = 0  # ops applied
    duplicates: int = 0  # ops already applied (a replayed batch)
    rejected: int = 0  # ops quarantined
    rows: int = 0  # message rows written
    chunks: int = 0  # chunk transactions committed
    fts_indexed_upto: int | None = None  # the search index watermark (a rowid)
    wal_blocked_since: float | None = None  # TRUNCATE checkpoints refused by a reader since
    queue_error: str | None = None  # the job queue is unreachable: why (None when reachable)
    queue_down_since: float | None = None  # ... since when (epoch s)
    # Read back only, never published by the writer: ``RunDir`` stamps ``pid`` and
    # ``updated_at`` on every file, and ``RunDir.last`` adds ``alive`` and ``age_s``.
    pid: int | None = None
    updated_at: float | None = None
    alive: bool = False
    age_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as published. A halted writer publishes only ``halted``, ``halt``,
        ``idle``, ``cursor``, ``backend`` and ``spool_id``; a running one every field but the
        read-back ones (``None`` where unknown)."""
        out: dict[str, Any] = {
            "idle": self.idle,
            "halted": self.halted,
            "cursor": self.cursor,
            "backend": self.backend,
            "spool_id": self.spool_id,
        }
        if self.halted:
            return {**out, "halt": self.halt.to_json() if self.halt else {}}
        skip = {"idle", "halted", "halt", "pid", "updated_at", "alive", "age_s"}
        return {**out, **{k: v for k, v in zip(self._fields, self) if k not in skip}}

    @classmethod
    def from_json(cls, data: Any) -> WriterStatus:
        """The status a published dict describes; keys it lacks keep their defaults (a halted
        writer's record has no counters) and unknown keys are ignored. ``None`` or a non-dict
        (nothing published) reads as the empty status: not alive, not idle, not halted."""
        if not isinstance(data, dict):
            return cls()
        known = {k: data[k] for k in cls._fields if k in data}
        if "halt" in known:
            known["halt"] = Halt.from_json(known["halt"])
        return cls(**known)


# -- the run directory ------------------------------------------------------------------------

ROLES = ("supervisor", "writer", "scheduler", "consumer", "http", "watch")
LEASES = ("fleet", "writer", "scheduler", "watch")


class RunDir:
    """The run directory of data dir ``home``: the one owner of its file names, and of the
    rule for whether what they say is current. Cheap to construct, holds no open files.

    Files, each written by one process only, atomically (temp file + rename), stamped with the
    writer's identity (``process_identity``), the data dir it serves and ``updated_at``:
    ``<lease>.lock`` (``LEASES``, held by ``quill.store.lease.Lease``), ``<role>.json`` (what
    each of ``ROLES`` last published about itself), ``halt.json`` (``Halt``) and ``swap.json``
    (``SwapRequest``).

    The rule every reader follows: a status file or request counts only while the process that
    wrote it is alive *and* serves this data dir (a copied data dir carries the original's
    files); anything else is history. A halt counts while the store file it names is in place.

    Status files and the halt record are bookkeeping: a full or failing disk (any ``OSError``)
    never takes their publisher down. ``publish`` and ``record_halt`` return False, the next
    one retries, and ``log`` (a structlog-style logger, optional) gets ``run_dir.unwritable``
    (``file``, ``errno``, ``error``, ``suppressed``) at most every ``UNWRITABLE_REPORT_S`` per
    file, then ``run_dir.writable_again`` once a write succeeds.
    """

    def __init__(self, home: Path, log: Any = None):
        self.home = Path(home)
        self.path = self.home / RUN_DIR
        self._me: dict[str, Any] | None = None
        self.log = log
        self._throttle = Throttle(UNWRITABLE_REPORT_S)
        self._failing: set[str] = set()

    def lock(self, name: str) -> Path:
        """Path of lease ``name`` (one of ``LEASES``; ValueError otherwise)."""
        if name not in LEASES:
            raise ValueError(f"unknown lease {name!r}; one of {LEASES}")
        return self.path / f"{name}.lock"

    def status_file(self, role: str) -> Path:
        """Path of the status file of ``role`` (one of ``ROLES``; ValueError otherwise)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {ROLES}")
        return self.path / f"{role}.json"

    @property
    def halt_file(self) -> Path:
        return self.path / "halt.json"

    @property
    def swap_file(self) -> Path:
        return self.path / "swap.json"

    @property
    def start_file(self) -> Path:
        return self.path / "accepted-start.json"

    # -- writing -------------------------------------------------------------------------------

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        if self._me is None or self._me["pid"] != os.getpid():
            self._me = {**process_identity(), "home": str(self.home)}
        body = {**data, **self._me, "updated_at": time.time()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def _bookkeeping(self, path: Path, data: dict[str, Any]) -> bool:
        """Write a bookkeeping file; an ``OSError`` is reported (class doc), never raised."""
        try:
            self._write(path, data)
        except OSError as exc:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:  # a half-written temp file holds the space the next try needs
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            self._failing.add(path.name)
            suppressed = self._throttle.ready(path.name)
            if self.log is not None and suppressed is not None:
                self.log.warning(
                    "run_dir.unwritable",
                    file=str(path),
                    errno=exc.errno,
                    error=exc.strerror or str(exc),
                    suppressed=suppressed,
                )
            return False
        if path.name in self._failing:
            self._failing.discard(path.name)
            self._throttle.clear(path.name)
            if self.log is not None:
                self.log.info("run_dir.writable_again", file=str(path))
        return True

    def publish(self, role: str, data: dict[str, Any]) -> bool:
        """Replace ``role``'s status with ``data`` + this process's identity + ``updated_at``
        (epoch s). Returns False when the disk refused it (class doc: reported, never raised;
        status is advisory and the publisher must keep doing its real work)."""
        return self._bookkeeping(self.status_file(role), data)

    def record_halt(self, halt: Halt, store: Path) -> bool:
        """Record ``halt`` about the store file ``store`` (its inode, or None when it is
        missing). Returns False when the disk refused it."""
        try:
            ino: int | None = os.stat(store).st_ino
        except OSError:
            ino = None
        return self._bookkeeping(self.halt_file, halt._replace(store_ino=ino).to_json())

    def clear_halt(self) -> None:
        self.halt_file.unlink(missing_ok=True)

    def request_swap(self, new: Path) -> None:
        """Ask the halted writer to swap ``new`` in (raises OSError when unwritable)."""
        self._write(self.swap_file, SwapRequest(Path(new)).to_json())

    def clear_swap(self) -> None:
        self.swap_file.unlink(missing_ok=True)

    def accept_start(self, store: str, spool_id: str, segment: int) -> None:
        """Record that the store at ``store`` (its location: path or password-free URL) may
        start applying the spool ``spool_id`` at ``segment`` although it holds no cursor for
        it and the segments before were collected (``quill recover --accept-loss``). Raises
        OSError."""
        self._write(
            self.start_file, {"store": store, "spool_id": spool_id, "segment": int(segment)}
        )

    def accepted_start(self, store: str, spool_id: str | None) -> int | None:
        """The first segment accepted by ``accept_start`` for ``store`` and the spool
        ``spool_id``, else None. An acceptance names the spool it was given for: one copied
        with a run dir from another data dir (another spool on the same store), or written
        before the spool was given a new id, accepts nothing here."""
        data = self._load(self.start_file)
        if data is None or data.get("store") != store or spool_id is None:
            return None
        if data.get("spool_id") != spool_id:
            return None
        segment = data.get("segment")
        return segment if isinstance(segment, int) and not isinstance(segment, bool) else None

    # -- reading -------------------------------------------------------------------------------

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _current(self, data: dict[str, Any] | None, pid: int | None = None) -> bool:
        return (
            data is not None
            and data.get("home") == str(self.home)
            and holder_alive(data)
            and (pid is None or data.get("pid") == pid)
        )

    def last(self, role: str) -> dict[str, Any] | None:
        """``role``'s last published status with ``alive`` (its publisher is alive and serves
        this data dir: the status is current) and ``age_s`` added; None if never published."""
        data = self._load(self.status_file(role))
        if data is None:
            return None
        age = round(time.time() - data.get("updated_at", 0), 1)
        return {**data, "alive": self._current(data), "age_s": age}

    def live(self, role: str, pid: int | None = None) -> dict[str, Any] | None:
        """``role``'s status if its publisher is alive (and is ``pid``, when given), else None."""
        data = self._load(self.status_file(role))
        return data if self._current(data, pid) else None

    def lease_holder(self, name: str) -> dict[str, Any] | None:
        """The live holder of lease ``name`` (pid-reuse-safe), or None when it is free."""
        path = self.lock(name)
        holder = read_holder(path)
        return (
            holder
            if holder and holder_alive(holder) and holder.get("path", str(path)) == str(path)
            else None
        )

    def fleet_running(self) -> bool:
        """True while a supervisor holds this data dir's fleet lease."""
        return self.lease_holder("fleet") is not None

    def halt(self, store: Path) -> Halt | None:
        """The writer's sticky halt if it still applies to ``store`` (same file), else None."""
        return read_halt(self.halt_file, store)

    def swap_request(self) -> SwapRequest | None:
        """A swap request whose requester (``quill recover``) is still alive and waiting."""
        data = self._load(self.swap_file)
        return SwapRequest.from_json(data) if self._current(data) else None
