"""Operator waits next to the floor (`python -c pass`): ``python -m bench.service_start``.

Three cases, each a real process on a real data dir, interleaved with the floor so machine
load hits them alike:

- ``quill serve`` start-up: spawn until ``GET /healthz`` answers 200;
- ``quill jobs run wal_checkpoint --wait 30`` against a running fleet (``quill run``): the
  command's wall time, and how much of it is the job itself (its recorded run, from
  ``jobs history``) — the rest is process start-up, queueing and waiting;
- ``quill status --json``.

``--baseline REV`` runs every case under git revision REV as well (its own data dir and
fleet), interleaved with this tree's: before and after in one run.

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
from .common import ms, pct, ratio, revision_tree, tempdir
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


def _system(quill: list[str], env: dict[str, str], home: Path) -> subprocess.Popen:
    """A data dir at ``home`` with one pushed message and a running fleet (the watcher off:
    a bench never captures this machine's agent folders)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[watch]\nenabled = false\n")
    _run([*quill, "push", "--session", "bench"], env, MESSAGE)
    return _fleet(quill, env, home)


def run(reps: int = 8, baseline: str | None = None) -> dict[str, Any]:
    """``reps`` interleaved rounds of each case; p50 wall and CPU in ms, ratios to the floor.
    ``baseline`` (a git revision): each case also runs under that revision's ``quill`` (its
    own data dir and fleet), interleaved with this tree's, so both meet the same load."""
    quill = _quill()
    with tempdir("bench-service") as root, revision_tree(baseline) as tree:
        systems = {"": {**os.environ, "QUILL_HOME": str(root / "this")}}
        if baseline:
            pythonpath = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
            systems[f" @{baseline}"] = {
                **os.environ,
                "QUILL_HOME": str(root / "base"),
                "PYTHONPATH": pythonpath,
            }
        fleets = [_system(quill, env, Path(env["QUILL_HOME"])) for env in systems.values()]
        try:
            job = [*quill, "jobs", "run", "wal_checkpoint", "--wait", "30", "--json"]
            for env in systems.values():
                _run(job, env)  # the fleet's first run; warms the page cache too
            wall: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            job_own: dict[str, list[float]] = {}

            def add(name: str, w: float, c: float) -> None:
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)

            for _ in range(reps):
                w, c, _out = _run([sys.executable, "-c", "pass"], systems[""])
                add("floor: python -c pass", w, c)
                for tag, env in systems.items():
                    add(f"quill serve → /healthz{tag}", *_serve_once(quill, env))
                    w, c, out = _run(job, env)
                    add(f"quill jobs run --wait{tag}", w, c)
                    job_own.setdefault(tag, []).append(_job_seconds(out))
                    w, c, _out = _run([*quill, "status", "--json"], env)
                    add(f"quill status --json{tag}", w, c)
            loaded = {
                f"{cmd}{tag}": heavy_imports(argv, env, None)
                for tag, env in systems.items()
                for cmd, argv in (
                    ("jobs run", ["jobs", "run", "wal_checkpoint"]),
                    ("status", ["status", "--json"]),
                )
            }
        finally:
            for fleet in fleets:
                fleet.terminate()
            for fleet in fleets:
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
    waits = {
        tag or "this tree": {
            "job_own_p50_ms": ms(pct(own, 50)),
            "overhead_p50_ms": ms(pct(wall[f"quill jobs run --wait{tag}"], 50) - pct(own, 50)),
        }
        for tag, own in job_own.items()
    }
    return {
        "reps": reps,
        "baseline": baseline,
        "rows": rows,
        "jobs_wait": waits,
        "heavy_imports": loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--baseline", metavar="REV", help="also run each case under git revision REV"
    )
    args = parser.parse_args()
    result = run(args.reps, args.baseline)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    keys = ("case", "p50_ms", "p95_ms", "ratio_to_floor", "cpu_p50_ms", "cpu_ratio_to_floor")
    print_table(
        None,
        ("case", "p50 ms", "p95 ms", "÷ floor", "CPU ms", "CPU ÷ floor"),
        [[r[k] for k in keys] for r in result["rows"]],
    )
    for tag, w in result["jobs_wait"].items():
        print(
            f"jobs run --wait ({tag}): the job itself {w['job_own_p50_ms']} ms (p50), the rest "
            f"{w['overhead_p50_ms']} ms is start-up, queueing and waiting"
        )
    print(f"heavy modules imported: {result['heavy_imports']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
