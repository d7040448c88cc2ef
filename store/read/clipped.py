"""Clipped message reads: what a page that shows the first characters of each text needs,
at a cost that does not grow with the size of the largest message (the dashboard's
transcript page; exact reads — the API, export, ``quill sessions show`` — never clip).

Rule: the page's ids come from the position indexes alone (``projections`` orders them);
then each row's field sizes come from ``octet_length``, which both backends answer from the
value's header (SQLite's record header, PostgreSQL's TOAST pointer). A row whose texts fit
``clip`` and whose structured fields fit ``STRUCT_MAX_BYTES`` is read whole. A larger row:

* PostgreSQL: every field read, a long text as ``substr`` (a slice of a TOASTed value
  fetches only the chunks it needs), a long structured field not at all;
* SQLite: a record stores its fields one after the other, a large one on a chain of
  overflow pages. With pointer-map pages (``store.sqlite.connection.AUTO_VACUUM``) SQLite
  steps along a chain through them without reading its pages, so every field is read as on
  PostgreSQL: the small ones whole, a long text as a prefix through incremental blob I/O
  (``substr`` would load the whole value), a long structured field not at all; the cost is
  a few pointer-map pages (one per ~800 pages of value). A store made before that setting,
  until its next ``vacuum`` job, reaching any field after a large one would read the whole
  chain, so the row gives the fields before its first large one, that one as a prefix when
  it is a text, ``state`` and ``ts`` from indexes (``messages_session_state``,
  ``messages_session_ts``); the fields after it are not read.

A packed text (``store.packed``, SQLite) is the exception to the flat cost: its prefix is
cut from a frame unpacked to its end in bounded pieces, since only the frame's checksum, at
its end, tells a damaged text from another (about 1 ms of CPU a MB of text, no more memory).

Every field not returned whole is named in the message's ``clipped``: ``{field: full size
in bytes}``. Blob references are left as references (``store/apply/blobs.py``).
"""

from __future__ import annotations

import codecs
from typing import Any

import apsw

from quill.store import packed
from quill.store.sqlite.connection import has_pointer_map

#: The text columns read as a prefix when long, and the structured ones left unread.
TEXT_COLUMNS = ("content", "reasoning")
STRUCT_COLUMNS = ("parts", "tool_calls", "extra")
#: A structured field up to this many bytes is read whole in a clipped read (a tool call's
#: arguments are shown in full on the page); a longer one is left unread.
STRUCT_MAX_BYTES = 256 * 1024
#: Numeric fields: ``octet_length`` of a number renders it, so it would read the value.
_NUMBERS = ("id", "ts")


def _fields(msg_cols: str) -> list[str]:
    return [c.strip() for c in msg_cols.split(",")]


def _large(name: str, size: int | None, clip: int) -> bool:
    limit = clip if name in TEXT_COLUMNS else STRUCT_MAX_BYTES
    return size is not None and name in (*TEXT_COLUMNS, *STRUCT_COLUMNS) and size > limit


def index_hint(conn: Any, name: str) -> str:
    """`` INDEXED BY name`` for a SQLite connection whose store has that index (a store
    older than schema v10, not yet migrated, lacks the position indexes), else ""."""
    if not isinstance(conn, apsw.Connection):
        return ""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
    ).fetchone()
    return f" INDEXED BY {name}" if found else ""


def _prefix(conn: Any, column: str, message_id: int, clip: int) -> str:
    """The first ``clip`` characters of a message's text ``column`` (SQLite: read through a
    blob handle, at most 4 bytes a character; a character cut at the end is dropped). A
    packed text (``store.packed``) keeps only those characters but is unpacked to its end,
    for its checksum (``packed.unpack_prefix``: ``PackedValueError`` when damaged)."""
    kind = conn.execute(f"SELECT typeof({column}) FROM messages WHERE id = ?", (message_id,))
    is_packed = kind.fetchone()[0] == "blob"
    with conn.blob_open("main", "messages", column, message_id, False) as blob:
        if is_packed:
            return packed.unpack_prefix(blob, clip)
        data = blob.read(4 * clip)
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)[:clip]


def _packed_sizes(conn: Any, ids: list[int], sizes: dict[int, dict[str, Any]]) -> None:
    """Put the text's size in place of the stored size of each packed ``content`` among
    ``sizes`` (read from the value's first bytes: ``packed.packed_size``)."""
    marks = ", ".join("?" for _ in ids)
    for (mid,) in conn.execute(
        f"SELECT id FROM messages WHERE id IN ({marks}) AND typeof(content) = 'blob'", ids
    ).fetchall():
        with conn.blob_open("main", "messages", "content", mid, False) as blob:
            full = packed.packed_size(blob.read(packed.HEADER_BYTES))
        sizes[mid]["content"] = full if full is not None else sizes[mid]["content"]


