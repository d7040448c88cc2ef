"""The 16-producer tail: ``python -m bench.producer_tail [--procs 16] [--seconds S]
[--rounds R] [--baseline REV]``.

In each round, in turn: ``procs`` bare 4 KiB ``write`` + ``fdatasync`` processes (the floor,
``bench.ingest.bare_fsync``), ``procs`` closed-loop producers appending 10 real messages per
call through the raw spool (``Spool.append``, §1's ``quill`` system) and through
``quill.Client.append`` (precheck, then the spool: what an agent calls), each for ``seconds``;
with ``--baseline REV`` the same two producer kinds of git revision ``REV`` take their turn
in the same round (a subprocess importing ``quill`` from an exported copy of ``REV``). Latency
percentiles pool every call of every round; ``cpu ms/call`` is the producers' own CPU
(``process_time``, harness included) per call. Printed: p50/p99 and each p99 ÷ the floor's p99.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .alternatives import BY_NAME, QuillSpool
from .common import ms, pct, revision_tree, run_json, tempdir
from .ingest import bare_fsync, run_producers


class QuillClient(QuillSpool):
    """``quill.Client(home).append``: precheck, then one fsync'd spool append."""

    name, label = "quill-client", "quill.Client.append"

    def open(self, path: Path, proc: int) -> None:
        from quill import Client

        self.client = Client(path / "home")

    def write(self, sid, msgs):
        self.client.append(sid, msgs)

    def close(self):
        pass


BY_NAME.setdefault(QuillClient.name, QuillClient)
KINDS = ("quill", "quill-client")


def one(kind: str, procs: int, seconds: float) -> dict[str, Any]:
    """One run of ``procs`` producers of ``kind`` in a fresh directory (every latency kept)."""
    with tempdir("tail") as d:
        (d / "home").mkdir()
        (d / "spool").mkdir()
        return run_producers(kind, d, procs, 10, seconds, keep_lats=True)


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    lats = [x for r in runs for x in r["lats"]]
    calls = sum(r["calls"] for r in runs)
    return {
        "calls": calls,
        "p50_ms": ms(pct(lats, 50)),
        "p99_ms": ms(pct(lats, 99)),
        "cpu_ms_per_call": round(1000 * sum(r["cpu_s"] for r in runs) / calls, 3)
        if calls
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.producer_tail")
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=3.0, help="per system per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="REV")
    ap.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        r = one(args.one, args.procs, args.seconds)
        print(json.dumps({k: r[k] for k in ("lats", "calls", "cpu_s")}))
        return 0
    systems = [("floor", None)] + [(k, None) for k in KINDS]
    runs: dict[str, list[dict[str, Any]]] = {}
    with revision_tree(args.baseline) as tree:
        if args.baseline:
            systems += [(f"{k} @{args.baseline}", k) for k in KINDS]
        for rnd in range(args.rounds):
            order = systems[rnd % len(systems) :] + systems[: rnd % len(systems)]
            for label, base_kind in order:
                if label == "floor":
                    with tempdir("tail-floor") as d:
                        r = bare_fsync(d, args.procs, args.seconds, keep_lats=True)
                    r["cpu_s"] = 0.0
                elif base_kind:
                    r = run_json(
                        "bench.producer_tail",
                        tree,
                        "--one",
                        base_kind,
                        "--procs",
                        str(args.procs),
                        "--seconds",
                        str(args.seconds),
                    )
                else:
                    r = one(label, args.procs, args.seconds)
                runs.setdefault(label, []).append(r)
                print(f"round {rnd + 1}: {label} {_summary([r])}", file=sys.stderr)
    floor = _summary(runs["floor"])
    print(f"{args.procs} closed-loop producers, 10 real messages per call, {args.rounds} rounds")
    print("| system | calls | p50 ms | p99 ms | p99 ÷ floor p99 | cpu ms/call |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, _ in systems:
        s = _summary(runs[label])
        cpu = "—" if label == "floor" else s["cpu_ms_per_call"]
        ratio = s["p99_ms"] / floor["p99_ms"]
        print(f"| {label} | {s['calls']} | {s['p50_ms']} | {s['p99_ms']} | {ratio:.2f}× | {cpu} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
