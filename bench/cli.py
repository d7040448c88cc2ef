"""`quill push` as a whole process, next to the floor (`python -c pass`): ``python -m bench.cli``.

Agents call `quill push` once per turn, so its process latency is interpreter start-up +
imports + one fsync'd append. The floor is the same interpreter doing nothing, measured in
the same run, interleaved with the commands (so machine load hits both alike). Goal:
push p50 ≤ 100 ms. Also reports which heavy modules each command imported (none of
SQLAlchemy, APScheduler, rich, psutil may be loaded by push).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import ms, pct, ratio, tempdir
from .tables import print_table

HEAVY = (
    "sqlalchemy",
    "apscheduler",
    "rich",
    "psutil",
    "huey",
    "redis",
    "psycopg",
    "fastapi",
    "structlog",
    "quill.store.read.reader",
    "quill.store.apply.chunk",
    "quill.store.sqlite.connection",
    "quill.store.sqlite.indexer",
    "quill.workers",
    "quill.jobs",
    "importlib.metadata",
    "tomllib",
    "socket",
)
MESSAGE = '{"role": "user", "content": "one agent turn"}\n'


def _quill() -> list[str]:
    script = Path(sys.executable).parent / "quill"
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from quill.ops.cli import main; main()"]
    )


def _time(argv: list[str], env: dict[str, str], stdin: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of one run. CPU time is the load-robust figure on
    a shared machine: waiting for a core does not count."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        argv,
        input=stdin,
        env=env,
        check=True,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_imports(args: list[str], env: dict[str, str], stdin: str | None) -> list[str]:
    """Heavy modules loaded when ``quill <args>`` runs (read from the process's sys.modules)."""
    code = (
        "import atexit, sys, json\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        f"sys.argv = ['quill', *{args!r}]\n"
        "from quill.ops.cli import main\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input=stdin, env=env, text=True, capture_output=True
    )
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    return sorted({h for h in HEAVY for m in loaded if m == h or m.startswith(h + ".")})


def run(reps: int = 40) -> dict[str, Any]:
    """``reps`` interleaved runs of each case; p50/p95 in ms and the ratio to the floor."""
    with tempdir("bench-cli") as home:
        env = {**os.environ, "QUILL_HOME": str(home)}
        quill = _quill()
        cases = {
            "floor: python -c pass": ([sys.executable, "-c", "pass"], None),
            "quill --version": ([*quill, "--version"], None),
            "quill push (1 message)": ([*quill, "push", "--session", "bench"], MESSAGE),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for argv, stdin in cases.values():  # warm the page cache once
            _time(argv, env, stdin)
        for _ in range(reps):
            for name, (argv, stdin) in cases.items():
                wall, used = _time(argv, env, stdin)
                times[name].append(wall)
                cpu[name].append(used)
        floor = pct(times["floor: python -c pass"], 50)
        cpu_floor = pct(cpu["floor: python -c pass"], 50)
        rows = [
            {
                "case": name,
                "min_ms": ms(min(t)),
                "p50_ms": ms(pct(t, 50)),
                "p95_ms": ms(pct(t, 95)),
                "p50_over_floor_ms": ms(pct(t, 50) - floor),
                "ratio_to_floor": ratio(pct(t, 50), floor),
                "cpu_p50_ms": ms(pct(cpu[name], 50)),
                "cpu_ratio_to_floor": ratio(pct(cpu[name], 50), cpu_floor),
            }
            for name, t in times.items()
        ]
        loaded = {
            "push": heavy_imports(["push", "--session", "bench"], env, MESSAGE),
            "--version": heavy_imports(["--version"], env, None),
        }
    push = next(r for r in rows if r["case"].startswith("quill push"))
    return {
        "reps": reps,
        "rows": rows,
        "heavy_imports": loaded,
        "target": {
            "goal": "push p50 ≤ 100 ms",
            "measured_ms": push["p50_ms"],
            "result": "PASS" if push["p50_ms"] <= 100 else "FAIL",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args.reps)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    keys = ("case", "min_ms", "p50_ms", "p95_ms", "p50_over_floor_ms", "ratio_to_floor")
    print_table(
        None,
        (
            "case",
            "min ms",
            "p50 ms",
            "p95 ms",
            "p50 - floor",
            "÷ floor",
            "CPU p50 ms",
            "CPU ÷ floor",
        ),
        [[r[k] for k in (*keys, "cpu_p50_ms", "cpu_ratio_to_floor")] for r in result["rows"]],
    )
    print(f"heavy modules imported: {result['heavy_imports']}")
    print(
        f"target {result['target']['goal']}: {result['target']['measured_ms']} ms → "
        f"{result['target']['result']}"
        " (on a loaded machine compare the ÷ floor ratios: the floor is measured in the same run)"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
