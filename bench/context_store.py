"""Prompt/tool store size: ``python -m bench.context_store [--sessions 1000] [--kb 30]``.

Agents send the same large tool array (and system prompt) with every session.
This benchmark applies, through the real spool and the writer's drain (``Drain``), N
``session.create`` ops into three fresh stores and reports each store's growth (SQLite pages
in use × page size, after a checkpoint):

* ``baseline`` - N bare sessions (no prompt, no tools): the cost of the sessions themselves;
* ``inline``   - the same tool array copied into every session's ``meta`` (what storing it
                 with each session would cost: the naive alternative);
* ``shared``   - the tool array as ``tools`` (stored once in blobs, referenced per session).

The figure under test is ``shared - baseline`` against the array's size (goal: about one
array, ~30 KB, not N arrays, ~30 MB); the inline store shows the N× alternative measured in
the same run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from quill.spool import Quarantine, Spool, SpoolReader
from quill.store import open_writer
from quill.store.factory import open_url
from quill.workers.drain import Drain

from .common import tempdir
from .tables import print_table


def tool_array(kb: int) -> list[dict]:
    """A realistic tool array of about ``kb`` KB of JSON: named functions with descriptions and
    schemas."""
    tools, size, i = [], 0, 0
    while size < kb * 1024:
        tool = {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool {i}: " + "does a careful, well-described thing. " * 6,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "a path"},
                        "limit": {"type": "integer"},
                    },
                    "required": ["path"],
                },
            },
        }
        tools.append(tool)
        size += len(json.dumps(tool))
        i += 1
    return tools


def _store_bytes(root: Path, ops: list[tuple[str, dict]]) -> int:
    spool = Spool(root / "spool")
    for op, data in ops:
        spool.append(op, data)
    spool.close()
    store = open_url(None, root / "state.db", "bench")
    try:  # the one drain loop, in chunks of about 500 rows
        Drain(store, SpoolReader(root / "spool"), Quarantine(root / "spool"), 500).until_empty()
    finally:
        store.close()
    conn = open_writer(root / "state.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
        return (pages - free) * size
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--kb", type=int, default=30)
    args = parser.parse_args()
    tools = tool_array(args.kb)
    array_bytes = len(json.dumps(tools, separators=(",", ":")))
    n = args.sessions
    variants = {
        "baseline": [
            ("session.create", {"session_id": f"s{i}", "source": "bench"}) for i in range(n)
        ],
        "inline": [
            ("session.create", {"session_id": f"s{i}", "source": "bench", "meta": {"tools": tools}})
            for i in range(n)
        ],
        "shared": [
            ("session.create", {"session_id": f"s{i}", "source": "bench", "tools": tools})
            for i in range(n)
        ],
    }
    sizes = {}
    for name, ops in variants.items():
        with tempdir(f"quill-bench-context-{name}-") as root:
            sizes[name] = _store_bytes(root, ops)
    base = sizes["baseline"]
    print(f"{n} sessions sharing one tool array of {array_bytes / 1024:.1f} KB")
    print_table(
        None,
        ("variant", "store KB", "added KB", "added ÷ array"),
        [[k, v / 1024, (v - base) / 1024, (v - base) / array_bytes] for k, v in sizes.items()],
    )
    print(
        f"shared adds {(sizes['shared'] - base) / 1024:.1f} KB "
        f"(goal ≈ {array_bytes / 1024:.0f} KB, not {n * array_bytes / 1024 / 1024:.0f} MB); "
        f"inline adds {(sizes['inline'] - base) / 1024 / 1024:.1f} MB"
    )


if __name__ == "__main__":
    main()
