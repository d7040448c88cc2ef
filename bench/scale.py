"""§5 Scale: how ingest rate, search latency, prune and VACUUM time and writer RSS change
from 10k → 100k → 1M synthetic messages.

Each size is built the Quill way: a spool of synthetic messages (calls of 10, sessions of 50;
written with fsync off — preparation, not measured) drained by a *fresh* process (spawn) that
runs the writer's loop (``searchable.drain``, 500-row chunks, 2,000-row index slices); that
process reports its drain rate and its peak RSS (``ru_maxrss``) — the writer's working set
while the spool is many times larger than memory budgets.

Prune: Quill has no prune job yet (``jobs/store_jobs.py`` holds checkpoint and FTS optimize),
so prune is timed as the transaction such a job runs: delete the oldest 10 % of sessions, their
messages and their FTS entries (``store.sqlite.indexer.unindex``), in one ``BEGIN IMMEDIATE``.
VACUUM is then timed on the writer connection, followed by a TRUNCATE checkpoint.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from .common import dir_bytes

SPAWN = mp.get_context("spawn")


def _vm(key: str) -> float:
    """VmHWM/VmRSS of this process in MB (VmHWM is per address space: reset by exec, unlike
    ru_maxrss, which would carry the parent's size into a spawned child)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _drain_child(spool: str, db: str, out: Any) -> None:
    from .searchable import drain

    base = _vm("VmRSS")
    res = drain(Path(spool), Path(db), 500)
    res["rss_start_mb"] = base
    res["rss_peak_mb"] = _vm("VmHWM")
    out.put(res)


def build(n: int, d: Path, log) -> dict[str, Any]:
    """Build a Quill store of ``n`` synthetic messages under ``d``; returns ingest figures."""
    from .messages import synthetic_messages
    from .searchable import write_spool

    t0 = time.perf_counter()
    write_spool(d / "spool", synthetic_messages(n))
    prep = time.perf_counter() - t0
    q = SPAWN.Queue()
    p = SPAWN.Process(target=_drain_child, args=(str(d / "spool"), str(d / "state.db"), q))
    p.start()
    import queue

    while True:
        try:
            res = q.get(timeout=1.0)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"drain process died (exit code {p.exitcode})") from None
    p.join()
    res["spool_bytes"] = dir_bytes(d / "spool")
    res["db_bytes"] = sum(f.stat().st_size for f in d.glob("state.db*"))
    res["spool_prep_s"] = round(prep, 1)
    log(
        f"§5 built {n:>9,d} msgs: drain {res['msgs_per_s']:.0f} msg/s, "
        f"writer RSS peak {res['rss_peak_mb']} MB, "
        f"spool {res['spool_bytes'] >> 20} MiB, db {res['db_bytes'] >> 20} MiB"
    )
    return res


def prune_and_vacuum(db: Path, fraction: float = 0.10) -> dict[str, Any]:
    import apsw

    from quill.store import open_writer
    from quill.store.sqlite.connection import transaction
    from quill.store.sqlite.indexer import unindex

    conn = open_writer(db)
    sids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY rowid")]
    victims = sids[: max(1, int(len(sids) * fraction))]
    t0 = time.perf_counter()
    deleted = 0
    with transaction(conn):
        for i in range(0, len(victims), 200):
            part = victims[i : i + 200]
            marks = ", ".join("?" for _ in part)
            ids = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM messages WHERE session_id IN ({marks})", part
                )
            ]
            unindex(conn, ids)
            conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", part)
            deleted += conn.changes()
            conn.execute(f"DELETE FROM sessions WHERE id IN ({marks})", part)
    prune_s = time.perf_counter() - t0
    conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    size_before = db.stat().st_size
    t0 = time.perf_counter()
    conn.execute("VACUUM")
    vacuum_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    ckpt_s = time.perf_counter() - t0
    conn.close()
    return {
        "pruned_sessions": len(victims),
        "pruned_messages": deleted,
        "prune_s": round(prune_s, 3),
        "vacuum_s": round(vacuum_s, 3),
        "truncate_checkpoint_s": round(ckpt_s, 3),
        "db_bytes_before_vacuum": size_before,
        "db_bytes_after": db.stat().st_size,
    }


def growth(sizes: list[int], values: list[float | None], per_item: bool) -> dict[str, Any]:
    """Fit the exponent k in value ∝ n^k between the smallest and largest size.

    ``per_item`` metrics (latency of one search, RSS) are ideal at k≈0; totals (prune, VACUUM
    time) at k≈1; rates (msgs/s) at k≈0 (total ingest time linear)."""
    pts = [(n, v) for n, v in zip(sizes, values) if v]
    if len(pts) < 2:
        return {"exponent": None, "verdict": "n/a"}
    (n0, v0), (n1, v1) = pts[0], pts[-1]
    k = math.log(v1 / v0) / math.log(n1 / n0)
    if per_item:
        verdict = (
            "flat"
            if abs(k) < 0.15
            else ("sub-linear" if k < 0.85 else ("linear" if k < 1.15 else "worse than linear"))
        )
    else:
        verdict = "sub-linear" if k < 0.85 else ("linear" if k < 1.15 else "worse than linear")
    return {"exponent": round(k, 2), "verdict": verdict}
