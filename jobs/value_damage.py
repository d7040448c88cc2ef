"""Values damaged inside a sound store file, for the damage check (``worker_jobs.quick_check``).

SQLite checks pages and records, not what a value holds: a page damaged inside a packed text
or a JSON column can leave ``PRAGMA quick_check`` passing while every read of that row fails
(``store.packed.PackedValueError``, ``store.errors.DamagedValueError``). These scans find
such values so the writer halts on them as on any other damage.
"""

from __future__ import annotations

import apsw

from quill.store import packed
from quill.store.errors import mapped


def damaged_packed(conn: apsw.Connection) -> list[int]:
    """Ids of the messages whose packed text (``store.packed``) does not unpack: a value the
    file's own checks cannot see (SQLite checks pages and records, not what a BLOB holds),
    which every read of that message fails on. Reads each packed value once (one unpack per
    packed row, the module doc's µs)."""
    bad: list[int] = []
    with mapped():
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
        ).fetchone():  # a file the writer has created but not yet given its schema
            return bad
        for mid, value in conn.execute(
            "SELECT id, content FROM messages WHERE typeof(content) = 'blob'"
        ):
            try:
                packed.unpack(value)
            except packed.PackedValueError:
                bad.append(mid)
    return bad


#: The JSON columns of the store's tables: ``(table, columns)``. The store writes only JSON
#: texts there (``store.errors.stored_json`` reads them), so one that is not is damaged.
_JSON_COLUMNS = (
    ("messages", ("parts", "tool_calls", "extra")),
    ("sessions", ("meta",)),
    ("usage", ("raw",)),
)


def damaged_json(conn: apsw.Connection) -> list[str]:
    """``"<column> of <table> row <id> is not JSON"`` for each stored JSON value that does not
    parse (SQLite's ``json_valid``): a page damaged inside a value keeps the file's structure
    sound (quick_check passes), and every read of that row fails on it
    (``DamagedValueError``). One pass over each table, in SQLite."""
    out: list[str] = []
    with mapped():
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table, columns in _JSON_COLUMNS:
            if table not in tables:  # a file the writer has created but not yet given its schema
                continue
            for column in columns:
                for (rid,) in conn.execute(
                    f"SELECT id FROM {table} WHERE {column} IS NOT NULL "
                    f"AND NOT json_valid({column}) LIMIT 100"
                ):
                    out.append(f"{column} of {table} row {rid} is not JSON")
    return out
