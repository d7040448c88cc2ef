"""The one place that knows how ``messages.content`` is stored on SQLite: as TEXT, or — for a
text of at least ``Settings.pack_min_bytes`` UTF-8 bytes — as a BLOB holding one Zstandard
frame of those bytes. The column's type tells the two forms apart (a BLOB is always packed;
no text is ever stored as a BLOB otherwise), so rows written before packing existed, or below
the threshold, need no marker and no migration.

* Writes bind ``pack_sql("?")`` (the SQL function ``quill_pack``, registered on a connection by
  ``register`` with the connection's threshold): every insert and revision packs the same way,
  and a copy made in SQL (``INSERT … SELECT content``, a compaction's copies, salvage) copies
  the stored form unchanged.
* SQL that reads the text (the FTS fill, the substring scan, snippets, previews, comparisons)
  reads ``text_sql(col)`` (the SQL function ``quill_text``); Python that has a stored value in
  hand calls ``unpack``. Readers therefore always get ``str`` (or None), as from PostgreSQL.
* PostgreSQL stores ``content`` as text (TOAST compresses a large value itself): its dialect
  (``store.postgres.connection.translate``) reads ``quill_text(x)`` and ``quill_pack(x)`` as
  ``x``, so the statements the two backends share stay one text.

Zstandard (level 3) over zlib, measured on the 100k synthetic store's rows of ≥ 1 KiB
(bench/RESULTS.md): 25 vs 108 µs of CPU to pack a row, 7.5 vs 13.8 µs to unpack, 0.43 vs 0.39
of the text's bytes. The frame records the text's size, so ``packed_size`` reads it from the
first bytes without unpacking; it ends with a checksum of the text. Errors: ``unpack`` of a BLOB
that is not a whole frame, or whose text does not match its checksum, raises
``PackedValueError`` (a damaged row: the store error tree's ``CorruptError``). A frame written
before checksums were (none in its header) is checked only for its structure. The damage
checks (``jobs.worker_jobs.quick_check``, ``integrity_check``, ``quill doctor --check``)
unpack every packed value, so a damaged one halts the writer (``quill recover``) as damage in
the file does: SQLite's own checks read pages and records, never what a BLOB holds.
"""

from __future__ import annotations

import re
from typing import Any

import zstandard

from quill.store.errors import CorruptError

#: SQL function names (``register``); PostgreSQL's dialect reads each as its argument.
TEXT_FUNCTION = "quill_text"
PACK_FUNCTION = "quill_pack"
#: SQL function (no argument): the connection's threshold, for ``PACK_STORED_SQL``.
MIN_FUNCTION = "quill_pack_min"
#: SQL (SQLite; parameters: lowest id excluded, highest id included): pack the stored texts of
#: those rows that are plain but reach the connection's threshold — rows written before
#: packing existed or under a higher threshold. The text does not change, so the word index
#: stays as it is; the trigram index holds a packed text whole but a plain one only in part
#: (``store.search.columns``), so the caller re-indexes the packed rows there
#: (``jobs.store_jobs.pack_stored``: ``RETURNING id``, ``indexer.reindex_trigram``).
PACK_STORED_SQL = (
    f"UPDATE messages SET content = {PACK_FUNCTION}(content) WHERE id > ? AND id <= ? "
    f"AND typeof(content) = 'text' AND length(CAST(content AS BLOB)) >= {MIN_FUNCTION}() "
    "AND content != ''"
)
#: Zstandard level: the measured balance of writer CPU and size (module doc).
LEVEL = 3
#: Bytes at the start of a packed value that hold the frame header (its text size among them).
HEADER_BYTES = 18
#: Bytes of text unpacked at a time when a prefix read checks the rest of its frame.
CHECK_CHUNK = 1 << 20

#: Every frame ends with the checksum of its text (4 bytes, XXH64): a frame damaged inside a
#: block of literals still decodes, to other text; only the checksum tells it apart, so a
#: damaged value is an error, never a different text shown as the message's.
_COMPRESS = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True, write_checksum=True)
_DECOMPRESS = zstandard.ZstdDecompressor()


class PackedValueError(CorruptError):
    """A stored ``content`` BLOB is not a whole Zstandard frame of UTF-8 text (a damaged row)."""


def pack(text: str | None, min_bytes: int) -> str | bytes | None:
    """``text`` as stored: a BLOB (one Zstandard frame of its UTF-8 bytes) when it is at least
    ``min_bytes`` bytes long and not empty, else ``text`` itself. Pure."""
    if not text or len(text) * 4 < min_bytes:  # fewer than min_bytes bytes in any encoding
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) < min_bytes:
        return text
    return _COMPRESS.compress(raw)


