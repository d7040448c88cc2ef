"""§1 Acknowledged-durable ingest: messages/s and per-call latency p50/p99, for batches of 1
and 10 messages and 1 and 16 producer processes, Quill's spool append against the
alternatives in ``alternatives.py``, all on the same real messages in the same run.

A call returns only when its messages are durable by the system's own rules; its latency is
measured around the call in the producer. Each producer owns its sessions (50 messages each).
Producers start together (a barrier) and stop after a fixed wall time; messages/s is the total
acknowledged messages over the measured wall time.

The device's ``fdatasync`` price on this shared VM swings 10× within seconds, so systems measured
one after another in separate windows compare different disks. Each (batch, procs) cell is
therefore measured in ``ROUNDS`` rounds of ``ingest_seconds / ROUNDS``; every round runs every
system once, in an order rotated by one each round, and a system's figures are its rounds
pooled (messages over summed wall time, latency percentiles over all calls). The same
interleaving applies to every system, Quill included; ``round_ratios`` keeps Quill ÷ the best
alternative of each round, so a ratio can be checked per round too. The bare 4 KiB
write+``fdatasync`` floor (1 process in every cell, 16 in the 16-producer cells) takes its turn
in the same rotation and is pooled over all its rounds.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path
from typing import Any

from . import ack_probes
from .alternatives import ALL, BY_NAME
from .common import ms, pct, ratio, tempdir
from .messages import calls, real_messages, real_stream

CTX = mp.get_context("fork")
BATCHES = (1, 10)
PROCS = (1, 16)
WARMUP_CALLS = 3
#: Interleaved rounds per (batch, procs) cell (module doc).
ROUNDS = 3


def _worker(
    name: str,
    path: str,
    proc: int,
    batch: int,
    seconds: float | None,
    barrier: Any,
    out: Any,
    stop: Any,
    record_times: bool,
) -> None:
    res: dict[str, Any] = {
        "proc": proc,
        "calls": 0,
        "msgs": 0,
        "lat": [],
        "at": [],
        "errors": 0,
        "error": None,
    }
    try:
        w = BY_NAME[name]()
        w.open(Path(path), proc)
        it = calls(real_stream(10**12, offset=proc * 997), batch, prefix=f"p{proc}-s")
        for _ in range(WARMUP_CALLS):
            sid, msgs = next(it)
            w.write(sid, msgs)
    except Exception:
        res["error"] = traceback.format_exc(limit=3)
        barrier.wait()
        out.put(res)
        return
    barrier.wait()
    t0 = time.perf_counter()
    deadline = t0 + seconds if seconds else float("inf")
    lat, at = res["lat"], res["at"]
    perf = time.perf_counter
    cpu0 = time.process_time()
    while True:
        now = perf()
        if now >= deadline or (stop is not None and stop.is_set()):
            break
        sid, msgs = next(it)
        try:
            w.write(sid, msgs)
        except Exception:
            res["errors"] += 1
            if res["error"] is None:
                res["error"] = traceback.format_exc(limit=2)
            continue
        end = perf()
        lat.append(end - now)
        if record_times:
            at.append(now)
        res["calls"] += 1
        res["msgs"] += len(msgs)
    res["t0"], res["t1"] = t0, perf()
    res["cpu_s"] = time.process_time() - cpu0
    try:
        w.close()
    except Exception:
        pass
    out.put(res)


def run_producers(
    name: str,
    path: Path,
    procs: int,
    batch: int,
    seconds: float | None,
    *,
    stop: Any = None,
    record_times: bool = False,
    started: Any = None,
    keep_lats: bool = False,
) -> dict[str, Any]:
    """Run ``procs`` producer processes of writer ``name`` against ``path``; returns totals
    (with every call's latency in seconds under ``lats`` when ``keep_lats``)."""
    real_messages()  # parse once, before forking
    barrier = CTX.Barrier(procs + 1)
    out = CTX.Queue()
    ps = [
        CTX.Process(
            target=_worker,
            args=(name, str(path), i, batch, seconds, barrier, out, stop, record_times),
            daemon=True,
        )
        for i in range(procs)
    ]
    for p in ps:
        p.start()
    barrier.wait()
    if started is not None:
        started.set()
    results = [out.get() for _ in ps]
    for p in ps:
        p.join(30)
    lats = [x for r in results for x in r["lat"]]
    t0 = min((r["t0"] for r in results if "t0" in r), default=0.0)
    t1 = max((r["t1"] for r in results if "t1" in r), default=0.0)
    wall = max(t1 - t0, 1e-9)
    msgs = sum(r["msgs"] for r in results)
    errors = [r["error"] for r in results if r["error"]]
    ncalls = sum(r["calls"] for r in results)
    cpu_per_call = sum(r.get("cpu_s", 0.0) for r in results) / ncalls if ncalls else None
    return {
        "msgs": msgs,
        "calls": sum(r["calls"] for r in results),
        "wall_s": round(wall, 3),
        "msgs_per_s": round(msgs / wall, 1),
        "p50_ms": ms(pct(lats, 50)),
        "p99_ms": ms(pct(lats, 99)),
        "max_ms": ms(max(lats) if lats else None),
        "cpu_ms_per_call": ms(cpu_per_call),
        "errors": sum(r["errors"] for r in results),
        "error_sample": errors[0] if errors else None,
        "samples": [(at, lat) for r in results for at, lat in zip(r["at"], r["lat"])]
        if record_times
        else None,
        "cpu_s": sum(r.get("cpu_s", 0.0) for r in results),
        **({"lats": lats} if keep_lats else {}),
    }


def pool_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's rounds (``run_producers(..., keep_lats=True)`` results) as one result:
    messages over the summed wall time, percentiles over all calls."""
    lats = [x for r in rounds for x in r["lats"]]
    msgs, calls_ = sum(r["msgs"] for r in rounds), sum(r["calls"] for r in rounds)
    wall = sum(r["wall_s"] for r in rounds)
    errors = [r["error_sample"] for r in rounds if r["error_sample"]]
    return {
        "msgs": msgs,
        "calls": calls_,
        "wall_s": round(wall, 3),
        "msgs_per_s": round(msgs / wall, 1) if wall else 0.0,
        "p50_ms": ms(pct(lats, 50)),
        "p99_ms": ms(pct(lats, 99)),
        "max_ms": ms(max(lats) if lats else None),
        "cpu_ms_per_call": ms(sum(r["cpu_s"] for r in rounds) / calls_) if calls_ else None,
        "errors": sum(r["errors"] for r in rounds),
        "error_sample": errors[0] if errors else None,
        "rounds_msgs_per_s": [r["msgs_per_s"] for r in rounds],
    }


BARE_WRITE_BYTES = 4096


def _bare_worker(path: str, seconds: float, barrier: Any, out: Any) -> None:
    """4 KiB ``write`` + ``fdatasync`` to a file of its own, in a loop: the device's floor."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"x" * (BARE_WRITE_BYTES - 1) + b"\n"
    lat = []
    barrier.wait()
    deadline = time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        if t >= deadline:
            break
        os.write(fd, block)
        os.fdatasync(fd)
        lat.append(time.perf_counter() - t)
    os.close(fd)
    out.put(lat)


def bare_fsync(d: Path, procs: int, seconds: float, *, keep_lats: bool = False) -> dict[str, Any]:
    """Latency of a bare 4 KiB write + fdatasync with ``procs`` concurrent processes (each its
    own file in ``d``), the baseline the append latencies are divided by (same run); every
    call's latency in seconds under ``lats`` when ``keep_lats``."""
    barrier = CTX.Barrier(procs + 1)
    out = CTX.Queue()
    ps = [
        CTX.Process(
            target=_bare_worker, args=(str(d / f"bare{i}"), seconds, barrier, out), daemon=True
        )
        for i in range(procs)
    ]
    for p in ps:
        p.start()
    barrier.wait()
    lats = [x for _ in ps for x in out.get()]
    for p in ps:
        p.join(30)
    return {
        "procs": procs,
        "calls": len(lats),
        "p50_ms": ms(pct(lats, 50)),
        "p99_ms": ms(pct(lats, 99)),
        **({"lats": lats} if keep_lats else {}),
    }


def run(sizes, log) -> dict[str, Any]:
    probes = ack_probes.run(sizes, log)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    systems = []
    for wcls in ALL:
        ok, why = wcls.available()
        if ok:
            systems.append(wcls)
        else:
            skipped[wcls.name] = why
    round_ratios: dict[str, list[float | None]] = {}
    bare_lats: dict[int, list[float]] = {p: [] for p in PROCS}
    for batch in BATCHES:
        for procs in PROCS:
            per: dict[str, list[dict[str, Any]]] = {w.name: [] for w in systems}
            # The bare write+fdatasync floor takes its turn in the rotation too: 1 process in
            # every cell (the 16-producer p99 goal divides by it), ``procs`` processes as well.
            jobs: list[Any] = sorted({1, procs}) + systems
            for rnd in range(ROUNDS):
                for job in jobs[rnd % len(jobs) :] + jobs[: rnd % len(jobs)]:
                    if isinstance(job, int):
                        with tempdir("ingest-bare") as d:
                            bare_lats[job] += bare_fsync(
                                d, job, sizes.ingest_seconds / ROUNDS, keep_lats=True
                            )["lats"]
                        continue
                    with tempdir(f"ingest-{job.name}") as d:
                        job.prepare(d)
                        per[job.name].append(
                            run_producers(
                                job.name,
                                d,
                                procs,
                                batch,
                                sizes.ingest_seconds / ROUNDS,
                                keep_lats=True,
                            )
                        )
            alts = [n for n in per if not n.startswith("quill")]
            round_ratios[f"batch{batch}_procs{procs}"] = [
                ratio(per["quill"][i]["msgs_per_s"], max(per[n][i]["msgs_per_s"] for n in alts))
                if "quill" in per and alts
                else None
                for i in range(ROUNDS)
            ]
            for wcls in systems:
                r = pool_rounds(per[wcls.name])
                row = {
                    "system": wcls.name,
                    "label": wcls.label,
                    "batch": batch,
                    "procs": procs,
                    **r,
                }
                log(
                    f"§1 {wcls.name:11s} batch={batch:<2d} procs={procs:<2d} "
                    f"{r['msgs_per_s']:>9.1f} msg/s "
                    f"p50={r['p50_ms']} ms p99={r['p99_ms']} ms errors={r['errors']} "
                    f"rounds={r['rounds_msgs_per_s']}"
                )
                rows.append(row)
            log(
                f"§1 batch={batch} procs={procs}: Quill ÷ best alternative per round "
                f"{round_ratios[f'batch{batch}_procs{procs}']}"
            )
    bare = {
        p: {"procs": p, "calls": len(x), "p50_ms": ms(pct(x, 50)), "p99_ms": ms(pct(x, 99))}
        for p, x in bare_lats.items()
    }
    for p in PROCS:
        log(
            f"§1 bare 4 KiB write+fdatasync, {p:2d} process(es), "
            "pooled over its interleaved rounds: "
            f"p50 {bare[p]['p50_ms']} ms p99 {bare[p]['p99_ms']} ms ({bare[p]['calls']} calls)"
        )
    # ratios: Quill / each alternative, same batch and procs
    quill = {(r["batch"], r["procs"]): r for r in rows if r["system"] == "quill"}
    for r in rows:
        q = quill.get((r["batch"], r["procs"]))
        r["quill_speedup"] = (
            ratio(q["msgs_per_s"], r["msgs_per_s"]) if q and r["system"] != "quill" else None
        )
        if r["system"].startswith("quill"):  # append latency over the device's floor, same run
            r["p99_over_bare_1"] = ratio(r["p99_ms"], bare[1]["p99_ms"])
            r["p99_over_bare_same_procs"] = ratio(r["p99_ms"], bare[r["procs"]]["p99_ms"])
    best_alt = {}
    for key in quill:
        alts = [
            r
            for r in rows
            if not r["system"].startswith("quill")
            and (r["batch"], r["procs"]) == key
            and r["msgs"] > 0
        ]
        if alts:
            b = max(alts, key=lambda r: r["msgs_per_s"])
            best_alt[f"batch{key[0]}_procs{key[1]}"] = {
                "system": b["system"],
                "msgs_per_s": b["msgs_per_s"],
                "quill_msgs_per_s": quill[key]["msgs_per_s"],
                "ratio": ratio(quill[key]["msgs_per_s"], b["msgs_per_s"]),
            }
    for key, b in best_alt.items():
        b["round_ratios"] = round_ratios.get(key)
    return {
        "rows": rows,
        "skipped": skipped,
        "best_alternative": best_alt,
        "bare_fsync": bare,
        "probes": probes,
        "rounds": ROUNDS,
    }
