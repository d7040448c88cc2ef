"""Bytes on disk: what each table and index of the SQLite store costs per message, against the
messages' own JSON bytes: ``python -m bench.disk [N] [--kind synthetic|real] [--baseline REV]``.

The store is built the Quill way (``bench.searchable.write_spool`` + ``drain``: the writer's
``take_chunk`` → ``apply_chunk`` → ``index_slice``, every row indexed), the WAL checkpointed
into the file, then SQLite's ``dbstat`` virtual table gives the bytes of every b-tree (a
table, an index, an FTS5 shadow table); FTS5 shadow tables are summed under their index.

* JSON bytes: each message as the producer sent it, compact JSON (``msgspec``), UTF-8 — the
  smallest faithful text form, so the ratio is not flattered by whitespace.
* ``store ÷ JSON``: the whole file (page count × page size, free pages included) ÷ JSON bytes.
  Goal: ≤ 1.5× with both FTS indexes.
* ``--kind synthetic``: ``bench.messages.synthetic_messages`` (the scale workload; no large
  tool outputs). ``--kind real``: the shared corpus cycled (``real_stream``: real tool outputs,
  images, parts).
* ``--baseline REV``: the same measurement of git revision ``REV`` of this repository, run in
  the same invocation (a subprocess importing ``quill`` from an exported copy of ``REV``), so
  before/after come from one run on one machine state.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from .common import at_revision, tempdir
from .messages import real_stream, synthetic_messages

#: Chunk and index-slice rows of the build (bench.build_store's defaults: a faster build with
#: the same schema; the layout of the pages does not depend on the step size).
CHUNK_ROWS, SLICE_ROWS = 5000, 20000


def _stream(kind: str, n: int):
    return synthetic_messages(n) if kind == "synthetic" else real_stream(n)


def _json_bytes(kind: str, n: int) -> int:
    enc = msgspec.json.Encoder()
    return sum(len(enc.encode(m)) for m in _stream(kind, n))


def _group(name: str, fts: tuple[str, ...]) -> str:
    """An FTS5 shadow table (``<fts>_data`` …) counts under its index."""
    for f in fts:
        if name == f or name.startswith(f + "_"):
            return f + " (FTS5)"
    return name


def measure(db: Path) -> dict[str, Any]:
    """``{"objects": {name: bytes}, "file_bytes", "page_size", "free_bytes"}`` of a
    checkpointed store (``dbstat`` aggregate per b-tree)."""
    import apsw

    conn = apsw.Connection(str(db))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fts = tuple(
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
            )
        )
        objects: dict[str, int] = {}
        for name, size in conn.execute(
            "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE ORDER BY name"
        ):
            key = _group(name, fts)
            objects[key] = objects.get(key, 0) + size
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        conn.close()
    return {
        "objects": objects,
        "file_bytes": pages * page_size,
        "page_size": page_size,
        "free_bytes": free * page_size,
    }


def run(n: int, kind: str) -> dict[str, Any]:
    """Build a store of ``n`` messages of ``kind`` and measure it."""
    from .searchable import drain, write_spool

    with tempdir("quill-bench-disk-") as d:
        written = write_spool(d / "spool", _stream(kind, n))
        built = drain(d / "spool", d / "state.db", CHUNK_ROWS, SLICE_ROWS)
        res = measure(d / "state.db")
    import quill.store.schema as schema

    res.update(
        messages=written,
        kind=kind,
        json_bytes=_json_bytes(kind, n),
        schema_version=schema.SCHEMA_VERSION,
        fts_layout=getattr(schema, "FTS_LAYOUT", None),
        rejected=built["rejected"],
    )
    res["ratio"] = round(res["file_bytes"] / res["json_bytes"], 3)
    return res


def _baseline(rev: str, n: int, kind: str) -> dict[str, Any]:
    """``run(n, kind)`` under the ``quill`` of git revision ``rev`` (same machine, same run)."""
    return at_revision("bench.disk", rev, str(n), "--kind", kind, "--json")


def table(results: list[tuple[str, dict[str, Any]]]) -> str:
    """A markdown table: bytes per message of every object, one column per result."""
    names = sorted(
        {k for _, r in results for k in r["objects"]},
        key=lambda k: -max(r["objects"].get(k, 0) for _, r in results),
    )
    head = "| object | " + " | ".join(f"{label} B/msg" for label, _ in results) + " |"
    lines = [head, "|---|" + "---:|" * len(results)]
    for k in names:
        cells = []
        for _, r in results:
            b = r["objects"].get(k)
            cells.append("—" if b is None else f"{b / r['messages']:.0f}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    for label, key in (("free pages", "free_bytes"), ("**file**", "file_bytes")):
        cells = [f"{r[key] / r['messages']:.0f}" for _, r in results]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [f"{r['json_bytes'] / r['messages']:.0f}" for _, r in results]
    lines.append("| messages' JSON | " + " | ".join(cells) + " |")
    cells = [f"**{r['ratio']:.2f}×**" for _, r in results]
    lines.append("| store ÷ JSON (goal ≤ 1.5×) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.disk", description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100_000, help="messages (default 100k)")
    ap.add_argument("--kind", choices=("synthetic", "real"), default="synthetic")
    ap.add_argument("--baseline", metavar="REV", help="also measure git revision REV")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = ap.parse_args(argv)
    results = []
    if args.baseline:
        results.append((args.baseline, _baseline(args.baseline, args.n, args.kind)))
    results.append(("this tree", run(args.n, args.kind)))
    if args.json:
        print(json.dumps(results[-1][1]))
        return 0
    print(f"{args.n:,} {args.kind} messages; bytes per message of each b-tree (dbstat)")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
