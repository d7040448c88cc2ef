"""The writer's cost of OTLP exports, in order and out of order:
``python -m bench.otlp_drain [--conversations 20] [--turns 8] [--rounds 3] [--baseline REV]
[--json]``.

The same SDK spans (``bench.otlp.conversation_spans``: chat spans each carrying the history
so far) delivered two ways: ``whole``, every conversation in one export, and ``reversed``,
each span in an export of its own, the last first (each chat span's history arrives before
the spans that first carry it, so the store re-places and re-times it as they come:
store/apply/placed.py). Each export is mapped in-process by the tree's own OTLP mapper
(``otlp_map``: spans → ops, as ``POST /v1/traces`` does, without HTTP), appended to a fresh
spool and drained by the production writer (``Writer.until_idle``) in a child process.
Reported per case: the writer's CPU seconds (median of ``rounds``; CPU, not wall time, so
machine load matters less), the ops and the rows stored. ``--baseline REV``: the same bodies
drained by git revision ``REV`` in the same run, rounds interleaved; ratios this tree ÷ REV.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _child(bodies_path: str) -> dict[str, Any]:
    """Run in a child process whose ``quill`` is the tree measured: map, spool, drain."""
    import apsw
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from quill import home
    from quill.ops import logs
    from quill.ops.service import otlp_map
    from quill.spool import Spool
    from quill.workers.writer import Writer

    with open(bodies_path, "rb") as f:
        bodies = pickle.load(f)
    root = Path(tempfile.mkdtemp(prefix="quill-bench-otlp-drain-")) / "home"
    root.mkdir()
    cfg = home.load(root)
    cfg.ensure_dirs()
    spool = Spool(root / "spool")
    ops = 0
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        chains: dict = {}
        spans = [s for s in otlp_map.spans_of(request) if s.genai]
        groups = [otlp_map.span_ops(s, chains) for s in spans]
        for op, data, batch in otlp_map.collapse(groups, 1 << 20):
            spool.append(op, data, batch_id=batch)
            ops += 1
    spool.close()
    started = time.process_time()
    Writer(cfg, logs.configure(cfg.logs_dir, "writer")).until_idle()
    cpu = time.process_time() - started
    conn = apsw.Connection(str(root / "state.db"))
    rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    conn.close()
    return {"cpu_s": cpu, "ops": ops, "rows": rows, "quill": os.path.dirname(otlp_map.__file__)}


def _bodies(conversations: int, turns: int, case: str) -> list[bytes]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from .otlp import conversation_spans

    spans = [s for _ in range(conversations) for s in conversation_spans(turns)[0]]
    if case == "whole":
        return [encode_spans(spans).SerializeToString()]
    spans.sort(key=lambda s: s.start_time, reverse=True)
    return [encode_spans([s]).SerializeToString() for s in spans]


def _drain(bodies_path: Path, tree: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(bodies_path)],
        env=env,
        cwd=tempfile.gettempdir(),  # not the repository: ``quill`` is the tree measured
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if tree:
        assert got["quill"].startswith(tree), got["quill"]
    return got


def run(
    conversations: int = 20, turns: int = 8, rounds: int = 3, baseline: str | None = None
) -> dict[str, Any]:
    """Per case (``whole``, ``reversed``): median writer CPU seconds, ops and rows of this
    tree (and of ``baseline``, with the ratio)."""
    from statistics import median

    from .common import ratio, revision_tree, tempdir

    out: dict[str, Any] = {"conversations": conversations, "turns": turns, "rounds": rounds}
    with tempdir("otlp-drain") as tmp, revision_tree(baseline) as base_tree:
        for case in ("whole", "reversed"):
            path = tmp / f"{case}.pkl"
            path.write_bytes(pickle.dumps(_bodies(conversations, turns, case)))
            trees = {"this": None, **({"baseline": base_tree} if baseline else {})}
            cpu: dict[str, list[float]] = {name: [] for name in trees}
            last: dict[str, dict] = {}
            for _ in range(rounds):
                for name, tree in trees.items():
                    last[name] = _drain(path, tree)
                    cpu[name].append(last[name]["cpu_s"])
            result = {
                name: {
                    "cpu_s": round(median(cpu[name]), 3),
                    "ops": last[name]["ops"],
                    "rows": last[name]["rows"],
                }
                for name in trees
            }
            if baseline:
                result["cpu_ratio"] = ratio(result["this"]["cpu_s"], result["baseline"]["cpu_s"])
            out[case] = result
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2])))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline", default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    res = run(a.conversations, a.turns, a.rounds, a.baseline)
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(
        f"{a.conversations} conversations x {a.turns} turns, median of {a.rounds}, load "
        f"{os.getloadavg()[0]:.1f}"
    )
    for case in ("whole", "reversed"):
        r = res[case]
        line = f"{case:9} this: {r['this']['cpu_s']} s CPU, {r['this']['ops']} ops, "
        line += f"{r['this']['rows']} rows"
        if "baseline" in r:
            line += f"; baseline: {r['baseline']['cpu_s']} s ({r['baseline']['rows']} rows)"
            line += f"; ratio {r['cpu_ratio']}"
        print(line)


if __name__ == "__main__":
    main()
