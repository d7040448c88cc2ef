"""Importer memory on a large transcript: ``python -m bench.importer_memory [--mb 100]
[--no-drain]``.

An importer that collects a transcript in memory peaks at several times the file's size. This
benchmark builds a ~``--mb`` MB Claude Code transcript from the real corpus
records (every Claude Code JSONL file of ../shared/corpus, repeated with ids made unique per
repetition, so its 2 screenshots appear once per repetition), then measures, each in a fresh
child process (peak RSS = the child's own ``ru_maxrss``):

* ``floor``     - reading and JSON-decoding every line once, keeping nothing (the least any
                  importer must do);
* ``collect``   - ``importers.parse_file``: the whole transcript parsed into memory (what
                  the importer did before it streamed);
* ``import``    - ``quill import`` itself: streaming into the spool (the number under test;
                  goal < 200 MB);

and, unless ``--no-drain``, the store the writer builds from it (bytes vs transcript bytes,
distinct blobs). Ratios are against the floor measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import tempdir

CORPUS = next(
    (
        p / "shared" / "corpus"
        for p in Path(__file__).resolve().parents
        if (p / "shared" / "corpus").is_dir()
    ),
    None,
)
ID_KEYS = frozenset(
    {
        "uuid",
        "parentUuid",
        "logicalParentUuid",
        "leafUuid",
        "tool_use_id",
        "messageId",
        "id",
        "toolUseID",
        "parentToolUseID",
        "agentId",
        "sourceToolAssistantUUID",
        "requestId",
    }
)
GOAL_MB = 200


def _suffix(value: Any, k: int) -> Any:
    if isinstance(value, dict):
        return {
            key: (f"{v}-{k}" if key in ID_KEYS and isinstance(v, str) else _suffix(v, k))
            for key, v in value.items()
        }
    if isinstance(value, list):
        return [_suffix(v, k) for v in value]
    return value


def build_transcript(out: Path, target_bytes: int) -> dict[str, int]:
    """Write a ~``target_bytes`` Claude Code JSONL session made of real corpus records."""
    sources = sorted((CORPUS / "claude-code").glob("*.jsonl"))
    records = [
        json.loads(line)
        for src in sources
        for line in src.read_text(encoding="utf-8").splitlines()
        if line.strip()
        and line.lstrip().startswith("{")
        and line.count('{"parentUuid"') <= 1
        and '"type":"summary"' not in line.replace(" ", "")
    ]
    written = reps = lines = 0
    last: str | None = None
    with open(out, "w", encoding="utf-8") as fh:
        while written < target_bytes:
            for rec in records:
                rec = _suffix(rec, reps)
                rec["sessionId"] = "bench-session"
                if rec.get("uuid") and not rec.get("isSidechain"):
                    if rec.get("parentUuid") is None and last is not None:
                        rec["parentUuid"] = last  # one long conversation, not a forest
                    last = rec["uuid"]
                line = json.dumps(rec, ensure_ascii=False) + "\n"
                fh.write(line)
                written += len(line.encode("utf-8"))
                lines += 1
            reps += 1
    return {"bytes": written, "lines": lines, "repetitions": reps}


_FLOOR = """
import json, resource, sys
n = 0
with open(sys.argv[1], "rb") as fh:
    for raw in fh:
        json.loads(raw); n += 1
print(json.dumps({"records": n, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""
_COLLECT = """
import json, resource, sys
from quill.ops.importers import parse_file
pf = parse_file(sys.argv[1])
n = sum(len(s.messages) for s in pf.sessions)
print(json.dumps({"messages": n, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""
_IMPORT = """
import json, resource, sys
from quill.ops.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"exit": code, "peak_kb": peak_kb}), file=sys.stderr)
"""


def _child(
    code: str, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    elapsed = time.perf_counter() - t0
    stream = proc.stderr if code is _IMPORT else proc.stdout
    last = [line for line in stream.splitlines() if line.startswith("{")][-1]
    return json.loads(last), elapsed, proc.stdout


def run(mb: int, drain: bool) -> dict[str, Any]:
    """Build the transcript, measure the three processes (and the drained store)."""
    if CORPUS is None:
        raise SystemExit("bench.importer_memory needs ../shared/corpus")
    with tempdir("quill-import-mem") as tmp:
        path = tmp / "big-session.jsonl"
        built = build_transcript(path, mb << 20)
        floor, t_floor, _ = _child(_FLOOR, str(path))
        collect, t_collect, _ = _child(_COLLECT, str(path))
        home = tmp / "home"
        imp, t_import, out = _child(
            _IMPORT, "import", str(path), "--json", env={"QUILL_HOME": str(home)}
        )
        report = json.loads(out)[0]
        res: dict[str, Any] = {
            "transcript": built,
            "messages": report["messages"],
            "new": report["new"],
            "peak_mb": {
                k: round(v["peak_kb"] / 1024, 1)
                for k, v in (("floor", floor), ("collect", collect), ("import", imp))
            },
            "seconds": {
                "floor": round(t_floor, 2),
                "collect": round(t_collect, 2),
                "import": round(t_import, 2),
            },
            "goal_mb": GOAL_MB,
        }
        res["ratio_vs_floor"] = {
            k: round(v / res["peak_mb"]["floor"], 2) for k, v in res["peak_mb"].items()
        }
        res["import_under_goal"] = res["peak_mb"]["import"] < GOAL_MB
        if drain:
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from quill.ops.cli import main; main()",
                    "run",
                    "--until-idle",
                    "--timeout",
                    "1800",
                ],
                env={**os.environ, "QUILL_HOME": str(home)},
                capture_output=True,
                check=True,
            )
            res["seconds"]["drain"] = round(time.perf_counter() - t0, 1)
            from quill.store import Reader
            from quill.store.apply import blobs

            with Reader(home / "state.db") as r:
                res["store"] = {"messages": r.figures()["messages"], **blobs.stats(r.conn)}
            db_bytes = sum(f.stat().st_size for f in home.glob("state.db*"))
            res["store"]["db_bytes"] = db_bytes
            res["store"]["db_vs_transcript"] = round(db_bytes / built["bytes"], 2)
        return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="transcript size in MiB (default 100)")
    ap.add_argument("--no-drain", action="store_true", help="skip draining into a store")
    args = ap.parse_args()
    res = run(args.mb, not args.no_drain)
    print(json.dumps(res, indent=2))
    verdict = "PASS" if res["import_under_goal"] else "FAIL"
    print(
        f"import peak RSS {res['peak_mb']['import']} MB "
        f"on a {res['transcript']['bytes'] / 2**20:.0f} MiB "
        f"transcript (goal < {GOAL_MB} MB): {verdict}; floor {res['peak_mb']['floor']} MB "
        f"(import {res['ratio_vs_floor']['import']}× floor, "
        f"collect-all {res['ratio_vs_floor']['collect']}× floor)"
    )


if __name__ == "__main__":
    main()
