"""Cost of the damage check on ingest: ``python -m bench.damage_check [--messages N] [--rounds R]``.

The check is ``PRAGMA quick_check`` on a read-only connection in the job worker,
every hour by default (``catalog.DAMAGE_BOUND_S``). This measures, in one run, the writer's
drain (the shared ``replay`` routine: chunked transactions + FTS slices, exactly the writer's
path) of the same spool into a fresh store:

* ``baseline``   — nothing else running;
* ``continuous`` — a second process running ``quick_check`` back to back on that store for
  the whole drain: the worst case (a check that never pauses), not the default duty cycle.

Rounds alternate baseline / continuous so drift on a shared machine hits both. Printed: the
median seconds of each, ``continuous / baseline`` (1.00 = no cost), the seconds one
``quick_check`` of the final store takes, and the implied cost at the default hourly
schedule: ``1 + (continuous/baseline - 1) × check_seconds / DAMAGE_BOUND_S``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

from quill.jobs.catalog import DAMAGE_BOUND_S
from quill.jobs.worker_jobs import quick_check
from quill.ops.recover.replay import replay
from quill.spool import Spool


def _fill(spool_dir: Path, messages: int) -> None:
    words = "transcript tool call result session assistant user compaction rewind lineage".split()
    with Spool(spool_dir) as sp:
        for b in range(messages // 20):
            sp.append(
                "messages.append",
                {
                    "session_id": f"s{b % 50}",
                    "messages": [
                        {
                            "role": "user" if i % 2 else "assistant",
                            "id": f"{b}-{i}",
                            "content": " ".join(words[(b + i + k) % len(words)] for k in range(60))
                            + f" {b}-{i}",
                        }
                        for i in range(20)
                    ],
                },
            )


def _checker(db: str, stop, counts) -> None:
    while not stop.is_set():
        if Path(db).exists():
            try:
                quick_check(db)
                counts.value += 1
            except Exception:  # the store is being created: try again
                time.sleep(0.01)
        else:
            time.sleep(0.01)


def _drain(spool_dir: Path, db: Path, check: bool) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    stop, counts = ctx.Event(), ctx.Value("i", 0)
    proc = ctx.Process(target=_checker, args=(str(db), stop, counts)) if check else None
    if proc:
        proc.start()
    t0 = time.perf_counter()
    replay(spool_dir, db, None)
    took = time.perf_counter() - t0
    if proc:
        stop.set()
        proc.join(60)
    return took, counts.value


def run(messages: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="quill-bench-check-") as tmp:
        work = Path(tmp)
        _fill(work / "spool", messages)
        base, cont, checks = [], [], 0
        for r in range(rounds):
            for check in (False, True):
                took, n = _drain(work / "spool", work / f"r{r}-{int(check)}.db", check)
                (cont if check else base).append(took)
                checks += n
        t0 = time.perf_counter()
        quick_check(str(work / "r0-0.db"))
        check_s = time.perf_counter() - t0
    ratio = statistics.median(cont) / statistics.median(base)
    return {
        "messages": messages,
        "rounds": rounds,
        "baseline_s": round(statistics.median(base), 3),
        "continuous_check_s": round(statistics.median(cont), 3),
        "ratio_continuous": round(ratio, 3),
        "quick_checks_during_drains": checks,
        "one_check_s": round(check_s, 3),
        "ratio_hourly_default": round(1 + (ratio - 1) * check_s / DAMAGE_BOUND_S, 5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps(run(args.messages, args.rounds), indent=2))


if __name__ == "__main__":
    main()
