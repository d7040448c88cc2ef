"""Writer memory for one large record: ``python -m bench.record_memory [--mb 64] [--kind text]``.

Producers refuse a record over ``[spool] max_record_bytes`` (default 64 MiB) before the ack;
this measures what the writer's memory costs for a record *at* that limit, so the limit can
be stated as "the writer peaks at about K times the record's size". For each case a fresh
data dir gets one ``messages.append`` record (appended with the producer's own limit check),
then a fresh child process runs the production writer (``Writer.until_idle``: decode, apply,
commit, FTS index slices) and reports its RSS before draining and its peak (``ru_maxrss``):

* ``baseline`` - a 1 KiB message: the writer's fixed cost;
* ``limit``    - a message of ``--mb`` MiB (the record just under the limit).

``--kind text`` fills the content with words (FTS tokenizes them: the realistic case);
``--kind blob`` with one long base64-like token (a pasted file). The ratio printed is
``(limit peak - baseline peak) / record bytes``: the writer's memory per record byte. A report,
not a timed assertion (bench/RESULTS.md records the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import tempdir

#: The child: initialize the writer (RSS before), drain to the end, report the peak.
_CHILD = r"""
import json, resource, sys
from pathlib import Path
from quill import home
from quill.ops import logs
from quill.workers.writer import Writer

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

cfg = home.load(Path(sys.argv[1]))
cfg.ensure_dirs()
writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
import quill.store, quill.workers.drain  # noqa: F401  (imports counted in the "before")
before = rss_kb()
totals = writer.until_idle()
print(json.dumps({"before_kb": before,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "applied": totals.get("applied"), "rejected": totals.get("rejected")}))
"""


def _content(size: int, kind: str, seed: int = 7) -> str:
    rnd = random.Random(seed)
    if kind == "blob":
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        chunk = "".join(rnd.choice(alphabet) for _ in range(1 << 16))
        return (chunk * (size // len(chunk) + 1))[:size]
    words = [
        "".join(rnd.choice("etaoinshrdlucmfwypvbgkqjxz") for _ in range(rnd.randint(2, 11)))
        for _ in range(50_000)
    ]
    out, n = [], 0
    while n < size:
        w = rnd.choice(words)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def measure(size: int, kind: str, limit: int) -> dict[str, Any]:
    """One case in a fresh data dir: the record's bytes and the writer child's RSS figures."""
    from quill.spool import Spool

    with tempdir("record-memory") as root:
        home_dir = root / "home"
        home_dir.mkdir()
        (home_dir / "config.toml").write_text(f"[spool]\nmax_record_bytes = {limit}\n")
        with Spool(home_dir / "spool", max_record_bytes=limit) as sp:
            content = _content(size, kind)
            sp.append(
                "messages.append",
                {"session_id": "big", "messages": [{"role": "user", "content": content}]},
            )
            del content
        record = sum(p.stat().st_size for p in (home_dir / "spool").glob("*.jsonl"))
        env = {**os.environ, "QUILL_HOME": str(home_dir)}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(home_dir)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        return {"record_bytes": record, **figures}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=64.0, help="record size in MiB (the limit)")
    ap.add_argument("--kind", choices=("text", "blob"), default="text")
    args = ap.parse_args(argv)
    size = int(args.mb * (1 << 20))
    limit = size + 4096  # the envelope (ids, crc) fits under the limit
    base = measure(1024, args.kind, limit)
    big = measure(size, args.kind, limit)
    per_byte = (big["peak_kb"] - base["peak_kb"]) * 1024 / big["record_bytes"]
    report = {
        "kind": args.kind,
        "baseline": base,
        "limit": big,
        "peak_ratio_vs_baseline": round(big["peak_kb"] / base["peak_kb"], 2),
        "extra_bytes_per_record_byte": round(per_byte, 2),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
