"""Build a synthetic Quill store once and keep it, for searching it many times:
``python -m bench.build_store N DIR [--chunk ROWS] [--slice ROWS]``.

The store is made the Quill way, as §5 (``bench.scale.build``) makes it: a spool of ``N``
synthetic messages (``bench.messages.synthetic_messages``, calls of 10, sessions of 50;
fsync off: preparation) drained by the writer's own routine (``bench.searchable.drain``:
``take_chunk`` → ``apply_chunk`` → ``index_slice``), so the schema, indexes and index layout are
the ones Quill uses. What differs from the writer's defaults is only the size of its steps:
bigger chunks (``--chunk``, rows per transaction) and bigger index slices (``--slice``) — a
1M-message store is then a few minutes of drain instead of tens of minutes of 500-row
transactions. The spool is deleted once drained (``--keep-spool`` keeps it).

Writes ``DIR/state.db`` and ``DIR/build.json`` (the drain's figures). Run it niced on a
shared machine: ``nice -n 10 python -m bench.build_store 1000000 /tmp/quill-1m``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from .messages import synthetic_messages
from .searchable import drain, write_spool


def build(n: int, d: Path, chunk: int, slice_rows: int, keep_spool: bool = False) -> dict:
    """Spool ``n`` synthetic messages under ``d`` and drain them into ``d/state.db``."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / "state.db").exists():
        raise SystemExit(f"{d / 'state.db'} exists; use an empty directory")
    t0 = time.perf_counter()
    written = write_spool(d / "spool", synthetic_messages(n))
    prep = time.perf_counter() - t0
    res = drain(d / "spool", d / "state.db", chunk, slice_rows)
    res.update(
        messages=written,
        spool_prep_s=round(prep, 1),
        chunk_rows=chunk,
        index_slice_rows=slice_rows,
        db_bytes=sum(f.stat().st_size for f in d.glob("state.db*")),
    )
    if not keep_spool:
        shutil.rmtree(d / "spool", ignore_errors=True)
    (d / "build.json").write_text(json.dumps(res, indent=2))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.build_store", description=__doc__.splitlines()[0]
    )
    ap.add_argument("n", type=int, help="synthetic messages")
    ap.add_argument("dir", type=Path, help="empty directory for state.db")
    ap.add_argument(
        "--chunk", type=int, default=5000, help="rows per apply transaction (writer default 500)"
    )
    ap.add_argument(
        "--slice", type=int, default=20000, help="rows per index slice (writer default 2000)"
    )
    ap.add_argument("--keep-spool", action="store_true")
    args = ap.parse_args(argv)
    res = build(args.n, args.dir, args.chunk, args.slice, args.keep_spool)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
