"""The watcher's ingest: one round of imports into the spool, exactly as ``quill import``
imports a file (``import_spool.import_file``: only what the store lacks, content batch ids),
composed with the watch loop of ``workers/watch.py`` by the ``watch`` role's entry
(``ops/worker_main.py``) and by ``quill watch``.

A round first waits (at most ``APPLY_WAIT_S``, and only while a fleet runs) until the writer
has applied what the previous round spooled: the store view then holds it, so a file that
grew is spooled from where the store ends instead of again from where the last applied
round ended. Waiting is only an economy of spool space: a round that does not wait stores
nothing twice (the writer skips producer ids a session holds, and rewrites a held message
only when a later copy of it differs: ``store/apply/revise.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.client.wait import wait_applied
from quill.ops.importers.source import Source
from quill.ops.transfer.import_spool import import_file, open_store_view
from quill.ops.transfer.pending_deletes import pending_deletes
from quill.spool import Ack, Position, Spool, WaitTimeoutError

#: Longest wait (seconds) for the previous round's records to be applied before a round.
APPLY_WAIT_S = 5.0


class _Tracked:
    """A spool that remembers the position of its last acknowledged append."""

    def __init__(self, spool: Spool):
        self._spool = spool
        self.last: Position | None = None

    def append(
        self, op: str, data: dict[str, Any], *, batch_id: str | None = None, plain: bool = False
    ) -> Ack:
        ack = self._spool.append(op, data, batch_id=batch_id, plain=plain)
        self.last = ack.position
        return ack

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spool, name)


def ingest_session(cfg: Any, log: Any = None) -> Callable[[], Any]:
    """A ``workers.watch.IngestSession`` for data dir ``cfg``: each call waits for the previous
    round to be applied (module doc), opens the spool and a fresh read-only store view (None
    before any store exists) and yields ``ingest(path, fd, size) -> FileReport.as_dict()``:
    import the first ``size`` bytes of the version open on ``fd`` (the watcher's descriptor,
    left open: every read is from it, ``importers.source``). Raises what
    ``import_file`` raises (``OSError`` for an unreadable file, ``ValueError`` for bad input,
    ``SpoolError``) and the store error tree when the store exists but cannot be read."""
    from quill.home import RunDir

    spooled: list[Position] = []  # the last position the previous rounds appended

    @contextlib.contextmanager
    def session() -> Iterator[Callable[[Path, int, int], dict[str, Any]]]:
        if spooled and RunDir(cfg.home).fleet_running():
            try:
                wait_applied(cfg, spooled[-1], APPLY_WAIT_S, without_fleet=1.0)
            except WaitTimeoutError as exc:  # not applied yet: import anyway (module doc)
                if log is not None:
                    log.warning("watch.apply_wait_timeout", error=str(exc))
        store = open_store_view(cfg)
        try:
            with Spool.for_settings(cfg) as raw:
                spool = _Tracked(raw)
                pending = pending_deletes(spool.dir, store)  # imports add no deletes

                def ingest(path: Path, fd: int, size: int) -> dict[str, Any]:
                    try:
                        with Source(path, fd, size, live=True, owned=False) as src:
                            return import_file(spool, src, store, pending).as_dict()
                    finally:
                        if spool.last is not None:
                            spooled[:] = [spool.last]

                yield ingest
        finally:
            if store is not None:
                store.close()

    return session
