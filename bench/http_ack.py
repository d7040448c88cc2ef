"""HTTP append ack latency next to its floor: ``python -m bench.http_ack [--n 300] [--json]``.

An HTTP append is acknowledged (202) only after its record is fsync'd into the spool, so its
floor is a direct ``Spool.append`` of the same record on the same disk, measured in the same
run, interleaved with the HTTP requests (machine load hits both alike). Reported: p50 / p95 /
p99 in ms of (a) the direct append, (b) one HTTP client (keep-alive), (c) 16 concurrent HTTP
clients (each request's own latency), and the ratios HTTP ÷ direct. A real `quill serve`
subprocess serves; no fleet runs (acks do not wait for the writer).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx

from .common import ms, pct, ratio, tempdir

MESSAGES = [
    {"role": "user", "content": "one agent turn " * 20},
    {"role": "assistant", "content": "a reply " * 40},
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(home: Any, port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`quill serve` on ``home`` at 127.0.0.1:``port`` (``env``: the process's environment,
    e.g. a baseline tree first on ``PYTHONPATH``), once it answers ``/healthz``."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from quill.ops.cli import main; main()",
            "--home",
            str(home),
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("quill serve did not start")


def _summary(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": ms(pct(samples, 50)),
        "p95_ms": ms(pct(samples, 95)),
        "p99_ms": ms(pct(samples, 99)),
    }


def run(n: int = 300, clients: int = 16) -> dict[str, Any]:
    """Measure and return the figures (see the module doc)."""
    from quill.spool import Spool

    with tempdir("http") as home:
        port = _port()
        proc = _serve(home, port)
        url = f"http://127.0.0.1:{port}/api/v1/sessions/bench/messages"
        direct, single = [], []
        try:
            spool = Spool(home / "spool")
            with httpx.Client() as http:
                for _ in range(n):  # interleaved: one direct append, one HTTP append
                    t = time.perf_counter()
                    spool.append("messages.append", {"session_id": "floor", "messages": MESSAGES})
                    direct.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    r = http.post(url, json={"messages": MESSAGES})
                    single.append(time.perf_counter() - t)
                    assert r.status_code == 202, r.text
            concurrent: list[float] = []
            lock = threading.Lock()

            def client() -> None:
                mine = []
                with httpx.Client(timeout=60) as http:
                    for _ in range(max(1, n // clients)):
                        t = time.perf_counter()
                        r = http.post(url, json={"messages": MESSAGES})
                        mine.append(time.perf_counter() - t)
                        assert r.status_code == 202, r.text
                with lock:
                    concurrent.extend(mine)

            threads = [threading.Thread(target=client) for _ in range(clients)]
            began = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - began
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    out = {
        "direct_append": _summary(direct),
        "http_1_client": _summary(single),
        f"http_{clients}_clients": {
            **_summary(concurrent),
            "acks_per_s": round(len(concurrent) / wall, 1),
        },
    }
    out["ratios"] = {
        "http_1_p50_over_direct_p50": ratio(pct(single, 50), pct(direct, 50)),
        "http_1_p99_over_direct_p99": ratio(pct(single, 99), pct(direct, 99)),
        f"http_{clients}_p50_over_direct_p50": ratio(pct(concurrent, 50), pct(direct, 50)),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="appends per measured series")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    res = run(args.n, args.clients)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for name, row in res.items():
        if name != "ratios":
            print(f"{name:<18} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    print("ratios             " + "  ".join(f"{k} {v}" for k, v in res["ratios"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
