"""The analysis and the table of ``bench.ryw_stages``: each call's stages from the client's and
the writer's marks (``analyse``), medians of rounds per figure and the side-by-side table of
revisions (``report``). Times in seconds inside, printed in ms."""

from __future__ import annotations

import json
import statistics

from .common import pct

#: ``(stage, the mark it starts at, the mark it ends at)``, in the order of one call; the
#: marks are named in ``bench.ryw_stages`` (``c_``: the client's, ``w_``: the writer's).
STAGES = (
    ("append", "c_start", "c_written"),
    ("fdatasync", "c_written", "c_synced"),
    ("ring writer", "c_synced", "c_rang"),
    ("writer wake", "c_rang", "w_wake"),
    ("to read", "w_wake", "w_step"),
    ("chunk read", "w_step", "w_read"),
    ("apply", "w_read", "w_precommit"),
    ("commit", "w_precommit", "w_committed"),
    ("ring waiters", "w_committed", "w_rung"),
    ("client wake", "w_rung", "c_woken"),
    ("client read", "c_woken", "c_found"),
    ("return", "c_found", "c_done"),
)


def analyse(client: list, writer: list, calls: int) -> dict:
    """Per-stage seconds of each call from the client's and the writer's marks."""
    writer = sorted(writer, key=lambda m: m[1])
    spans = []
    start = None
    for name, t in client:
        if name == "c_start":
            start, ev = t, {"c_start": t}
        elif start is not None:
            ev.setdefault(name, t) if name != "c_found" else ev.__setitem__(name, t)
            if name == "c_woken":
                ev["wakes"] = ev.get("wakes", 0) + 1
            if name == "c_done":
                spans.append(ev)
                start = None
    per_stage: dict[str, list[float]] = {s[0]: [] for s in STAGES}
    totals, missing_wake, tails = [], 0, []
    for ev in spans:
        lo, hi = ev["c_written"], ev["c_done"]
        mine = [(n, t) for n, t in writer if lo <= t <= hi]
        if "c_found" not in ev and "c_woken" in ev:
            ev["c_found"] = ev["c_woken"]  # answered by the ring's note: no look after it
        read = next((t for n, t in mine if n == "w_read"), None)
        if read is None:
            continue
        ev["w_read"] = read
        for n, t in mine:  # the writer marks of this call's chunk (the first one after it)
            if n in ("w_step", "w_precommit", "w_committed", "w_rung") and n not in ev:
                if n == "w_step" or t >= read:
                    ev[n] = t
        wakes = [t for n, t in mine if n == "w_wake" and t <= ev.get("w_step", read)]
        if wakes:
            ev["w_wake"] = wakes[-1]
        else:
            missing_wake += 1
            ev["w_wake"] = ev.get("w_step", read)  # awake already: no wake stage
        total = (hi - ev["c_start"]) / 1e9
        totals.append(total)
        for stage, a, b in STAGES:
            if a in ev and b in ev:
                per_stage[stage].append(max(ev[b] - ev[a], 0) / 1e9)
        side = {n[2:-1] for n, t in mine if n.endswith("0")}
        if any(n == "w_gc_start" for n, t in mine):
            side.add("writer gc")
        if any(n == "c_gc_start" and ev["c_start"] <= t <= hi for n, t in client):
            side.add("client gc")
        spent = {st: ev[b] - ev[a] for st, a, b in STAGES if a in ev and b in ev}
        side.add("longest: " + max(spent, key=spent.get))
        tails.append((total, side, ev.get("wakes", 0)))
    tails.sort(reverse=True)
    slow = tails[: max(1, len(tails) // 10)]
    causes: dict[str, int] = {}
    for _, side, wakes in slow:
        for s in side | ({"second client wake"} if wakes > 1 else set()):
            causes[s] = causes.get(s, 0) + 1
    return {
        "calls": len(totals),
        "total": _stats(totals),
        "stages": {k: _stats(v) for k, v in per_stage.items() if v},
        "writer_awake_already": missing_wake,
        "client_wakes_per_call": statistics.fmean(e.get("wakes", 0) for e in spans),
        "slowest_tenth": {"n": len(slow), "min_ms": slow[-1][0] * 1e3, "overlapping": causes},
    }


def _stats(v: list[float]) -> dict[str, float]:
    return {"p50": pct(v, 50), "mean": statistics.fmean(v), "n": len(v)}


def _median(rounds: list[dict]) -> dict:
    """Per figure, the median over rounds (stages, totals, CPU, counts per call, floors)."""

    def med(get):
        vals = [get(r) for r in rounds]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    first = rounds[0]
    out = {
        "total": {f: med(lambda r, f=f: r["total"][f]) for f in ("p50", "mean")},
        "stages": {
            k: {f: med(lambda r, k=k, f=f: r["stages"].get(k, {}).get(f)) for f in ("p50", "mean")}
            for k in first["stages"]
        },
        "floor": {
            k: {f: med(lambda r, k=k, f=f: r["floor"][k][f]) for f in ("p50", "mean")}
            for k in first["floor"]
        },
    }
    for k in ("client_cpu_ms_per_call", "writer_cpu_ms_per_call", "client_wakes_per_call"):
        out[k] = med(lambda r, k=k: r[k])
    out["awake"] = med(lambda r: r["writer_awake_already"] / r["calls"])
    names = {n for r in rounds for n in r["counts"]}
    out["per_call"] = {n: med(lambda r, n=n: r["counts"].get(n, 0) / r["calls"]) for n in names}
    causes: dict[str, int] = {}
    for r in rounds:
        for c, n in r["slowest_tenth"]["overlapping"].items():
            causes[c] = causes.get(c, 0) + n
    out["slowest"] = causes
    return out


def report(runs: dict[str, list[dict]]) -> None:
    """Print medians of rounds per label side by side, ms."""
    meds = {label: _median(rounds) for label, rounds in runs.items() if rounds}
    labels = list(meds)
    head = "".join(f"{label[:22]:>24}" for label in labels)
    print(f"{'(p50 / mean, ms)':<22}{head}")

    def row(name, get):
        cells = []
        for label in labels:
            v = get(meds[label])
            cells.append(f"{v['p50'] * 1e3:10.3f} /{v['mean'] * 1e3:9.3f}" if v else " " * 24)
        print(f"{name:<22}{''.join(f'{c:>24}' for c in cells)}")

    row("add_items", lambda m: m["total"])
    for stage, *_ in STAGES:
        row(f"  {stage}", lambda m, s=stage: m["stages"].get(s))
    for name in dict.fromkeys(n for m in meds.values() for n in m["floor"]):
        row(f"floor: {name}", lambda m, n=name: m["floor"].get(n))
    for k in ("client_cpu_ms_per_call", "writer_cpu_ms_per_call", "client_wakes_per_call"):
        print(f"{k:<22}" + "".join(f"{meds[label][k]:>24.2f}" for label in labels))
    print(f"{'writer awake already':<22}" + "".join(f"{meds[x]['awake']:>24.2f}" for x in labels))
    names = sorted({n for m in meds.values() for n in m["per_call"]})
    for n in names:
        print(f"{n[:22]:<22}" + "".join(f"{meds[x]['per_call'].get(n, 0):>24.2f}" for x in labels))
    for label in labels:
        print(f"slowest tenth, {label}: {json.dumps(meds[label]['slowest'])}")
