"""Per-table digests of a store drained from the real corpus: the byte-identity check for
changes to the apply path (normalisation, usage, blobs, indexing).

Usage: ``python -m bench.drain_digest SPOOL_DIR DB_PATH [--messages N]``. The spool is written
once (fsync off) from ``bench.messages.real_stream`` if ``SPOOL_DIR`` does not exist yet, then
drained at chunk 500 exactly as ``bench.searchable.drain`` does (the writer's loop) into a fresh
``DB_PATH``. Prints ``table rows sha256/16`` for every table, FTS shadow tables included, rows in
rowid order, with the columns that hold the wall clock of the drain itself (``applied_at``,
``rejected_at``, the cursor's ``updated_at``) left out. Run it on the same spool before and after
a change (for "before", a checkout of main on ``PYTHONPATH``) and ``diff`` the two outputs: any
changed row in any table changes its line. Two drains of one spool by the same code print the
same lines (arrival times come from the spool records, not the clock).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

#: (table, column) pairs that record when the drain ran, not what it stored.
VOLATILE = {
    ("applied_batches", "applied_at"),
    ("rejected_batches", "rejected_at"),
    ("spool_cursor", "updated_at"),
}


def table_digests(db_path: Path) -> dict[str, tuple[int, str]]:
    """``table → (rows, sha256 prefix of the repr of its rows in rowid order)``."""
    import apsw

    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    out: dict[str, tuple[int, str]] = {}
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        for t in tables:
            cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')]
            sel = ", ".join("NULL" if (t, c) in VOLATILE else f'"{c}"' for c in cols)
            try:
                rows = conn.execute(f'SELECT {sel} FROM "{t}" ORDER BY rowid').fetchall()
            except apsw.SQLError:  # WITHOUT ROWID tables
                rows = conn.execute(f'SELECT {sel} FROM "{t}" ORDER BY 1').fetchall()
            digest = hashlib.sha256(repr(rows).encode("utf-8", "surrogatepass")).hexdigest()[:16]
            out[t] = (len(rows), digest)
    finally:
        conn.close()
    return out


def main(argv: list[str] | None = None) -> None:
    from .messages import real_messages, real_stream
    from .searchable import drain, write_spool

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spool", type=Path)
    ap.add_argument("db", type=Path)
    ap.add_argument(
        "--messages", type=int, default=0, help="default: the corpus twice (ids made unique)"
    )
    args = ap.parse_args(argv)
    if not args.spool.exists():
        write_spool(args.spool, real_stream(args.messages or 2 * len(real_messages())))
    for p in args.db.parent.glob(args.db.name + "*"):
        p.unlink()
    res = drain(args.spool, args.db, 500)
    print(f"# drained {res['rows']} rows, rejected {res['rejected']}")
    for table, (n, digest) in table_digests(args.db).items():
        print(table, n, digest)


if __name__ == "__main__":
    main()
