"""PostgreSQL's own bulk load of the rows a writer just applied: the ceiling a writer's drain
is held to (``bench.backends`` prints writer ÷ ceiling next to each PostgreSQL figure).

``ceiling(base, source_url)`` reads the ``sessions`` and ``messages`` rows out of the store
at ``source_url`` (not timed), creates Quill's schema in a fresh schema (the same tables,
generated ``words`` column and indexes, word and trigram GINs included, kept in place: COPY
maintains them as the writer's inserts do), and times ``COPY … FROM STDIN`` of those rows
into it in one transaction, commit included. Rows/s = message rows ÷ that time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

_TABLES = ("sessions", "messages")


def _columns(conn: Any, table: str) -> list[str]:
    """The stored (not generated) columns of ``table`` on the search path, in table order."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s::regclass "
        "AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


def _read(url: str) -> dict[str, tuple[list[str], bytes]]:
    """``{table: (columns, COPY text data)}`` of the source store."""
    import psycopg

    out: dict[str, tuple[list[str], bytes]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in _TABLES:
            cols = _columns(conn, table)
            buf = bytearray()
            names = ", ".join(f'"{c}"' for c in cols)
            with conn.cursor().copy(
                f"COPY (SELECT {names} FROM {table} ORDER BY 1) TO STDOUT"
            ) as cp:
                for block in cp:
                    buf += block
            out[table] = (cols, bytes(buf))
    return out


def ceiling(base: str, source_url: str, scratch: Path) -> dict[str, Any]:
    """Time PostgreSQL's COPY of ``source_url``'s sessions and messages into a fresh Quill
    schema (created in the database ``base`` names, dropped afterwards; ``scratch`` is a
    directory for the schema's throwaway spool-side files). Returns ``{"rows", "seconds",
    "rows_per_s"}`` (message rows)."""
    import psycopg

    from quill.store.factory import open_url

    from .backends import PgSchema

    data = _read(source_url)
    with PgSchema(base) as url:
        open_url(url, scratch / "state.db", "ceiling").close()  # Quill's schema, indexes kept
        with psycopg.connect(url) as conn:
            t0 = time.perf_counter()
            for table in _TABLES:
                cols, raw = data[table]
                names = ", ".join(f'"{c}"' for c in cols)
                with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as cp:
                    cp.write(raw)
            conn.commit()
            seconds = time.perf_counter() - t0
            rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}
