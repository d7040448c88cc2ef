"""Cost of content-derived import session ids: ``python -m bench.import_ids --base DIR
[--lines 3000] [--rounds 3]``.

``DIR`` holds a checkout of the version to compare against as ``DIR/quill`` (e.g.
``git archive main | tar -x -C DIR/quill``). A ShareGPT file of ``--lines`` distinct
conversations is built from the corpus (the Hermes samples, each made unique), then, in fresh
child processes, interleaved per round (ratios are new / base of the same round):

* ``first``   - ``import_file`` into an empty spool, no store (ids hashed, no store look-up);
* ``reimport`` - re-import against the store that import made (nothing new; the new version
  also looks up each session's old file-name id);
* ``legacy``  - re-import against a store the *base* version made (old ids): the new version
  compares each conversation with the stored one before keeping the old id.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .common import tempdir

REPO = Path(__file__).resolve().parents[1]
CORPUS = next(
    (p / "shared" / "corpus" for p in REPO.parents if (p / "shared" / "corpus").is_dir()), None
)

CHILD = r"""
import sys, time
from pathlib import Path
from quill.ops.transfer.import_spool import import_file
from quill.spool import START, Spool, SpoolReader
from quill.store import Reader, apply_chunk, open_writer

mode, root, src = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
spool = Spool(root / "spool")
if mode == "first":
    conn = open_writer(root / "state.db")
    t = time.perf_counter(); import_file(spool, src, None); t = time.perf_counter() - t
    entries = list(SpoolReader(root / "spool").read(START, max_bytes=1 << 40))
    apply_chunk(conn, entries, lambda *a: None)
    conn.close()
    print(t)
else:
    r = Reader(root / "state.db")
    t = time.perf_counter(); rep = import_file(spool, src, r); t = time.perf_counter() - t
    assert rep.new == 0, rep.new
    r.close()
    print(t)
spool.close()
"""


def child(checkout: Path, *args: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def build(path: Path, lines: int) -> None:
    samples = [
        json.loads(x)
        for x in (CORPUS / "sharegpt" / "hermeswith__trajectory_samples.jsonl").open()
        if x.strip()
    ]
    with path.open("w") as fh:
        for i in range(lines):
            rec = json.loads(json.dumps(samples[i % len(samples)]))
            rec["conversations"][1]["value"] += f" (variant {i})"
            fh.write(json.dumps(rec) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempdir("import-ids") as d:
        d = Path(d)
        new = (
            d / "new-checkout"
        )  # this checkout, importable as ``quill`` whatever its folder is named
        new.mkdir()
        (new / "quill").symlink_to(REPO)
        src = d / "traj.jsonl"
        build(src, args.lines)
        print(
            f"{args.lines} ShareGPT conversations, {src.stat().st_size / 1e6:.1f} MB; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        print("round  first base/new (s)  reimport base/new (s)  legacy base/new (s)")
        for n in range(args.rounds):
            row = {}
            old_store = d / f"old{n}"
            old_store.mkdir()
            child(args.base, "first", str(old_store), str(src))
            for name, co in (("base", args.base), ("new", new)):
                root = d / f"{name}{n}"
                root.mkdir()
                row[name] = (
                    child(co, "first", str(root), str(src)),
                    child(co, "reimport", str(root), str(src)),
                    child(co, "reimport", str(old_store), str(src)),
                )
            b, w = row["base"], row["new"]
            print(
                f"{n + 1:>5}  {b[0]:.2f}/{w[0]:.2f} ({w[0] / b[0]:.2f}x)  "
                f"{b[1]:.2f}/{w[1]:.2f} ({w[1] / b[1]:.2f}x)"
                f"  {b[2]:.2f}/{w[2]:.2f} ({w[2] / b[2]:.2f}x)"
            )


if __name__ == "__main__":
    main()
