"""§4 Under maintenance: producer append latency while VACUUM, FTS optimize and a TRUNCATE
checkpoint run on the store, against the idle latency of the same producers in the same run.

Quill: producers append to the spool (batch 10) while the maintenance runs on the writer's
connection to ``state.db`` (where Quill's store jobs run). Baseline: the naive writer, whose
producers write the database itself (one transaction per message), while the same three
operations run on *its* database. Every latency sample is tagged with its start time and
binned into the phase it started in (idle, VACUUM, optimize, checkpoint).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import ms, pct, ratio
from .ingest import CTX, run_producers


def _fsync_probe(path: str, stop: Any, out: Any) -> None:
    """A bare 4 KiB write + fdatasync every 2 ms on the same filesystem: the device's own
    sync latency in each phase, to tell I/O waits from CPU waits in the producers' figures."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    buf = b"x" * 4095 + b"\n"
    samples = []
    while not stop.is_set():
        t0 = time.perf_counter()
        os.write(fd, buf)
        os.fdatasync(fd)
        samples.append((t0, time.perf_counter() - t0))
        time.sleep(0.002)
    os.close(fd)
    out.put(samples)


def _phases(
    writer: str,
    prod_dir: Path,
    procs: int,
    idle_s: float,
    steps: list[tuple[str, Callable[[], None]]],
) -> dict[str, Any]:
    stop, started = CTX.Event(), CTX.Event()
    box: dict[str, Any] = {}
    th = threading.Thread(
        target=lambda: box.update(
            run_producers(
                writer, prod_dir, procs, 10, None, stop=stop, record_times=True, started=started
            )
        )
    )
    th.start()
    started.wait()
    pq = CTX.Queue()
    probe = CTX.Process(
        target=_fsync_probe, args=(str(prod_dir / "fsync-probe"), stop, pq), daemon=True
    )
    probe.start()
    marks = [("idle", time.perf_counter())]
    time.sleep(idle_s)
    for name, fn in steps:
        marks.append((name, time.perf_counter()))
        fn()
    marks.append(("after", time.perf_counter()))
    time.sleep(min(1.0, idle_s / 2))
    stop.set()
    th.join()
    probe_samples = pq.get()
    probe.join(10)
    samples = box["samples"]
    out: dict[str, Any] = {}
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        lats = [lat for at, lat in samples if t0 <= at < t1]
        out[name] = {
            "seconds": round(t1 - t0, 3),
            "n": len(lats),
            "p50_ms": ms(pct(lats, 50)),
            "p99_ms": ms(pct(lats, 99)),
            "max_ms": ms(max(lats) if lats else None),
        }
        fs = [lat for at, lat in probe_samples if t0 <= at < t1]
        out[name]["fsync_probe_p50_ms"] = ms(pct(fs, 50))
        out[name]["fsync_probe_p99_ms"] = ms(pct(fs, 99))
    out["errors"] = box["errors"]
    idle = out["idle"]["p99_ms"]
    for name, _ in steps:
        out[name]["p99_over_idle"] = ratio(out[name]["p99_ms"], idle)
    return out


def run_quill(db: Path, work: Path, sizes, log) -> dict[str, Any]:
    import apsw

    from quill.store import open_writer
    from quill.store.sqlite.connection import transaction
    from quill.store.sqlite.indexer import optimize

    conn = open_writer(db)

    def fts_optimize():  # both FTS tables (store.indexer.optimize), in the writer's transaction
        with transaction(conn):
            optimize(conn)

    steps = [
        ("VACUUM", lambda: conn.execute("VACUUM")),
        ("FTS optimize", fts_optimize),
        ("TRUNCATE checkpoint", lambda: conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)),
    ]
    prod = work / "maint-quill"
    prod.mkdir(parents=True, exist_ok=True)
    try:
        res = _phases("quill", prod, sizes.maint_producers, sizes.idle_seconds, steps)
    finally:
        conn.close()
    return res


def run_naive(db: Path, sizes, log) -> dict[str, Any]:
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=60)
    steps = [
        ("VACUUM", lambda: conn.execute("VACUUM")),
        (
            "FTS optimize",
            lambda: conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')"),
        ),
        ("TRUNCATE checkpoint", lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()),
    ]
    try:
        return _phases("naive", db.parent, sizes.maint_producers, sizes.idle_seconds, steps)
    finally:
        conn.close()


def run(quill_db: Path, n: int, work: Path, sizes, log) -> dict[str, Any]:
    from .search import build_naive

    out: dict[str, Any] = {"messages": n, "producers": sizes.maint_producers, "batch": 10}
    out["quill"] = run_quill(quill_db, work, sizes, log)
    ndir = work / "maint-naive"
    ndir.mkdir(parents=True, exist_ok=True)
    build_naive(ndir / "naive.db", n)
    out["naive"] = run_naive(ndir / "naive.db", sizes, log)
    for who in ("quill", "naive"):
        r = out[who]
        log(
            f"§4 {who:6s} idle p99 {r['idle']['p99_ms']} ms | "
            + " | ".join(
                f"{k} {r[k]['seconds']}s p99 {r[k]['p99_ms']} ms "
                f"(x{r[k]['p99_over_idle']}, n={r[k]['n']})"
                for k in ("VACUUM", "FTS optimize", "TRUNCATE checkpoint")
            )
        )
    return out
