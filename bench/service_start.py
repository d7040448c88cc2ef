"""Operator waits next to the floor (`python -c pass`): ``python -m bench.service_start``.

Three cases, each a real process on a real data dir, interleaved with the floor so machine
load hits them alike:

- ``quill serve`` start-up: spawn until ``GET /healthz`` answers 200;
- ``quill jobs run wal_checkpoint --wait 30`` against a running fleet (``quill run``): the
  command's wall time, and how much of it is the job itself (its recorded run, from
  ``jobs history``) — the rest is process start-up, queueing and waiting;
- ``quill status --json``.

Wall times swing with load on a shared machine; CPU time (user + sys of the child) does not
count waiting for a core, so the CPU ratio to the floor is the figure to compare across runs.
Also lists the heavy modules each command loads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from quill.home import RunDir

from .cli import _quill, heavy_imports
from .common import ms, pct, ratio, tempdir
from .tables import print_table

MESSAGE = '{"role": "user", "content": "one agent turn"}\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _serve_once(quill: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) from spawning ``quill serve`` to its first 200 on ``/healthz``. The CPU
    figure is the server's whole life, which ends right after that answer."""
    port = _free_port()
    before = _cpu_children()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*quill, "serve", "--listen", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"quill serve exited with {proc.returncode} before answering")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.01)
        wall = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return wall, _cpu_children() - before


def _run(
    argv: list[str], env: dict[str, str], stdin: str | None = None
) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one command, which must exit 0."""
    before = _cpu_children()
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, env=env, check=True, text=True, capture_output=True)
    return time.perf_counter() - start, _cpu_children() - before, proc.stdout


def _job_seconds(out: str) -> float:
    """The job's own duration (s) from ``jobs run --wait --json``'s recorded run."""
    run = json.loads(out)["run"]
    return run["ended_at"] - run["started_at"]


def _fleet(quill: list[str], env: dict[str, str], home: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*quill, "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run_dir = RunDir(home)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if run_dir.fleet_running():
            return proc
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("quill run did not start within 120 s")


def run(reps: int = 8) -> dict[str, Any]:
    """``reps`` interleaved rounds of each case; p50 wall and CPU in ms, ratios to the floor."""
    with tempdir("bench-service") as home:
        env = {**os.environ, "QUILL_HOME": str(home)}
        quill = _quill()
        _run([*quill, "push", "--session", "bench"], env, MESSAGE)
        fleet = _fleet(quill, env, home)
        try:
            job = [*quill, "jobs", "run", "wal_checkpoint", "--wait", "30", "--json"]
            _run(job, env)  # the fleet's first run; warms the page cache too
            wall: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            job_own: list[float] = []

            def add(name: str, w: float, c: float) -> None:
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)

            for _ in range(reps):
                w, c, _out = _run([sys.executable, "-c", "pass"], env)
                add("floor: python -c pass", w, c)
                add("quill serve → /healthz", *_serve_once(quill, env))
                w, c, out = _run(job, env)
                add("quill jobs run --wait", w, c)
                job_own.append(_job_seconds(out))
                w, c, _out = _run([*quill, "status", "--json"], env)
                add("quill status --json", w, c)
            loaded = {
                "jobs run": heavy_imports(["jobs", "run", "wal_checkpoint"], env, None),
                "status": heavy_imports(["status", "--json"], env, None),
            }
        finally:
            fleet.terminate()
            fleet.wait(timeout=60)
    floor_w = pct(wall["floor: python -c pass"], 50)
    floor_c = pct(cpu["floor: python -c pass"], 50)
    rows = [
        {
            "case": name,
            "p50_ms": ms(pct(w, 50)),
            "p95_ms": ms(pct(w, 95)),
            "ratio_to_floor": ratio(pct(w, 50), floor_w),
            "cpu_p50_ms": ms(pct(cpu[name], 50)),
            "cpu_ratio_to_floor": ratio(pct(cpu[name], 50), floor_c),
        }
        for name, w in wall.items()
    ]
    return {
        "reps": reps,
        "rows": rows,
        "job_own_p50_ms": ms(pct(job_own, 50)),
        "jobs_wait_overhead_p50_ms": ms(pct(wall["quill jobs run --wait"], 50) - pct(job_own, 50)),
        "heavy_imports": loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args.reps)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    keys = ("case", "p50_ms", "p95_ms", "ratio_to_floor", "cpu_p50_ms", "cpu_ratio_to_floor")
    print_table(
        None,
        ("case", "p50 ms", "p95 ms", "÷ floor", "CPU ms", "CPU ÷ floor"),
        [[r[k] for k in keys] for r in result["rows"]],
    )
    print(
        f"jobs run --wait: the job itself {result['job_own_p50_ms']} ms (p50), the rest "
        f"{result['jobs_wait_overhead_p50_ms']} ms is start-up, queueing and waiting"
    )
    print(f"heavy modules imported: {result['heavy_imports']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
