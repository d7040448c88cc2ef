"""One agent turn applied to a PostgreSQL store, as the writer applies it: round trips, the
client's CPU, the server backend's CPU and wall time per chunk, against a baseline revision
in the same run (alternating rounds). What ``QuillSession.add_items`` on PostgreSQL waits for
besides the spool append and the wake-ups (bench/read_your_writes.py); counts and CPU, which a
loaded machine does not blur as it blurs wall time.

    .venv/bin/python -m bench.pg_turn [--pg URL] [--turns 200] [--baseline REV] [--rounds 2]

Each turn is a 2-message ``messages.append`` (a user question and an assistant answer with its
producer id), one chunk per turn, applied by ``store.postgres.apply.apply_chunk`` under a
spool claim (``fence`` renews it each chunk), on a fresh schema dropped afterwards. Round
trips are counted on every other turn (libpq's trace); wall times and the client's CPU
inside ``apply_chunk`` on the others, as the trace costs the client CPU of its own. The
client and server CPU per turn cover every turn (the spool append and read included).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .common import at_revision, pct

PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (/proc, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, turns: int) -> dict:
    """Apply ``turns`` one-turn chunks; returns the figures (ms, counts)."""
    import psycopg

    from quill.spool import START, Spool, SpoolReader

    try:
        from quill.store.apply.chunking import take_chunk
    except ImportError:  # a baseline tree from before the chunk split
        from quill.store.apply.chunk import take_chunk
    from quill.store.factory import open_url
    from quill.store.postgres import apply as pg_apply
    from quill.store.postgres import claims, wire

    name = "b_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in url else "?"
    store_url = f"{url}{sep}options=-csearch_path%3D{name},public"
    holder = {"token": "bench", "host": socket.gethostname(), "path": "/bench", "pid": 1}
    try:
        with tempfile.TemporaryDirectory(prefix="quill-pg-turn-") as tmp:
            root = Path(tmp)
            store = open_url(store_url, root / "state.db", "bench")
            conn = store.conn
            claims.claim(conn, "bench", holder)
            server = conn.raw.info.backend_pid
            reader = SpoolReader(root / "spool")
            walls, trips = [], []
            apply_cpu = 0.0  # the client's CPU inside apply_chunk, untraced turns alone
            at = START
            with Spool(root / "spool", fsync=False) as spool:
                cpu0, server0 = time.process_time(), _cpu_s(server)
                for i in range(turns):
                    msgs = [
                        {"role": "user", "content": f"question {i}: what is the weather in Oslo?"},
                        {"role": "assistant", "content": f"answer {i}: sunny", "id": f"msg_{i}"},
                    ]
                    spool.append("messages.append", {"session_id": "s1", "messages": msgs})
                    entries = take_chunk(reader.read(at, max_bytes=1 << 20), 500)
                    at = entries[-1].next
                    if i % 2:  # counted: libpq's trace costs the client CPU (and time)
                        with wire.traced(conn) as w:
                            pg_apply.apply_chunk(conn, "bench", entries, lambda *a: None, "bench")
                        trips.append(w.round_trips)
                        continue
                    t0, c0 = time.perf_counter(), time.process_time()
                    pg_apply.apply_chunk(conn, "bench", entries, lambda *a: None, "bench")
                    walls.append(time.perf_counter() - t0)
                    apply_cpu += time.process_time() - c0
                cpu, server_cpu = time.process_time() - cpu0, _cpu_s(server) - server0
            store.close()
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return {
        "turns": turns,
        "round_trips": statistics.median(trips),
        "wall_p50_ms": pct(walls, 50) * 1000,
        "wall_mean_ms": statistics.fmean(walls) * 1000,
        "client_cpu_ms": cpu / turns * 1000,
        "apply_cpu_ms": apply_cpu / len(walls) * 1000,
        "server_cpu_ms": server_cpu / turns * 1000,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg", default=PG)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--baseline", default=None, help="git revision to measure in the same run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="one round of this tree, as JSON")
    args = ap.parse_args(argv)
    if args.json:
        print(json.dumps(measure(args.pg, args.turns)))
        return
    runs: dict[str, list[dict]] = {"this tree": []}
    if args.baseline:
        runs[f"baseline {args.baseline}"] = []
    for _ in range(args.rounds):
        if args.baseline:
            runs[f"baseline {args.baseline}"].append(
                at_revision(
                    "bench.pg_turn",
                    args.baseline,
                    "--json",
                    "--pg",
                    args.pg,
                    "--turns",
                    str(args.turns),
                )
            )
        runs["this tree"].append(measure(args.pg, args.turns))
    print(
        f"one agent turn per chunk on PostgreSQL, {args.turns} turns, {args.rounds} round(s), "
        f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for label, rounds in runs.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        print(
            f"{label:>24}: round trips {med['round_trips']:.0f}, wall p50 "
            f"{med['wall_p50_ms']:.2f} ms, mean {med['wall_mean_ms']:.2f} ms, client CPU "
            f"{med['client_cpu_ms']:.2f} ms (apply_chunk {med['apply_cpu_ms']:.2f} ms), server "
            f"CPU {med['server_cpu_ms']:.2f} ms per turn"
        )


if __name__ == "__main__":
    sys.exit(main())
