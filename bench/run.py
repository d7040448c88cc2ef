"""Run Quill's benchmark suite: ``python -m bench.run [--quick|--full] [--out PATH]``.

Sections (docs/benchmarks.md): §1 acknowledged ingest vs alternatives, §1b paced producers, §2
searchable ingest vs raw ceilings, §3 search latency, §4 producer latency under maintenance, §5
scale. Prints rich tables and the target verdicts, and writes everything (with machine and
versions) as JSON. The goal table is bench/goals.py, the rich tables bench/tables.py.
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

from . import ingest, maintenance, paced, scale, search, searchable
from .common import PROFILES, machine, tempdir
from .goals import targets
from .messages import real_stats
from .tables import tables

SECTIONS = ("ingest", "paced", "searchable", "scale", "search", "maintenance")


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
