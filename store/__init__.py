"""Quill's SQLite store (through apsw): schema, op application, FTS indexing, reads.

``open(settings)`` (``store.factory``) returns the data dir's store, SQLite or PostgreSQL,
behind the contract ``Store`` (``store.contract``); only the writer process opens it for
writing. Everyone else uses ``Reader``. Errors form one tree rooted at ``StoreError``
(``store.errors``).

The names below are resolved on first use (PEP 562): ``quill push`` imports only
``store.apply.precheck`` and must not pay for the appliers, reads and search (bench/cli.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    **dict.fromkeys(("apply_chunk", "read_cursor"), "apply.chunk"),
    "ChunkResult": "apply.chunking",
    **dict.fromkeys(("open_reader", "open_writer", "transaction"), "sqlite.connection"),
    **dict.fromkeys(
        (
            "CantOpenError",
            "CorruptError",
            "DiskFullError",
            "InvalidOpError",
            "LeaseHeldError",
            "NotADatabaseError",
            "ReadOnlyError",
            "StoreError",
            "StoreIOError",
            "TransientError",
        ),
        "errors",
    ),
    **dict.fromkeys(("index_slice", "indexed_upto"), "sqlite.indexer"),
    "Reader": "read.reader",
    **dict.fromkeys(("open", "open_url", "is_postgres_url"), "factory"),
    "Store": "contract",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quill.store' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), "open_store" if name == "open" else name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
