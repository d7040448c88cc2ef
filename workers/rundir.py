"""The run directory (``<data dir>/run``): the one module that names its files and decides
whether what they say is current.

Files, each written by one process only (atomically: temp file + rename):

* ``fleet.lock``, ``writer.lock``, ``scheduler.lock`` — leases (``store.lease``);
* ``supervisor.json``, ``writer.json``, ``scheduler.json``, ``consumer.json``, ``http.json`` — what each
  process last published about itself, stamped with its identity (pid, kernel start tick,
  boot id: ``store.lease.process_identity``) and the data dir it serves;
* ``halt.json`` — the writer's sticky halt: a fact about the *store file* (its inode is
  recorded), so it outlives the writer, and stops applying once that file is replaced;
* ``swap.json`` — ``quill recover`` asking a halted writer to swap a rebuilt store in,
  stamped with the requester's identity.

The rule every reader follows (supervisor, status, doctor, recover, wait): a status file or
request counts only while the process that wrote it is alive *and* serves this data dir
(a copied data dir carries the original's files); anything else is history. A halt counts
while the store file it names is still the one in place.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from quill.store.lease import holder_alive, process_identity, read_halt, read_holder

ROLES = ("supervisor", "writer", "scheduler", "consumer", "http")
LEASES = ("fleet", "writer", "scheduler")


class RunDir:
    """The run directory of the data dir ``home``; cheap to construct, holds no open files."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.path = self.home / "run"
        self._me: dict[str, Any] | None = None

    # -- names -------------------------------------------------------------------------------

    def lock(self, name: str) -> Path:
        """Path of lease ``name`` (one of ``LEASES``)."""
        if name not in LEASES:
            raise ValueError(f"unknown lease {name!r}; one of {LEASES}")
        return self.path / f"{name}.lock"

    def status_file(self, role: str) -> Path:
        """Path of the status file of ``role`` (one of ``ROLES``)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {ROLES}")
        return self.path / f"{role}.json"

    @property
    def halt_file(self) -> Path:
        return self.path / "halt.json"

    @property
    def swap_file(self) -> Path:
        return self.path / "swap.json"

    # -- writing ------------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        if self._me is None or self._me["pid"] != os.getpid():
            self._me = {**process_identity(), "home": str(self.home)}
        return self._me

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        body = {**data, **self._identity(), "updated_at": time.time()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def publish(self, role: str, data: dict[str, Any], *, strict: bool = False) -> bool:
        """Replace ``role``'s status with ``data`` + this process's identity + ``updated_at``
        (epoch s). A full or read-only disk is not fatal (status is advisory; the publisher
        must keep doing its real work): returns False, unless ``strict`` (raises OSError)."""
        try:
            self._write(self.status_file(role), data)
            return True
        except OSError:
            if strict:
                raise
            return False

    def record_halt(self, cause: dict[str, Any], store: Path) -> bool:
        """Record the writer's sticky halt about the store file ``store`` (its inode, or None
        when it is missing). Returns False when the disk refused it."""
        try:
            ino = os.stat(store).st_ino
        except OSError:
            ino = None
        try:
            self._write(self.halt_file, {**cause, "store_ino": ino})
            return True
        except OSError:
            return False

    def clear_halt(self) -> None:
        self.halt_file.unlink(missing_ok=True)

    def request_swap(self, new: Path) -> None:
        """Ask the halted writer to swap ``new`` in (raises OSError when unwritable)."""
        self._write(self.swap_file, {"new": str(new)})

    def clear_swap(self) -> None:
        self.swap_file.unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------------------------

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _current(self, data: dict[str, Any] | None, pid: int | None = None) -> bool:
        return bool(data) and data.get("home") == str(self.home) and holder_alive(data) \
            and (pid is None or data.get("pid") == pid)

    def last(self, role: str) -> dict[str, Any] | None:
        """``role``'s last published status with ``alive`` (its publisher is alive and serves
        this data dir: the status is current) and ``age_s`` added; None if never published."""
        data = self._load(self.status_file(role))
        if data is None:
            return None
        return {**data, "alive": self._current(data), "age_s": round(time.time() - data.get("updated_at", 0), 1)}

    def live(self, role: str, pid: int | None = None) -> dict[str, Any] | None:
        """``role``'s status if its publisher is alive (and is ``pid``, when given), else None."""
        data = self._load(self.status_file(role))
        return data if self._current(data, pid) else None

    def lease_holder(self, name: str) -> dict[str, Any] | None:
        """The live holder of lease ``name`` (pid-reuse-safe), or None when it is free."""
        path = self.lock(name)
        holder = read_holder(path)
        return holder if holder and holder_alive(holder) and holder.get("path", str(path)) == str(path) else None

    def fleet_running(self) -> bool:
        """True while a supervisor holds this data dir's fleet lease."""
        return self.lease_holder("fleet") is not None

    def halt(self, store: Path) -> dict[str, Any] | None:
        """The writer's sticky halt if it still applies to ``store`` (same file), else None
        (``store.lease.read_halt``, which the snapshot job reads too)."""
        return read_halt(self.halt_file, store)

    def swap_request(self) -> dict[str, Any] | None:
        """A swap request whose requester (``quill recover``) is still alive and waiting."""
        data = self._load(self.swap_file)
        return data if self._current(data) and data.get("new") else None