def _pg_columns(fields: list[str], clip: int) -> str:
    """PostgreSQL select list: long texts sliced, long structured fields NULL."""
    out = []
    for name in fields:
        if name in TEXT_COLUMNS:
            out.append(
                f"CASE WHEN octet_length({name}) <= {clip} THEN {name} "
                f"ELSE substr({name}, 1, {clip}) END"
            )
        elif name in STRUCT_COLUMNS:
            out.append(f"CASE WHEN octet_length({name}) <= {STRUCT_MAX_BYTES} THEN {name} END")
        else:
            out.append(name)
    return ", ".join(out)


def rows(
    conn: Any, msg_cols: str, page: list[tuple[int, str]], clip: int
) -> tuple[list[tuple], list[dict[str, int]]]:
    """``MSG_COLS`` rows for ``page`` (``(message id, state)`` in order) with long fields cut
    as the module says, and per row ``{field: full size in bytes}`` of what was not returned
    whole. ``clip`` is a whole number of characters (inlined in SQL: an ``int``, never
    caller text)."""
    clip = int(clip)
    fields = _fields(msg_cols)
    if not page:
        return [], []
    ids = [mid for mid, _state in page]
    marks = ", ".join("?" for _ in ids)
    texts = [f for f in fields if f not in _NUMBERS]
    sizes = {
        r[0]: dict(zip(texts, r[1:]))
        for r in conn.execute(
            f"SELECT id, {', '.join(f'octet_length({f})' for f in texts)} "
            f"FROM messages WHERE id IN ({marks})",
            ids,
        )
    }
    sqlite = isinstance(conn, apsw.Connection)
    if sqlite and "content" in texts:
        _packed_sizes(conn, ids, sizes)
    whole = [i for i in ids if not any(_large(f, n, clip) for f, n in sizes[i].items())]
    got: dict[int, tuple] = {}
    if whole or not sqlite:
        wanted = whole if sqlite else ids
        cols = msg_cols if sqlite else _pg_columns(fields, clip)
        got = {
            r[0]: r
            for r in conn.execute(
                f"SELECT {cols} FROM messages WHERE id IN ({', '.join('?' for _ in wanted)})",
                wanted,
            )
        }
    mapped = sqlite and len(got) < len(ids) and has_pointer_map(conn)
    out, cuts = [], []
    for mid, state in page:
        size = sizes[mid]
        if mid in got:
            row = list(got[mid])
        elif mapped:
            row = _sqlite_mapped_row(conn, fields, mid, size, clip)
        else:
            row = _sqlite_large_row(conn, fields, mid, state, size, clip)
        cut = {}
        for i, name in enumerate(fields):
            value, full = row[i], size.get(name)
            if full is None or (isinstance(value, str) and len(value.encode()) >= full):
                continue
            if value is None or _large(name, full, clip):
                cut[name] = full
        out.append(tuple(row))
        cuts.append(cut)
    return out, cuts


def _sqlite_mapped_row(
    conn: apsw.Connection, fields: list[str], mid: int, size: dict, clip: int
) -> list[Any]:
    """Every field of a row with large ones, on a store with pointer-map pages: the others
    in one ``SELECT``, each large text as its prefix, each large structured field None."""
    large = {f for f in fields if _large(f, size.get(f), clip)}
    small = [f for f in fields if f not in large]
    values = dict(
        zip(
            small,
            conn.execute(
                f"SELECT {', '.join(small)} FROM messages WHERE id = ?", (mid,)
            ).fetchone(),
        )
    )
    for name in large & set(TEXT_COLUMNS):
        values[name] = _prefix(conn, name, mid, clip)
    return [values.get(f) for f in fields]


def _sqlite_large_row(
    conn: apsw.Connection, fields: list[str], mid: int, state: str, size: dict, clip: int
) -> list[Any]:
    """The fields before the row's first large one, that one's prefix when it is a text,
    ``state`` and ``ts`` (from indexes) and None for the rest (never reached: see above)."""
    first = next(i for i, f in enumerate(fields) if _large(f, size.get(f), clip))
    head = conn.execute(
        f"SELECT {', '.join(fields[:first])} FROM messages WHERE id = ?", (mid,)
    ).fetchone()
    row: list[Any] = [*head, *([None] * (len(fields) - first))]
    if fields[first] in TEXT_COLUMNS:
        row[first] = _prefix(conn, fields[first], mid, clip)
    row[fields.index("state")] = state
    if fields.index("ts") > first:
        row[fields.index("ts")] = conn.execute(
            f"SELECT ts FROM messages{index_hint(conn, 'messages_session_ts')} "
            "WHERE session_id = ? AND id = ?",
            (row[fields.index("session_id")], mid),
        ).fetchone()[0]
    return row