def unpack(value: Any) -> Any:
    """A stored ``content`` value as text: a BLOB unpacked, anything else (str, None) as it is.
    Raises ``PackedValueError`` for a BLOB that is not a whole frame."""
    if not isinstance(value, (bytes, memoryview)):
        return value
    try:
        return _DECOMPRESS.decompress(value).decode("utf-8", "surrogatepass")
    except (zstandard.ZstdError, UnicodeDecodeError) as exc:
        raise PackedValueError(f"a packed message text is damaged: {exc}") from exc


def packed_size(head: bytes) -> int | None:
    """The text's size in UTF-8 bytes, read from the first ``HEADER_BYTES`` of a packed
    value (None when the header does not hold it)."""
    try:
        size = zstandard.frame_content_size(bytes(head))
    except zstandard.ZstdError:
        return None
    return size if size >= 0 else None


def unpack_prefix(reader: Any, chars: int) -> str:
    """The first ``chars`` characters of a packed value read from ``reader`` (a seekable
    file-like object over the BLOB at its start, e.g. an apsw blob handle). Only those
    characters are kept (at most 4 bytes a character), but the whole frame is unpacked, in
    ``CHECK_CHUNK`` pieces, to reach its checksum: a frame damaged inside a block of literals
    decodes to other text, which only the checksum tells apart. Memory stays bounded; CPU
    grows with the text (about 1 ms a MB). Raises ``PackedValueError`` for a frame that is
    damaged, cut short or of unknown size, as ``unpack`` does."""
    import codecs

    head = reader.read(HEADER_BYTES)
    reader.seek(0)
    size = packed_size(head)
    try:
        with _DECOMPRESS.stream_reader(reader, read_across_frames=False, closefd=False) as stream:
            data = stream.read(4 * chars)
            total = len(data)
            while chunk := stream.read(CHECK_CHUNK):
                total += len(chunk)
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        text = decoder.decode(data, final=False)
    except (zstandard.ZstdError, UnicodeDecodeError) as exc:
        raise PackedValueError(f"a packed message text is damaged: {exc}") from exc
    if size is None or total != size:  # the stream ends quietly where the input does
        raise PackedValueError(
            f"a packed message text is damaged: its frame gave {total} of "
            f"{'an unknown number of' if size is None else size} bytes"
        )
    return text[:chars]


def text_sql(column: str) -> str:
    """SQL expression: the text of a stored ``content`` column (``column``: a column name).
    Only a BLOB goes through ``quill_text``: a call into Python per plain row cost the
    substring scan of 100k rows a third more CPU (bench/RESULTS.md)."""
    return f"CASE WHEN typeof({column}) = 'blob' THEN {TEXT_FUNCTION}({column}) ELSE {column} END"


_POSTGRES = re.compile(
    r"CASE WHEN typeof\(([\w.]+)\) = 'blob' THEN quill_text\(\1\) ELSE \1 END"
    r"|\bquill_(?:text|pack)\(([\w.]+|\?)\)"
)


def for_postgres(sql: str) -> str:
    """``sql`` with ``text_sql`` and ``pack_sql`` expressions read as their column or
    placeholder: PostgreSQL stores the text itself (``store.postgres.connection.translate``)."""
    return _POSTGRES.sub(lambda m: m.group(1) or m.group(2), sql)


def pack_sql(mark: str = "?") -> str:
    """SQL expression: the stored form of the text bound at ``mark`` (a placeholder)."""
    return f"{PACK_FUNCTION}({mark})"


def columns_sql(columns: tuple[str, ...] | list[str], prefix: str = "") -> str:
    """A SELECT list of ``columns`` (``prefix``: a table alias and dot) in which ``content``
    is read as text."""
    return ", ".join(
        f"{text_sql(prefix + c)} AS {c}" if c == "content" else prefix + c for c in columns
    )


def marks_sql(columns: tuple[str, ...] | list[str]) -> str:
    """A VALUES list for ``columns`` in which ``content`` is packed (``pack_sql``)."""
    return ", ".join(pack_sql() if c == "content" else "?" for c in columns)


def register(conn: Any, min_bytes: int | None = None) -> None:
    """Register ``quill_text``, ``quill_pack`` (threshold ``min_bytes``, default
    ``Settings.pack_min_bytes``) and ``quill_pack_min`` on an apsw connection (deterministic)."""
    from quill.home import DEFAULTS

    limit = DEFAULTS.pack_min_bytes if min_bytes is None else int(min_bytes)
    flags = {"deterministic": True}
    conn.create_scalar_function(TEXT_FUNCTION, unpack, 1, **flags)
    conn.create_scalar_function(PACK_FUNCTION, lambda text: pack(text, limit), 1, **flags)
    conn.create_scalar_function(MIN_FUNCTION, lambda: limit, 0, **flags)
