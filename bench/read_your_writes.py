"""Read-your-writes: ``QuillSession.add_items`` (append → applied by the fleet's writer)
against the Agents SDK's own ``SQLiteSession.add_items`` on a file, same run, same items.

One agent turn is ``--items`` SDK items (a user message and an assistant answer); each call is
timed from the call to its return. For Quill that is the fsync'd spool append, the writer
applying the op in a real fleet (``quill run``, another process) and the wait seeing the
store's cursor past it — what every ``Runner.run`` with a ``QuillSession`` pays per turn.
``--pg URL`` uses a PostgreSQL store (a fresh schema of that database) instead of SQLite.

    .venv/bin/python -m bench.read_your_writes [--calls 200] [--pg postgresql://…]
        [--baseline REV] [--json]

Prints p50/p95/mean per system, the durable append alone (the floor under ``add_items``: one
``fdatasync`` of a growing file), and the ratio Quill ÷ SQLiteSession (goal: ≤ 3×). With
``--pg`` also the floor of a PostgreSQL store, measured in the same run (``pg_floor``: the
spool's ``fdatasync`` then a one-row ``INSERT`` + ``COMMIT`` round trip, the two syncs the SDK
pays once), and the ratios Quill ÷ floor and floor ÷ SQLiteSession.
``--baseline REV`` also measures Quill as of git revision ``REV`` in the same run (alternating
rounds, so load drifts hit both alike). The fleet's watcher is off (``[watch] enabled =
false``): nothing but the benchmark's own appends reaches the writer.
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

from .common import pct, revision_tree, run_json, tempdir


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
        config = f"[store]\nurl = {json.dumps(url)}\n"
    else:
        config = ""
    (home / "config.toml").write_text(config + "[watch]\nenabled = false\n")
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


def pg_floor(tmp: Path, calls: int, pg: str) -> list[float]:
    """What ``add_items`` on PostgreSQL cannot go below, per call (seconds): one durable
    append (a 4 KiB write + ``fdatasync`` of a growing file, as the spool's ack) then one
    one-row ``INSERT`` + ``COMMIT`` round trip on the same server (its WAL flush: "applied"
    is durable), timed together. The two syncs the SDK's ``SQLiteSession`` pays once; no
    wake-up, no Quill code."""
    import psycopg

    table = "rywfloor_" + uuid.uuid4().hex[:8]  # logged: a temp table's commit flushes no WAL
    fd = os.open(tmp / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    out = []
    try:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id serial, t text)")
            try:
                for i in range(calls):
                    t0 = time.perf_counter()
                    os.pwrite(fd, b"x" * 4095 + b"\n", 4096 * i)
                    os.fdatasync(fd)
                    conn.execute(f"BEGIN; INSERT INTO {table} (t) VALUES ('x'); COMMIT")
                    out.append(time.perf_counter() - t0)
            finally:
                conn.execute(f"DROP TABLE {table}")
    finally:
        os.close(fd)
    return out


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _line(name: str, s: list[float]) -> str:
    return (
        f"{name:<34} p50 {pct(s, 50) * 1e3:7.2f} ms  p95 {pct(s, 95) * 1e3:7.2f} ms  "
        f"mean {statistics.fmean(s) * 1e3:7.2f} ms"
    )


def _stats(s: list[float]) -> dict[str, float]:
    return {"p50": pct(s, 50), "p95": pct(s, 95), "mean": statistics.fmean(s)}


def measure(calls: int, pg: str | None) -> dict:
    """One round: per-call seconds of each system, as ``_stats`` dicts."""
    with tempdir("quill-ryw-") as tmp:
        base = sqlite_session(tmp, calls)
        quill, appends = quill_session(tmp, calls, pg)
        out = {"sqlite": _stats(base), "quill": _stats(quill), "append": _stats(appends)}
        if pg:
            out["floor"] = _stats(pg_floor(tmp, calls, pg))
    return out


def _line(name: str, s: dict[str, float]) -> str:
    return (
        f"{name:<34} p50 {s['p50'] * 1e3:7.2f} ms  p95 {s['p95'] * 1e3:7.2f} ms  "
        f"mean {s['mean'] * 1e3:7.2f} ms"
    )


def _report(label: str, r: dict) -> None:
    print(f"-- {label}")
    print(_line("SDK SQLiteSession.add_items", r["sqlite"]))
    print(_line("QuillSession.add_items (applied)", r["quill"]))
    print(_line("  of which the durable append alone", r["append"]))
    if "floor" in r:
        print(_line("floor: fdatasync + INSERT/COMMIT", r["floor"]))
    q, b = r["quill"], r["sqlite"]
    print(
        f"ratio Quill / SQLiteSession: p50 {q['p50'] / b['p50']:.1f}x, "
        f"mean {q['mean'] / b['mean']:.1f}x (goal <= 3x)"
    )
    if "floor" in r:
        f = r["floor"]
        print(
            f"ratio Quill / floor: p50 {q['p50'] / f['p50']:.1f}x, mean "
            f"{q['mean'] / f['mean']:.1f}x; floor / SQLiteSession: p50 "
            f"{f['p50'] / b['p50']:.1f}x (the part of the ratio the two syncs make)"
        )


def _median(rounds: list[dict]) -> dict:
    """Per system and figure, the median over rounds."""
    return {
        k: {f: statistics.median(r[k][f] for r in rounds) for f in rounds[0][k]} for k in rounds[0]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--pg", default=None, help="PostgreSQL URL: a PostgreSQL store")
    ap.add_argument("--baseline", default=None, help="git revision to measure in the same run")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per revision")
    ap.add_argument("--json", action="store_true", help="print one round as JSON")
    args = ap.parse_args()
    one = ["--calls", str(args.calls), "--json"] + (["--pg", args.pg] if args.pg else [])
    if args.json:
        print(json.dumps(measure(args.calls, args.pg)))
        return
    mine, base = [], []
    with revision_tree(args.baseline) as tree:
        for _ in range(args.rounds):
            if args.baseline:
                base.append(run_json("bench.read_your_writes", tree, *one))
            mine.append(measure(args.calls, args.pg))
    backend = "PostgreSQL" if args.pg else "SQLite"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"read-your-writes, {args.calls} calls of 2 items each ({backend} store), "
        f"{args.rounds} round(s), load average {load}"
    )
    if base:
        _report(f"baseline {args.baseline} (median of rounds)", _median(base))
    _report("this tree (median of rounds)", _median(mine))


if __name__ == "__main__":
    main()
