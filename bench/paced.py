"""§1b Paced producers: append latency of 16 agents that each push a turn now and then.

§1 runs its producers in a closed loop (each calls again the moment its previous call
returns), which measures saturation: 16 processes on this 2-core machine queue for CPU and
their latency is mostly that queue. Agents push one turn every few seconds. Here each of
``PROCS`` producers appends on a fixed schedule (one call every ``interval`` seconds, phases
spread at random), open loop: a call's latency runs from its **scheduled** start to its
return, so a call that starts late because the machine was busy is charged for the wait
(no coordinated omission). The bare 4 KiB write + ``fdatasync`` floor runs on the same
schedule in the same rounds, and so do §1's best closed-loop alternatives: the Agents SDK
session and LangGraph's SqliteSaver (alternatives.py).

Rounds are interleaved like §1 (every system once per round, order rotated), figures pooled.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from .alternatives import BY_NAME
from .common import ms, pct, ratio, tempdir
from .ingest import BARE_WRITE_BYTES, CTX
from .messages import calls, real_messages, real_stream

PROCS = 16
BATCH = 10
ROUNDS = 3
#: Seconds between one producer's calls: 16 producers × 20 calls/s = 320 calls/s offered, far
#: above an agent's turn rate and about a sixth of what 2 cores can append (§1: ≈ 0.3 ms of
#: CPU per Quill call).
INTERVAL = 0.05
SYSTEMS = ("bare", "quill", "agents", "langgraph")


def _paced(write, seconds: float, interval: float, barrier: Any) -> list[float]:
    """Call ``write()`` on the schedule; returns latencies (seconds) from each scheduled start."""
    barrier.wait()
    t0 = time.perf_counter() + random.random() * interval
    lat: list[float] = []
    i = 0
    while True:
        due = t0 + i * interval
        now = time.perf_counter()
        if due - t0 >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        write()
        lat.append(time.perf_counter() - due)
        i += 1
    return lat


def _worker(
    system: str, path: str, proc: int, seconds: float, interval: float, barrier: Any, out: Any
) -> None:
    try:
        if system == "bare":
            fd = os.open(
                os.path.join(path, f"bare{proc}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
            )
            block = b"x" * (BARE_WRITE_BYTES - 1) + b"\n"

            def write() -> None:
                os.write(fd, block)
                os.fdatasync(fd)
        else:
            w = BY_NAME[system]()
            w.open(Path(path), proc)
            it = calls(real_stream(10**12, offset=proc * 997), BATCH, prefix=f"p{proc}-s")
            w.write(*next(it))  # warm-up, not measured

            def write() -> None:
                w.write(*next(it))

        out.put(_paced(write, seconds, interval, barrier))
    except Exception as exc:  # reported by the parent, never silently dropped
        out.put(repr(exc))
        raise


def run_paced(system: str, d: Path, seconds: float, interval: float = INTERVAL) -> list[float]:
    """``PROCS`` paced producers of ``system`` in ``d``; every call's latency in seconds.
    Raises ``RuntimeError`` when a producer failed."""
    if system != "bare":
        BY_NAME[system].prepare(d)
    barrier = CTX.Barrier(PROCS)
    out = CTX.Queue()
    ps = [
        CTX.Process(
            target=_worker, args=(system, str(d), i, seconds, interval, barrier, out), daemon=True
        )
        for i in range(PROCS)
    ]
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]
    for p in ps:
        p.join(30)
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"{system}: {errors[0]}")
    return [x for r in results for x in r]


def run(sizes, log) -> dict[str, Any]:
    """§1b figures: per system ``{"calls", "p50_ms", "p99_ms"}`` and the ratios to bare."""
    real_messages()  # parse once, before forking
    seconds = sizes.ingest_seconds / ROUNDS * 2
    lats: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for rnd in range(ROUNDS):
        for system in SYSTEMS[rnd:] + SYSTEMS[:rnd]:
            with tempdir(f"paced-{system}") as d:
                lats[system] += run_paced(system, d, seconds)
    out: dict[str, Any] = {"procs": PROCS, "batch": BATCH, "interval_s": INTERVAL, "rounds": ROUNDS}
    for s in SYSTEMS:
        out[s] = {
            "calls": len(lats[s]),
            "p50_ms": ms(pct(lats[s], 50)),
            "p99_ms": ms(pct(lats[s], 99)),
        }
    out["quill_p99_over_bare"] = ratio(out["quill"]["p99_ms"], out["bare"]["p99_ms"])
    for s in SYSTEMS[2:]:
        out[f"quill_p99_over_{s}"] = ratio(out["quill"]["p99_ms"], out[s]["p99_ms"])
    log(
        f"§1b paced, {PROCS} producers × one call per {INTERVAL * 1000:.0f} ms, batch {BATCH}: "
        + "; ".join(f"{s} p50 {out[s]['p50_ms']} p99 {out[s]['p99_ms']} ms" for s in SYSTEMS)
        + f"; Quill p99 ÷ bare p99 {out['quill_p99_over_bare']}×"
    )
    return out
