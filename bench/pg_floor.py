"""PostgreSQL search against PostgreSQL's own floor, on a store that already holds messages:
``python -m bench.pg_floor URL [--runs N] [--only NAME ...]`` prints one JSON object.

For each query of §3 (``bench.search.QUERIES``) through the public reader API
(``PgReader.search``, limit 20, newest first, warm): the run times (s), the hits' message ids,
the round trips and statements one warm search costs (libpq's protocol trace, counted by this
tree's ``store/postgres/wire.py`` whatever ``quill`` is imported, so a baseline revision is
counted the same way), and the CPU one search costs the client (this process) and the server
(its backend, ``/proc/PID/schedstat``; ``cpu_per_call``). And the floor, on the same kind of
connection (``PgConnection``): ``SELECT 1`` (one round trip, nothing planned worth the name),
and for each word query the bare GIN query of its term with no context, no visibility rule and
no snippet (``SELECT id … WHERE words @@ … ORDER BY id DESC LIMIT 20``), in both plans
PostgreSQL has for it: the GIN bitmap then the newest 20 (``ORDER BY id + 0``: a rare word's
best) and the primary key walked backwards (a common word's best). Run by ``bench.pg_copy
search`` (this tree and ``--baseline REV`` in the same run) and by ``bench.backends``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from .search import QUERIES

#: The word queries whose bare GIN query is measured.
BARE = ("rare word", "common word", "phrase")
#: Searches per query whose CPU is measured, at least (``cpu_per_call``).
CPU_RUNS = 100


def wire_module() -> Any:
    """This tree's ``store/postgres/wire.py``, loaded from its file (a baseline revision's
    ``quill`` may not have it)."""
    path = Path(__file__).resolve().parent.parent / "store" / "postgres" / "wire.py"
    spec = importlib.util.spec_from_file_location("_bench_pg_wire", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def _times(fn: Any, runs: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _server_cpu_s(pid: int) -> float | None:
    """CPU seconds the server process ``pid`` (a backend on this machine) has run, from
    ``/proc/PID/schedstat`` (nanoseconds, not clock ticks); None when it cannot be read (a
    server on another machine)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def cpu_per_call(fn: Any, runs: int, pid: int) -> dict[str, float | None]:
    """``{"client_ms", "server_ms"}``: CPU per call of ``fn`` (warm, ``runs`` calls) in this
    process (``process_time``) and in the server backend ``pid`` (``_server_cpu_s``; None
    when unreadable): figures the machine's load moves far less than wall time."""
    fn()  # warm
    s0, c0 = _server_cpu_s(pid), time.process_time()
    for _ in range(runs):
        fn()
    c1, s1 = time.process_time(), _server_cpu_s(pid)
    server = None if s0 is None or s1 is None else round((s1 - s0) / runs * 1e3, 4)
    return {"client_ms": round((c1 - c0) / runs * 1e3, 4), "server_ms": server}


def measure(url: str, runs: int, only: set[str] | None = None) -> dict[str, Any]:
    """``{"queries": {name: {times, ids, round_trips, statements}}, "floor": {name: times}}``
    (times in seconds) for the store at ``url``."""
    from quill.store.postgres.reads import PgReader

    wire = wire_module()
    out: dict[str, Any] = {"queries": {}, "floor": {}}
    reader = PgReader(url)
    try:
        pid = reader.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        for name, kw in QUERIES:
            if only and name not in only:
                continue
            times = _times(lambda kw=kw: reader.search(**kw), runs)
            cpu = cpu_per_call(lambda kw=kw: reader.search(**kw), max(runs, CPU_RUNS), pid)
            with wire.traced(reader.conn) as w:
                hits = reader.search(**kw)
            out["queries"][name] = {
                "times": times,
                "ids": [h["message_id"] for h in hits],
                "round_trips": w.round_trips,
                "statements": w.statements,
                **cpu,
            }
    finally:
        reader.close()
    out["floor"] = floor(url, runs, only)
    return out


def floor(url: str, runs: int, only: set[str] | None = None) -> dict[str, list[float]]:
    """``{name: times (s)}`` of ``SELECT 1`` and of the bare word queries (module doc) on a
    ``PgConnection`` to ``url``."""
    from quill.store.postgres.connection import PgConnection
    from quill.store.postgres.search import tsquery
    from quill.store.search import plan as query

    out: dict[str, Any] = {"floor": {}}
    conn = PgConnection(url)
    try:
        out["floor"]["SELECT 1"] = _times(lambda: conn.execute("SELECT 1").fetchall(), runs)
        for name, kw in QUERIES:
            if name not in BARE or (only and name not in only):
                continue
            tsq = tsquery(query.plan(kw["text"]))
            for plan, order in (("GIN bitmap", "id + 0"), ("key walk", "id")):
                sql = (
                    "SELECT id FROM messages WHERE words @@ to_tsquery('simple', ?) "
                    f"ORDER BY {order} DESC LIMIT 20"
                )
                out["floor"][f"bare {plan}: {name}"] = _times(
                    lambda sql=sql, tsq=tsq: conn.execute(sql, (tsq,)).fetchall(), runs
                )
    finally:
        conn.close()
    return out["floor"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.pg_floor", description=__doc__.splitlines()[0]
    )
    ap.add_argument("url", help="a PostgreSQL store URL (with its search_path)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", action="append", help="a query name, repeatable (default: all)")
    args = ap.parse_args(argv)
    only = set(args.only) if args.only else None
    print(json.dumps(measure(args.url, args.runs, only)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
