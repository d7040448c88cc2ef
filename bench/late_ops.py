"""Late ops on PostgreSQL: a host's backlog of single-message appends acknowledged before the
rows another host's writer applied first (store/apply/order.py, "late arrival").

    python -m bench.late_ops [LATE] [ROWS] [--url URL] [--baseline REV] [--json]

Host B's writer applies ``ROWS`` messages (ops of 10) into one session; then host A's writer
applies its ``LATE`` (default 500) single-message ops into that session, acknowledged before
all of B's, in chunks of 500 rows. Printed for A's drain: seconds, statements sent (each
``PgConnection.execute``), and heap rows of ``messages`` read (the server's
``pg_stat_user_tables`` counters of a schema of its own, after ANALYZE), per op. With
``--baseline REV`` the same run under git revision ``REV`` (``git archive``) first, and the
ratios. The machine's load average is printed with each run: other work on a shared machine
moves the seconds, not the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .common import at_revision

PG_URL = os.environ.get("QUILL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_READ = (
    "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) FROM pg_stat_user_tables "
    "WHERE relname = 'messages' AND schemaname = %s"
)


def _spool(path: Path, sid: str, ops: list[tuple[str, list[str]]], role: str) -> None:
    from quill.spool import Spool

    with Spool(path, fsync=False) as sp:
        for batch, texts in ops:
            msgs = [{"role": role, "content": t} for t in texts]
            sp.append("messages.append", {"session_id": sid, "messages": msgs}, batch_id=batch)


def _drain(url: str, root: Path, spool_dir: Path, spool_id: str, count: bool) -> dict[str, Any]:
    """Drain ``spool_dir`` as ``spool_id`` in chunks of 500 rows: seconds, statements."""
    from quill.spool import START, SpoolReader
    from quill.store.apply.chunking import take_chunk
    from quill.store.factory import open_url
    from quill.store.postgres import connection as pg_connection

    store = open_url(url, root / f"{spool_id}.db", spool_id)
    calls = {"n": 0}
    execute = pg_connection.PgConnection.execute

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return execute(self, *args, **kwargs)

    if count:
        pg_connection.PgConnection.execute = counting
    t0 = time.perf_counter()
    try:
        reader, pos = SpoolReader(spool_dir), START
        while entries := take_chunk(reader.read(pos, max_bytes=8 << 20), 500):
            store.apply_chunk(entries, lambda *a: sys.exit(f"rejected {a[1:]}"))
            pos = entries[-1].next
    finally:
        pg_connection.PgConnection.execute = execute
        store.close()
    return {"seconds": time.perf_counter() - t0, "statements": calls["n"]}


def run(late: int, rows: int, url: str) -> dict[str, Any]:
    """One measured run on a fresh schema of ``url`` (dropped after)."""
    import psycopg

    schema = "bench_late_" + uuid.uuid4().hex[:10]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    store_url = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema},public"
    try:
        with tempfile.TemporaryDirectory(prefix="quill-bench-late-") as tmp:
            root = Path(tmp)
            _spool(root / "a", "shared", [(f"a{i}", [f"late a{i}"]) for i in range(late)], "user")
            time.sleep(0.01)  # B's records are acknowledged after all of A's
            ops = [(f"b{i}", [f"b{i} {k}" for k in range(10)]) for i in range(rows // 10)]
            _spool(root / "b", "shared", ops, "assistant")
            _drain(store_url, root, root / "b", "host-b", count=False)
            with psycopg.connect(store_url, autocommit=True) as conn:
                conn.execute("ANALYZE messages")
                before = conn.execute(_READ, (schema,)).fetchone()[0]
            res = _drain(store_url, root, root / "a", "host-a", count=True)
            time.sleep(1.0)  # the server publishes a backend's counters within a second
            with psycopg.connect(store_url, autocommit=True) as conn:
                after = conn.execute(_READ, (schema,)).fetchone()[0]
                first = [
                    r[0]
                    for r in conn.execute(
                        "SELECT content FROM messages ORDER BY seq LIMIT %s", (late,)
                    )
                ]
        if first != [f"late a{i}" for i in range(late)]:
            raise SystemExit("late ops were not placed before the later rows")
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {
        "late": late,
        "rows": rows,
        "seconds": round(res["seconds"], 3),
        "statements_per_op": round(res["statements"] / late, 2),
        "heap_rows_per_op": round((after - before) / late, 1),
        "load_1m": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("late", nargs="?", type=int, default=500)
    ap.add_argument("rows", nargs="?", type=int, default=10_000)
    ap.add_argument("--url", default=PG_URL)
    ap.add_argument("--baseline", metavar="REV")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = None
    if args.baseline:
        sizes = (str(args.late), str(args.rows))
        base = at_revision("bench.late_ops", args.baseline, *sizes, "--url", args.url, "--json")
    res = run(args.late, args.rows, args.url)
    if args.json:
        print(json.dumps(res))
        return
    for label, r in (("baseline " + str(args.baseline), base), ("this tree", res)):
        if r is not None:
            print(f"{label:>20}: {json.dumps(r)}")
    if base is not None:
        for key in ("seconds", "statements_per_op", "heap_rows_per_op"):
            ratio = res[key] / base[key] if base[key] else float("nan")
            print(f"{key:>20}: {ratio:.3f}× the baseline")


if __name__ == "__main__":
    main()
