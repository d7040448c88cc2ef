"""§ Backends: the shared PostgreSQL store against the embedded SQLite store, same messages,
same run. ``python -m bench.backends [--pg URL] [--ingest N] [--search N]``.

1. Aggregate ingest: N synthetic messages (batches of 10, 50 per session) split over 1, 2 and
   4 spools, each drained by its own writer process into one PostgreSQL store (the writer's
   ``apply_chunk``, chunks of 500 rows; indexes maintained in the transaction), against ONE
   SQLite writer draining all N (``apply_chunk`` + FTS ``index_slice``, as workers/writer.py
   does: searchable when done on both). Messages/s = N ÷ wall time from start to the last
   commit. Each PostgreSQL figure is printed next to the bulk ceiling measured right after it:
   PostgreSQL's own COPY of the same rows into Quill's tables and indexes
   (``bench.backends_ceiling``), and writer ÷ ceiling.
2. Producer ack latency: 4 producer processes append batch-10 calls (fsync'd) for a fixed
   time while a writer drains the same spool into SQLite, then into PostgreSQL. The ack is
   the spool append; the database is not on its path, so p99 must not move.
3. Search p50/p95 through the public reader API (``Reader.search`` / ``PgReader.search``,
   limit 20, newest first, with context) on the same N synthetic messages in both stores,
   warm, 20 runs per query (the queries of bench/search.py), with the round trips and
   statements one PostgreSQL search costs, and PostgreSQL's own floor in the same run
   (``bench.pg_floor``: ``SELECT 1`` and the bare word query of each term).
Prints a table and writes ``bench/out/backends.json``. Ratios only compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
import uuid
from pathlib import Path
from typing import Any

from quill.spool import Quarantine, Spool, SpoolReader
from quill.workers.drain import Drain

from .backends_ceiling import ceiling
from .common import machine, ms, pct, ratio, tempdir
from .messages import calls, synthetic_messages
from .pg_floor import floor, wire_module
from .search import QUERIES

CTX = mp.get_context("fork")
CHUNK_ROWS = 500
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- helpers -----------------------------------------------------------------------------------


def _fill(spool_dir: Path, n: int, seed: int, prefix: str) -> None:
    spool = Spool(spool_dir, fsync=False)  # preparation only; not measured
    for sid, msgs in calls(synthetic_messages(n, seed=seed), 10, prefix=prefix):
        spool.append("messages.append", {"session_id": sid, "messages": msgs})
    spool.close()


def _open(kind: str, root: Path, url: str | None, spool_id: str):
    from quill.store.factory import open_url as open_backend

    return open_backend(url if kind == "postgres" else None, root / "state.db", spool_id)


def _drainer(backend: Any, spool_dir: str) -> Drain:
    """The one drain loop (``workers.drain.Drain``) from ``backend``'s cursor, in chunks of
    ``CHUNK_ROWS`` rows, as the writer drains."""
    drain = Drain(backend, SpoolReader(spool_dir), Quarantine(Path(spool_dir)), CHUNK_ROWS)
    drain.start()
    return drain


def _drain(
    kind: str, root: str, spool_dir: str, url: str | None, spool_id: str, barrier: Any, out: Any
) -> None:
    backend = _open(kind, Path(root), url, spool_id)
    drain = _drainer(backend, spool_dir)
    barrier.wait()
    t0 = time.perf_counter()
    rows = 0
    while (step := drain.step()).entries:
        rows += step.result.rows
        backend.index(2000)
    while backend.index(100_000):  # SQLite: the FTS tail too, so both end searchable
        pass
    out.put({"rows": rows, "seconds": time.perf_counter() - t0})
    backend.close()


class PgSchema:
    """A fresh schema in the benchmark database, dropped on exit."""

    def __init__(self, base: str):
        import psycopg

        self.base, self.name = base, "bench_" + uuid.uuid4().hex[:10]
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{self.name}"')
        self.url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{self.name},public"

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


# -- 1. aggregate ingest -------------------------------------------------------------------------


def ingest(n: int, pg: str) -> list[dict[str, Any]]:
    results = []
    with tempdir("quill-bench-backends") as tmp:
        spools: dict[int, list[Path]] = {}
        for k in (1, 2, 4):
            spools[k] = []
            for i in range(k):
                d = tmp / f"spools{k}" / f"s{i}"
                _fill(d, n // k, seed=100 + i, prefix=f"w{i}-s")
                spools[k].append(d)
        runs = [("sqlite", 1)] + [("postgres", k) for k in (1, 2, 4)]
        for kind, k in runs:
            with PgSchema(pg) if kind == "postgres" else _Null() as url:
                barrier, out = CTX.Barrier(k + 1), CTX.Queue()
                procs = [
                    CTX.Process(
                        target=_drain,
                        args=(
                            kind,
                            str(tmp / f"{kind}{k}-{i}"),
                            str(spools[k][i]),
                            url,
                            f"bench-{i}",
                            barrier,
                            out,
                        ),
                    )
                    for i in range(k)
                ]
                for p in procs:
                    p.start()
                barrier.wait()
                t0 = time.perf_counter()
                parts = [out.get(timeout=1800) for _ in procs]
                wall = time.perf_counter() - t0
                for p in procs:
                    p.join()
                rows = sum(r["rows"] for r in parts)
                results.append(
                    {
                        "backend": kind,
                        "writers": k,
                        "rows": rows,
                        "seconds": round(wall, 2),
                        "msgs_per_s": round(rows / wall),
                    }
                )
                line = (
                    f"ingest {kind:8} writers={k}: {rows} rows in {wall:.1f} s = "
                    f"{rows / wall:,.0f} msgs/s"
                )
                if kind == "postgres":  # the same rows through PostgreSQL's own COPY, now
                    bulk = ceiling(pg, url, tmp / f"ceiling{k}")
                    results[-1]["bulk_ceiling"] = bulk
                    results[-1]["vs_bulk_ceiling"] = ratio(rows / wall, bulk["rows_per_s"])
                    line += (
                        f"; COPY ceiling {bulk['rows_per_s']:,} rows/s; "
                        f"writer ÷ ceiling = {results[-1]['vs_bulk_ceiling']}"
                    )
                print(line, flush=True)
    base = results[0]["msgs_per_s"]
    for r in results:
        r["vs_sqlite_1_writer"] = ratio(r["msgs_per_s"], base)
    return results


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- 2. producer ack latency -------------------------------------------------------------------


def _produce(spool_dir: str, seconds: float, seed: int, barrier: Any, out: Any) -> None:
    spool = Spool(spool_dir)
    it = calls(synthetic_messages(10**9, seed=seed), 10, prefix=f"p{seed}-s")
    lat = []
    barrier.wait()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sid, msgs = next(it)
        t = time.perf_counter()
        spool.append("messages.append", {"session_id": sid, "messages": msgs})
        lat.append(time.perf_counter() - t)
    out.put(lat)


def _drain_forever(
    kind: str, root: str, spool_dir: str, url: str | None, stop: Any, out: Any
) -> None:
    backend = _open(kind, Path(root), url, "ack-bench")
    drain, rows = _drainer(backend, spool_dir), 0
    while not stop.is_set():
        step = drain.step()
        rows += step.result.rows
        backend.index(2000)
        if not step.entries:
            time.sleep(0.05)
    out.put(rows)
    backend.close()


def ack_latency(pg: str, producers: int = 4, seconds: float = 8.0) -> list[dict[str, Any]]:
    results = []
    for kind in ("sqlite", "postgres"):
        with (
            tempdir("quill-bench-ack") as tmp,
            PgSchema(pg) if kind == "postgres" else _Null() as url,
        ):
            (tmp / "spool").mkdir()
            stop, rows_q = CTX.Event(), CTX.Queue()
            writer = CTX.Process(
                target=_drain_forever, args=(kind, str(tmp), str(tmp / "spool"), url, stop, rows_q)
            )
            writer.start()
            barrier, out = CTX.Barrier(producers), CTX.Queue()
            procs = [
                CTX.Process(
                    target=_produce, args=(str(tmp / "spool"), seconds, 500 + i, barrier, out)
                )
                for i in range(producers)
            ]
            for p in procs:
                p.start()
            lat = [x for _ in procs for x in out.get(timeout=600)]
            for p in procs:
                p.join()
            stop.set()
            drained = rows_q.get(timeout=600)
            writer.join()
            results.append(
                {
                    "backend": kind,
                    "producers": producers,
                    "calls": len(lat),
                    "p50_ms": ms(pct(lat, 50)),
                    "p99_ms": ms(pct(lat, 99)),
                    "rows_drained": drained,
                }
            )
            print(
                f"ack {kind:8}: {len(lat)} calls p50 {ms(pct(lat, 50))} ms "
                f"p99 {ms(pct(lat, 99))} ms "
                f"(writer applied {drained} rows meanwhile)",
                flush=True,
            )
    results[1]["p99_vs_sqlite"] = ratio(results[1]["p99_ms"], results[0]["p99_ms"])
    return results


# -- 3. search latency --------------------------------------------------------------------------


def search(n: int, pg: str, runs: int = 20) -> list[dict[str, Any]]:
    out = []
    with tempdir("quill-bench-search") as tmp, PgSchema(pg) as url:
        _fill(tmp / "spool", n, seed=7, prefix="s")
        timings: dict[str, dict[str, list[float]]] = {}
        trips: dict[str, tuple[int, int]] = {}
        wire = wire_module()
        for kind in ("sqlite", "postgres"):
            barrier, q = CTX.Barrier(2), CTX.Queue()
            p = CTX.Process(
                target=_drain,
                args=(kind, str(tmp / kind), str(tmp / "spool"), url, "search", barrier, q),
            )
            p.start()
            barrier.wait()
            loaded = q.get(timeout=3600)
            p.join()
            print(
                f"search store {kind}: loaded {loaded['rows']} rows in {loaded['seconds']:.1f} s",
                flush=True,
            )
            backend = _open(kind, tmp / kind, url, "search")
            if kind == "postgres":
                backend.maintenance("analyze")
            with backend.reader() as reader:
                for name, kw in QUERIES:
                    reader.search(**kw)  # warm
                    ts = []
                    for _ in range(runs):
                        t = time.perf_counter()
                        reader.search(**kw)
                        ts.append(time.perf_counter() - t)
                    timings.setdefault(name, {})[kind] = ts
                    if kind == "postgres":
                        with wire.traced(reader.conn) as w:
                            reader.search(**kw)
                        trips[name] = (w.round_trips, w.statements)
            backend.close()
        floors = floor(url, runs)
        for name, by in timings.items():
            row = {"query": name, "messages": n}
            for kind, ts in by.items():
                row[f"{kind}_p50_ms"], row[f"{kind}_p95_ms"] = ms(pct(ts, 50)), ms(pct(ts, 95))
            row["p95_pg_vs_sqlite"] = ratio(row["postgres_p95_ms"], row["sqlite_p95_ms"])
            row["postgres_round_trips"], row["postgres_statements"] = trips[name]
            out.append(row)
            print(
                f"search {name:26} sqlite p95 {row['sqlite_p95_ms']} ms  "
                f"postgres p95 {row['postgres_p95_ms']} ms"
                f"  ({row['p95_pg_vs_sqlite']}×; {trips[name][0]} round trips, "
                f"{trips[name][1]} statements)",
                flush=True,
            )
        for name, ts in floors.items():
            row = {"floor": name, "postgres_p50_ms": ms(pct(ts, 50))}
            row["postgres_p95_ms"] = ms(pct(ts, 95))
            out.append(row)
            print(
                f"floor  {name:34} postgres p50 {row['postgres_p50_ms']} ms "
                f"p95 {row['postgres_p95_ms']} ms",
                flush=True,
            )
    print(f"load average {os.getloadavg()}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pg",
        default=os.environ.get("QUILL_BENCH_PG_URL", DEFAULT_PG),
        help="a PostgreSQL database to create throwaway schemas in",
    )
    ap.add_argument("--ingest", type=int, default=40_000, help="messages for the ingest comparison")
    ap.add_argument("--search", type=int, default=100_000, help="messages in each store for search")
    ap.add_argument("--sections", default="ingest,ack,search")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    result: dict[str, Any] = {
        "machine": machine(),
        "ingest_messages": args.ingest,
        "search_messages": args.search,
    }
    if "ingest" in sections:
        result["ingest"] = ingest(args.ingest, args.pg)
    if "ack" in sections:
        result["ack"] = ack_latency(args.pg)
    if "search" in sections:
        result["search"] = search(args.search, args.pg)
    path = Path(__file__).parent / "out" / "backends.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
