"""Run Quill's benchmark suite: ``python -m bench.run [--quick|--full] [--out PATH]``.

Sections (docs/benchmarks.md): §1 acknowledged ingest vs alternatives, §1b paced producers, §2
searchable ingest vs raw ceilings, §3 search latency, §4 producer latency under maintenance, §5
scale. Prints rich tables and the target verdicts, and writes everything (with machine and
versions) as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import ingest, maintenance, paced, scale, search, searchable
from .common import PROFILES, machine, ratio, tempdir
from .messages import real_stats
from .report import _f

SECTIONS = ("ingest", "paced", "searchable", "scale", "search", "maintenance")


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name, value, goal, ok, note=""):
        out.append(
            {
                "target": name,
                "measured": value,
                "goal": goal,
                "result": "n/a" if ok is None else ("PASS" if ok else "FAIL"),
                "note": note,
            }
        )

    ing = res.get("ingest") or {}
    for procs in ingest.PROCS:
        b = (ing.get("best_alternative") or {}).get(f"batch10_procs{procs}")
        add(
            f"ack ingest, batch 10, {procs} producer(s): Quill / best alternative",
            f"{b['ratio']}× (vs {b['system']})" if b else None,
            "≥ 2×",
            b["ratio"] >= 2 if b else None,
            f"per interleaved round: {b.get('round_ratios')}"
            if b and b.get("round_ratios")
            else "",
        )
    q16 = [r for r in ing.get("rows", []) if r["system"] == "quill" and r["procs"] == 16]
    bare = ing.get("bare_fsync") or {}
    if q16 and bare:
        w = max(q16, key=lambda r: r["p99_ms"])
        add(
            "append p99, 16 producers (worst batch) ÷ bare 4 KiB write+fdatasync p99, 1 process",
            f"{w['p99_over_bare_1']}× ({w['p99_ms']} vs {bare[1]['p99_ms']} ms)",
            "≤ 1.5×",
            w["p99_over_bare_1"] <= 1.5,
        )
        add(
            "append p99, 16 producers (worst batch) ÷ bare write+fdatasync p99, 16 processes",
            f"{w['p99_over_bare_same_procs']}× ({w['p99_ms']} vs {bare[16]['p99_ms']} ms)",
            "(context)",
            None,
        )
        # The floor against itself: 16 bare processes doing nothing but write+fdatasync, same
        # rounds. Above 1.5× here, no appender of 16 concurrent processes can meet the line above.
        floor = ratio(bare[16]["p99_ms"], bare[1]["p99_ms"])
        add(
            "the floor itself: bare write+fdatasync p99, 16 processes ÷ 1 process",
            f"{floor}× ({bare[16]['p99_ms']} vs {bare[1]['p99_ms']} ms)",
            "(context)",
            None,
            "the bound any 16-process appender starts from",
        )
    else:
        add("append p99, 16 producers ÷ bare fdatasync p99", None, "≤ 1.5×", None)
    pc = res.get("paced")
    if pc:
        add(
            f"append p99, {pc['procs']} paced producers "
            f"(1 call / {pc['interval_s'] * 1000:.0f} ms each) ÷ bare "
            "write+fdatasync p99 on the same schedule",
            f"{pc['quill_p99_over_bare']}× ({pc['quill']['p99_ms']} vs {pc['bare']['p99_ms']} ms)",
            "(context)",
            None,
        )
    s = (res.get("searchable") or {}).get("at500")
    add(
        "searchable ingest vs naive FTS writer (chunk 500)",
        f"{s['vs_naive']}×" if s else None,
        "≥ 2×",
        s["vs_naive"] >= 2 if s else None,
    )
    add(
        "searchable ingest ÷ raw FTS ceiling (chunk 500)",
        f"{s['vs_raw_fts']}×" if s else None,
        "≥ 1.5×",
        s["vs_raw_fts"] >= 1.5 if s else None,
    )
    srch = res.get("search") or []
    at1m = next((x for x in srch if x["messages"] >= 1_000_000), None)
    largest = max(srch, key=lambda x: x["messages"]) if srch else None
    if at1m:
        add(
            "newest-first search p95 at 1M",
            f"{at1m['newest_first_p95_ms']} ms",
            "< 10 ms",
            at1m["newest_first_p95_ms"] < 10,
        )
    else:
        add(
            "newest-first search p95 at 1M",
            f"{largest['newest_first_p95_ms']} ms at {largest['messages']:,}" if largest else None,
            "< 10 ms",
            None,
            "1M not run (use --full)",
        )
    if largest:
        v = largest["ranked_bounded_p95_ms"]
        add(
            "ranked search (Reader.search order=relevance, bounded bm25) "
            f"p95 at {largest['messages']:,}",
            f"{v} ms (FTS5 bm25(): {largest.get('fts5_bm25_bounded_p95_ms')} ms)",
            "< 20 ms",
            v < 20,
        )
    sc = (res.get("scale") or {}).get("sizes") or []
    if sc:
        rss = max(x["ingest"]["rss_peak_mb"] for x in sc)
        add(
            f"writer RSS peak (up to {sc[-1]['messages']:,} msgs)",
            f"{rss} MB",
            "< 200 MB",
            rss < 200,
        )
    m = (res.get("maintenance") or {}).get("quill")
    if m:
        v = m["VACUUM"]["p99_over_idle"]
        add(
            "producer p99 during VACUUM / idle",
            f"{v}× ({m['VACUUM']['p99_ms']} vs {m['idle']['p99_ms']} ms)",
            "≤ 2×",
            v is not None and v <= 2,
        )
    return out


def tables(res: dict[str, Any], console: Console) -> None:
    if res.get("ingest"):
        t = Table(title="§1 Acknowledged-durable ingest (real messages)")
        for c in (
            "system",
            "batch",
            "procs",
            "msgs/s",
            "p50 ms",
            "p99 ms",
            "CPU ms/call",
            "Quill ×",
            "p99 ÷ bare (1 proc)",
            "p99 ÷ bare (same procs)",
            "errors",
        ):
            t.add_column(c, justify="right" if c != "system" else "left")
        for r in res["ingest"]["rows"]:
            t.add_row(
                r["system"],
                str(r["batch"]),
                str(r["procs"]),
                _f(r["msgs_per_s"]),
                _f(r["p50_ms"]),
                _f(r["p99_ms"]),
                _f(r["cpu_ms_per_call"]),
                _f(r["quill_speedup"]),
                _f(r.get("p99_over_bare_1")),
                _f(r.get("p99_over_bare_same_procs")),
                str(r["errors"]),
            )
        console.print(t)
        for procs, b in (res["ingest"].get("bare_fsync") or {}).items():
            console.print(
                f"  bare 4 KiB write+fdatasync, {procs} process(es): "
                f"p50 {b['p50_ms']} ms, p99 {b['p99_ms']} ms"
            )
        for k, v in res["ingest"]["skipped"].items():
            console.print(f"  skipped {k}: {v}")
    if res.get("searchable"):
        s = res["searchable"]
        t = Table(
            title="§2 Searchable ingest, spool → committed + FTS-indexed "
            f"({s['messages']:,} real msgs)"
        )
        for c in ("chunk", "rows/txn", "Quill msgs/s", "raw FTS msgs/s", "Quill / raw"):
            t.add_column(c, justify="right")
        for e in s["sweep"]:
            t.add_row(
                str(e["chunk"]),
                str(e["effective_rows_per_txn"]),
                _f(e["quill"]["msgs_per_s"]),
                _f(e["raw_fts"]["msgs_per_s"]),
                _f(e["quill_vs_raw_fts"]),
            )
        console.print(t)
        a = s["at500"]
        console.print(
            f"  chunk 500: Quill {a['quill']:,.0f}/s · raw FTS {a['raw_fts']:,.0f}/s · "
            f"no-FTS ceiling {a['raw_nofts']:,.0f}/s · "
            f"naive FTS writer {a['naive']:,.0f}/s (Quill ×{a['vs_naive']})"
        )
    for sr in res.get("search") or []:
        t = Table(title=f"§3 Search at {sr['messages']:,} synthetic msgs (limit 20)")
        for c in (
            "query",
            "Quill p50 ms",
            "Quill p95 ms",
            "hits",
            "÷ bare FTS5 p95",
            "naive p50 ms",
            "naive / Quill",
        ):
            t.add_column(c, justify="right" if c != "query" else "left")
        for k, v in sr["quill"].items():
            if "p50_ms" not in v:
                continue
            nv = (sr.get("naive") or {}).get(k)
            t.add_row(
                k,
                _f(v["p50_ms"]),
                _f(v["p95_ms"]),
                str(v["hits"]),
                _f(v.get("over_bare_p95")),
                _f(nv["p50_ms"]) if nv else "–",
                _f((sr.get("naive_over_quill_p50") or {}).get(k)),
            )
        console.print(t)
        for key in [k for k in sr["quill"] if k.startswith(("stages", "cpu"))]:
            st = sr["quill"].get(key)
            if st:
                console.print(f"  {key} (ms): " + ", ".join(f"{k} {v}" for k, v in st.items()))
    if res.get("maintenance"):
        m = res["maintenance"]
        t = Table(
            title=f"§4 Producer latency under maintenance ({m['producers']} producers, batch 10, "
            f"{m['messages']:,}-msg store)"
        )
        for c in (
            "system",
            "phase",
            "seconds",
            "samples",
            "p50 ms",
            "p99 ms",
            "max ms",
            "p99 / idle",
            "bare fsync p99 ms",
        ):
            t.add_column(c, justify="right" if c not in ("system", "phase") else "left")
        for who in ("quill", "naive"):
            for ph in ("idle", "VACUUM", "FTS optimize", "TRUNCATE checkpoint"):
                r = m[who][ph]
                t.add_row(
                    who,
                    ph,
                    _f(r["seconds"]),
                    str(r["n"]),
                    _f(r["p50_ms"]),
                    _f(r["p99_ms"]),
                    _f(r["max_ms"]),
                    _f(r.get("p99_over_idle")),
                    _f(r.get("fsync_probe_p99_ms")),
                )
        console.print(t)
    if res.get("scale"):
        sc = res["scale"]
        t = Table(title="§5 Scale (synthetic messages)")
        for c in (
            "messages",
            "drain msgs/s",
            "writer RSS MB",
            "spool MiB",
            "db MiB",
            "rare p50 ms",
            "common p50 ms",
            "prune 10 % s",
            "VACUUM s",
        ):
            t.add_column(c, justify="right")
        for x in sc["sizes"]:
            q = x.get("search") or {}
            pv = x.get("prune_vacuum") or {}
            t.add_row(
                f"{x['messages']:,}",
                _f(x["ingest"]["msgs_per_s"]),
                _f(x["ingest"]["rss_peak_mb"]),
                _f(x["ingest"]["spool_bytes"] / 2**20),
                _f(x["ingest"]["db_bytes"] / 2**20),
                _f((q.get("rare word") or {}).get("p50_ms")),
                _f((q.get("common word") or {}).get("p50_ms")),
                _f(pv.get("prune_s")),
                _f(pv.get("vacuum_s")),
            )
        console.print(t)
        for k, g in (sc.get("growth") or {}).items():
            console.print(f"  {k}: exponent {g['exponent']} → {g['verdict']}")
    t = Table(title="Targets")
    for c in ("target", "measured", "goal", "result"):
        t.add_column(c)
    for x in res.get("targets", []):
        style = {"PASS": "green", "FAIL": "red"}.get(x["result"], "yellow")
        t.add_row(
            x["target"],
            _f(x["measured"]),
            x["goal"],
            f"[{style}]{x['result']}[/{style}]" + (f" ({x['note']})" if x["note"] else ""),
        )
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smoke run, ~1-2 minutes")
    g.add_argument("--full", action="store_true", help="1M-message scale (long)")
    ap.add_argument("--out", default="bench/out/results.json", help="JSON results file")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma list of {','.join(SECTIONS)}"
    )
    args = ap.parse_args(argv)
    sizes = PROFILES["quick" if args.quick else "full" if args.full else "default"]
    wanted = {s.strip() for s in args.sections.split(",") if s.strip()}
    console = Console() if sys.stdout.isatty() else Console(width=150)
    began = time.monotonic()

    def log(msg: str) -> None:
        console.print(f"[dim]{time.monotonic() - began:7.1f}s[/dim] {msg}", highlight=False)

    res: dict[str, Any] = {
        "profile": sizes.name,
        "sizes": sizes.__dict__,
        "machine": machine(),
        "real_messages": real_stats(),
        "errors": {},
    }
    log(f"profile {sizes.name}; real corpus {res['real_messages']}")

    def section(name: str, fn):
        if name not in wanted:
            return None
        try:
            return fn()
        except Exception:
            res["errors"][name] = traceback.format_exc()
            log(f"[red]section {name} failed[/red]:\n{res['errors'][name]}")
            return None

    res["ingest"] = section("ingest", lambda: ingest.run(sizes, log))
    res["paced"] = section("paced", lambda: paced.run(sizes, log))
    res["searchable"] = section("searchable", lambda: searchable.run(sizes, log))
    if wanted & {"scale", "search", "maintenance"}:
        with tempdir("stores") as work:
            stores: dict[int, Path] = {}
            sc: list[dict[str, Any]] = []

            def build_all():
                for n in sizes.scale_ns:
                    d = work / f"n{n}"
                    d.mkdir()
                    sc.append({"messages": n, "ingest": scale.build(n, d, log)})
                    stores[n] = d / "state.db"
                    import shutil

                    shutil.rmtree(d / "spool", ignore_errors=True)  # disk: keep only the store

            section("scale", build_all) if "scale" in wanted else build_all()
            search_ns = [n for n in stores if n >= 100_000] or [max(stores)]

            def do_search():
                out = []
                for n in stores:
                    r = (
                        search.run_one(n, stores[n], work, sizes, log)
                        if n in search_ns
                        else {
                            "messages": n,
                            "quill": search.quill_latencies(
                                stores[n], max(5, sizes.search_reps // 4)
                            ),
                        }
                    )
                    next(x for x in sc if x["messages"] == n)["search"] = r["quill"]
                    if n in search_ns:
                        out.append(r)
                return out

            res["search"] = section("search", do_search)
            maint_n = max(n for n in stores if n <= 100_000)
            res["maintenance"] = section(
                "maintenance", lambda: maintenance.run(stores[maint_n], maint_n, work, sizes, log)
            )

            def prune_all():
                for x in sc:
                    x["prune_vacuum"] = scale.prune_and_vacuum(stores[x["messages"]])
                    log(
                        f"§5 {x['messages']:>9,d}: prune {x['prune_vacuum']['prune_s']} s, "
                        f"VACUUM {x['prune_vacuum']['vacuum_s']} s"
                    )
                ns = [x["messages"] for x in sc]

                def col(f):
                    return [f(x) for x in sc]

                growth = {
                    "ingest rate (msgs/s; flat = total time linear)": scale.growth(
                        ns, col(lambda x: x["ingest"]["msgs_per_s"]), True
                    ),
                    "writer RSS": scale.growth(ns, col(lambda x: x["ingest"]["rss_peak_mb"]), True),
                    "rare-word search p50": scale.growth(
                        ns,
                        col(lambda x: (x.get("search") or {}).get("rare word", {}).get("p50_ms")),
                        True,
                    ),
                    "common-word search p50": scale.growth(
                        ns,
                        col(lambda x: (x.get("search") or {}).get("common word", {}).get("p50_ms")),
                        True,
                    ),
                    "prune 10 % time": scale.growth(
                        ns, col(lambda x: x["prune_vacuum"]["prune_s"]), False
                    ),
                    "VACUUM time": scale.growth(
                        ns, col(lambda x: x["prune_vacuum"]["vacuum_s"]), False
                    ),
                }
                return {"sizes": sc, "growth": growth}

            res["scale"] = section("scale", prune_all)
    res["targets"] = targets(res)
    res["elapsed_s"] = round(time.monotonic() - began, 1)
    tables(res, console)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    console.print(f"results: {out}  ({res['elapsed_s']} s)")
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
