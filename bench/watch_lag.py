"""Live capture: how long from a line an agent writes to that message being searchable, and
what the watcher costs while nothing changes.

A real fleet (``quill run``) watches a temp folder; this process appends a real Claude Code
transcript (the shared corpus) line by line, ``--interval`` seconds apart, as the agent does.
For every user/assistant line the clock runs from the write (flushed) until the store holds
the message *and* the search index covers it (``state_meta['fts_indexed_upto']``). Then the
agent stops, and the watcher's CPU time (user + system, psutil) is measured over
``--idle-s`` seconds of nothing changing, reported per minute.

    .venv/bin/python -m bench.watch_lag [--lines 150] [--interval 0.2] [--idle-s 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("QUILL_CORPUS", REPO.parent.parent / "shared" / "corpus"))
SOURCE = "claude-code/d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


def searchable(db: Path, ext_id: str) -> bool:
    """Whether ``ext_id`` is stored and covered by the search index."""
    if not db.exists():
        return False
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute("SELECT id FROM messages WHERE ext_id = ?", (ext_id,)).fetchone()
        if row is None:
            return False
        upto = conn.execute(
            "SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'"
        ).fetchone()
        return upto is not None and int(upto[0]) >= row[0]
    except sqlite3.OperationalError:  # the schema is being created
        return False
    finally:
        conn.close()


def watcher_pid(home: Path) -> int | None:
    from quill.home import RunDir

    holder = RunDir(home).lease_holder("watch")
    return holder["pid"] if holder else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=150)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--idle-s", type=float, default=60.0)
    args = ap.parse_args()
    import psutil

    with tempfile.TemporaryDirectory(prefix="quill-watch-bench-") as tmp:
        home, agents = Path(tmp) / "home", Path(tmp) / "agents"
        (agents / "proj").mkdir(parents=True)
        home.mkdir()
        (home / "config.toml").write_text(
            f'[watch]\ndefault_roots = false\nroots = ["{agents}"]\nrescan_s = 30\n'
        )
        env = {**os.environ, "QUILL_HOME": str(home)}
        quill = [sys.executable, "-c", "from quill.ops.cli import main; main()"]
        fleet = subprocess.Popen([*quill, "run"], env=env)
        try:
            deadline = time.monotonic() + 60
            while watcher_pid(home) is None:
                assert time.monotonic() < deadline, "the watcher did not start"
                time.sleep(0.1)
            lines = (CORPUS / SOURCE).read_bytes().splitlines(keepends=True)[: args.lines]
            lags: list[float] = []
            out = open(agents / "proj" / Path(SOURCE).name, "ab", buffering=0)
            for raw in lines:
                out.write(raw)
                t0 = time.monotonic()
                rec = json.loads(raw)
                if rec.get("type") in ("user", "assistant") and rec.get("uuid"):
                    while not searchable(home / "state.db", rec["uuid"]):
                        if time.monotonic() - t0 > 30:
                            raise SystemExit(f"{rec['uuid']} not searchable after 30 s")
                        time.sleep(0.01)
                    lags.append(time.monotonic() - t0)
                time.sleep(args.interval)
            out.close()
            time.sleep(3)  # the last round and its status publish settle
            proc = psutil.Process(watcher_pid(home))
            before = proc.cpu_times()
            time.sleep(args.idle_s)
            after = proc.cpu_times()
            cpu = (after.user - before.user) + (after.system - before.system)
        finally:
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(timeout=60)
    q = statistics.quantiles(lags, n=100)
    print(
        f"capture lag (line written -> searchable), {len(lags)} messages, "
        f"one line every {args.interval} s: p50 {q[49]:.3f} s, p95 {q[94]:.3f} s, "
        f"max {max(lags):.3f} s"
    )
    print(
        f"watcher idle CPU: {cpu:.3f} s over {args.idle_s:g} s = "
        f"{cpu * 60 / args.idle_s:.3f} CPU-s per minute"
    )


if __name__ == "__main__":
    main()
