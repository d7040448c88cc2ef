"""Quill's SQLite store (through apsw): schema, op application, FTS indexing, reads.

Only the writer process opens it for writing (``open_writer``); everyone else uses
``Reader``. Errors form one tree rooted at ``StoreError`` (``store.errors``).
"""
from .apply import ChunkResult, apply_chunk, read_cursor
from .connection import open_reader, open_writer, transaction
from .errors import (CantOpenError, CorruptError, DiskFullError, InvalidOpError, LeaseHeldError,
                     NotADatabaseError, ReadOnlyError, StoreError, StoreIOError, TransientError)
from .indexer import index_slice, indexed_upto
from .reads import Reader

__all__ = ["CantOpenError", "ChunkResult", "CorruptError", "DiskFullError", "InvalidOpError",
           "LeaseHeldError", "NotADatabaseError", "ReadOnlyError", "Reader", "StoreError",
           "StoreIOError", "TransientError", "apply_chunk", "index_slice", "indexed_upto",
           "open_reader", "open_writer", "read_cursor", "transaction"]
