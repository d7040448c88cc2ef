"""The watcher's ingest: one round of imports into the spool, exactly as ``quill import``
imports a file (``import_spool.import_file``: only what the store lacks, content batch ids),
composed with the watch loop of ``workers/watch.py`` by the ``watch`` role's entry
(``ops/worker_main.py``) and by ``quill watch``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.transfer.import_spool import import_file, open_store_view
from quill.ops.transfer.pending_deletes import pending_deletes
from quill.spool import Spool


def ingest_session(cfg: Any) -> Callable[[], Any]:
    """A ``workers.watch.IngestSession`` for data dir ``cfg``: each call opens the spool and a
    fresh read-only store view (None before any store exists) and yields ``ingest(path) ->
    FileReport.as_dict()``. Raises what ``import_file`` raises (``OSError`` for an unreadable
    file, ``ValueError`` for bad input, ``SpoolError``) and the store error tree when the store
    exists but cannot be read."""

    @contextlib.contextmanager
    def session() -> Iterator[Callable[[Path], dict[str, Any]]]:
        store = open_store_view(cfg)
        try:
            with Spool(cfg.spool_dir, segment_bytes=cfg.segment_bytes) as spool:
                pending = pending_deletes(spool.dir, store)  # imports add no deletes

                def ingest(path: Path) -> dict[str, Any]:
                    return import_file(spool, path, store, pending).as_dict()

                yield ingest
        finally:
            if store is not None:
                store.close()

    return session
