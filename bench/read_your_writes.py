"""Read-your-writes: ``QuillSession.add_items`` (append → applied by the fleet's writer)
against the Agents SDK's own ``SQLiteSession.add_items`` on a file, same run, same items.

One agent turn is ``--items`` SDK items (a user message and an assistant answer); each call is
timed from the call to its return. For Quill that is the fsync'd spool append, the writer
applying the op in a real fleet (``quill run``, another process) and the wait seeing the
store's cursor past it — what every ``Runner.run`` with a ``QuillSession`` pays per turn.
``--pg URL`` uses a PostgreSQL store (a fresh schema of that database) instead of SQLite.

    .venv/bin/python -m bench.read_your_writes [--calls 200] [--pg postgresql://…]

Prints p50/p95/mean per system, the durable append alone (the floor under ``add_items``: one
``fdatasync`` of a growing file), and the ratio Quill ÷ SQLiteSession (goal: ≤ 3×).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .common import pct, tempdir


def _turn(i: int) -> list[dict]:
    return [
        {"role": "user", "content": f"question {i}: what is the weather in Oslo?"},
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{i}",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"answer {i}: sunny", "annotations": []}],
        },
    ]


async def _timed(session, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await session.add_items(_turn(i))
        out.append(time.perf_counter() - t0)
    return out


async def _appends(client, calls: int) -> list[float]:
    """The durable ack alone (the fsync'd spool append), no wait: the floor under add_items."""
    from quill.integrations.openai_agents import item_to_message

    out = []
    for i in range(calls):
        messages = [item_to_message(item) for item in _turn(i)]
        t0 = time.perf_counter()
        await client.append("bench-append", messages, source="openai-agents")
        out.append(time.perf_counter() - t0)
    return out


def sqlite_session(tmp: Path, calls: int) -> list[float]:
    """The SDK's SQLiteSession on a file: per-call seconds."""
    from agents.memory import SQLiteSession

    session = SQLiteSession("bench", str(tmp / "agents.db"))
    try:
        return asyncio.run(_timed(session, calls))
    finally:
        session.close()


def quill_session(tmp: Path, calls: int, pg: str | None) -> tuple[list[float], list[float]]:
    """QuillSession over a real fleet on a fresh data dir: per-call seconds of ``add_items``,
    then of the same items' bare append (acked, not waited for)."""
    home = tmp / "home"
    home.mkdir()
    if pg:  # a schema of its own, first on the search_path (as the tests do)
        schema = "rywbench_" + uuid.uuid4().hex[:8]
        import psycopg

        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{pg}{'&' if '?' in pg else '?'}options=-csearch_path%3D{schema},public"
        (home / "config.toml").write_text(f"[store]\nurl = {json.dumps(url)}\n")
    env = {**os.environ, "QUILL_HOME": str(home)}
    quill = [sys.executable, "-c", "from quill.ops.cli import main; main()"]
    fleet = subprocess.Popen([*quill, "run"], env=env, stdout=subprocess.DEVNULL)
    try:
        from quill import AsyncClient
        from quill.integrations.openai_agents import QuillSession

        client = AsyncClient(home)
        session = QuillSession("bench", client=client, wait_timeout=60)
        asyncio.run(session.add_items(_turn(-1)))  # the fleet is up and the store made
        applied = asyncio.run(_timed(session, calls))
        return applied, asyncio.run(_appends(client, calls))
    finally:
        fleet.send_signal(signal.SIGTERM)
        fleet.wait(timeout=60)
        if pg:
            _drop_schema(pg, schema)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _line(name: str, s: list[float]) -> str:
    return (
        f"{name:<34} p50 {pct(s, 50) * 1e3:7.2f} ms  p95 {pct(s, 95) * 1e3:7.2f} ms  "
        f"mean {statistics.fmean(s) * 1e3:7.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--pg", default=None, help="PostgreSQL URL: a PostgreSQL store")
    args = ap.parse_args()
    with tempdir("quill-ryw-") as tmp:
        base = sqlite_session(tmp, args.calls)
        quill, appends = quill_session(tmp, args.calls, args.pg)
    backend = "PostgreSQL" if args.pg else "SQLite"
    print(f"read-your-writes, {args.calls} calls of 2 items each ({backend} store)")
    print(_line("SDK SQLiteSession.add_items", base))
    print(_line("QuillSession.add_items (applied)", quill))
    print(_line("  of which the durable append alone", appends))
    print(
        f"ratio Quill / SQLiteSession: p50 {pct(quill, 50) / pct(base, 50):.1f}x, "
        f"mean {statistics.fmean(quill) / statistics.fmean(base):.1f}x (goal <= 3x)"
    )


if __name__ == "__main__":
    main()
