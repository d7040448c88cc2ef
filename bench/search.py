"""§3 Search latency p50/p95 on a Quill store (100k and, with --full, 1M synthetic messages),
through the public read API ``store.read.reader.Reader.search`` (limit 20, newest first, with the
display context the CLI shows), warm, on a read-only connection.

Queries: rare word (1 in ~20k messages), common word (in ~98 %), phrase (~1 %), substring via
the trigram index (``substring=True``), a CJK term (trigram), and ranked search. Quill's ranked
search is ``Reader.search(order="relevance")`` (limit 20, with context: FTS5's bm25 formula over
the newest 1,000 matches, document counts sampled: store/search/rank.py), measured next to SQL on
Quill's own word index: FTS5's bm25() over every match (unbounded) and over the newest 1,000
matches (the bounded candidate set the design prescribes), and ``rank.bm25_bounded`` alone
(ids and scores, no hits).

Baseline, same messages, same run: a naive FTS5 store (stdlib sqlite3, external-content FTS5
by triggers) queried the obvious ways (``ORDER BY rank``, ``ORDER BY rowid DESC``, ``LIKE``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from .alternatives import Naive, naive_row
from .common import ms, pct, ratio
from .messages import CJK, COMMON, PHRASE, RARE, SUBSTRING, calls, synthetic_messages

BOUNDED_CANDIDATES = 1000

QUERIES = [
    ("rare word", dict(text=RARE)),
    ("common word", dict(text=COMMON)),
    ("common word, no context", dict(text=COMMON, context=False)),
    ("phrase", dict(text=f'"{PHRASE}"')),
    ("substring", dict(text=SUBSTRING, substring=True)),
    ("CJK", dict(text=CJK)),
]
RANKED_SQL = {
    "ranked rare (bm25, all matches)": (
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20",
        f'"{RARE}"',
    ),
    "ranked common (bm25, all matches)": (
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20",
        f'"{COMMON}"',
    ),
    "ranked common (FTS5 bm25(), newest 1k)": (
        "SELECT id FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
        f"WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {BOUNDED_CANDIDATES}) "
        "ORDER BY r LIMIT 20",
        f'"{COMMON}"',
    ),
    "ranked phrase (FTS5 bm25(), newest 1k)": (
        "SELECT id FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
        f"WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {BOUNDED_CANDIDATES}) "
        "ORDER BY r LIMIT 20",
        f'"{PHRASE}"',
    ),
}
#: Quill's ranked search through the read API (``order="relevance"``: store/search/rank.py's
#: FTS5 bm25 formula over the newest 1,000 matches, each phrase's document count sampled instead
#: of counted over the whole index), and ``rank.bm25_bounded`` alone (ids and scores only).
QUILL_RANKED = {
    "ranked common (Quill search, relevance)": COMMON,
    "ranked phrase (Quill search, relevance)": f'"{PHRASE}"',
}
RANK_ONLY = {
    "ranked common (rank.bm25_bounded only)": COMMON,
    "ranked phrase (rank.bm25_bounded only)": f'"{PHRASE}"',
}
NAIVE_SQL = {
    "rare word": (
        "SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid "
        "WHERE messages_fts MATCH ? ORDER BY f.rowid DESC LIMIT 20",
        f'"{RARE}"',
    ),
    "common word": (
        "SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid "
        "WHERE messages_fts MATCH ? ORDER BY f.rowid DESC LIMIT 20",
        f'"{COMMON}"',
    ),
    "phrase": (
        "SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid "
        "WHERE messages_fts MATCH ? ORDER BY f.rowid DESC LIMIT 20",
        f'"{PHRASE}"',
    ),
    "substring": (
        "SELECT * FROM messages WHERE content LIKE ? ORDER BY id DESC LIMIT 20",
        f"%{SUBSTRING}%",
    ),
    "CJK": ("SELECT * FROM messages WHERE content LIKE ? ORDER BY id DESC LIMIT 20", f"%{CJK}%"),
    "ranked common (bm25, all matches)": (
        "SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid "
        "WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20",
        f'"{COMMON}"',
    ),
}


def _time(fn, reps: int) -> dict[str, Any]:
    fn()  # warm
    lat = []
    budget = time.perf_counter() + 20.0  # an unbounded query must not eat the run
    for _ in range(reps):
        t0 = time.perf_counter()
        n = fn()
        lat.append(time.perf_counter() - t0)
        if time.perf_counter() > budget and len(lat) >= 3:
            break
    return {"p50_ms": ms(pct(lat, 50)), "p95_ms": ms(pct(lat, 95)), "n": len(lat), "hits": n}


def _cpu(fn, reps: int, rounds: int = 3) -> float:
    """CPU milliseconds per call of ``fn`` (``process_time``), best of ``rounds`` × ``reps``."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        c0 = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - c0) / reps)
    return ms(best)


def build_naive(db: Path, n: int) -> float:
    Naive.prepare(db.parent)
    conn = Naive.connect(db)
    conn.execute("PRAGMA synchronous=NORMAL")
    t0 = time.perf_counter()
    batch: list[tuple] = []

    def flush():
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, "
            "tool_name, ts, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            batch,
        )
        conn.execute("COMMIT")
        batch.clear()

    for sid, msgs in calls(synthetic_messages(n), 10):
        batch.extend(naive_row(sid, m) for m in msgs)
        if len(batch) >= 5000:
            flush()
    if batch:
        flush()
    conn.close()
    return time.perf_counter() - t0


#: The floor for word queries, on Quill's own store and index in the same run: a bare FTS5
#: ``MATCH … ORDER BY rowid DESC LIMIT 20`` returning the same hits (ids only).
BARE_SQL = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT 20"
BARE_QUERIES = {"rare word": f'"{RARE}"', "common word": f'"{COMMON}"', "phrase": f'"{PHRASE}"'}


def quill_latencies(db: Path, reps: int) -> dict[str, Any]:
    from quill.store.read.reader import Reader
    from quill.store.search import rank
    from quill.store.search import run as search_mod

    out: dict[str, Any] = {}
    with Reader(db) as r:
        for name, kw in QUERIES:
            out[name] = _time(lambda kw=kw: len(r.search(limit=20, **kw)), reps)
        for name, (sql, arg) in RANKED_SQL.items():
            out[name] = _time(
                lambda sql=sql, arg=arg: len(r.conn.execute(sql, (arg,)).fetchall()),
                max(5, reps // 4),
            )
        for name, text in QUILL_RANKED.items():
            out[name] = _time(
                lambda text=text: len(r.search(text, limit=20, order="relevance")), reps
            )
        for name, text in RANK_ONLY.items():
            out[name] = _time(lambda text=text: len(rank.bm25_bounded(r.conn, text)), reps)
        for name, arg in BARE_QUERIES.items():
            out[f"bare FTS5: {name}"] = _time(
                lambda arg=arg: len(r.conn.execute(BARE_SQL, (arg,)).fetchall()), reps
            )
        # Where the time of a common-word search goes (median of each stage over the reps),
        # wall and CPU (process_time: on a shared machine wall time is mostly queueing).
        for label, clock in (
            ("stages: common word", time.perf_counter),
            ("cpu stages: common word", time.process_time),
        ):
            stages: dict[str, list[float]] = {}
            for _ in range(reps):
                t: dict[str, float] = {}
                with r.snapshot() as conn:
                    search_mod.search(conn, COMMON, limit=20, timings=t, clock=clock)
                for k, v in t.items():
                    stages.setdefault(k, []).append(v)
            out[label] = {k: ms(pct(v, 50)) for k, v in stages.items()}
        # CPU time per call (process_time, best of 3 rounds): what the code costs, next to the
        # bare FTS5 query returning the same hits, on the same connection.
        for name, kw in (
            ("common word", dict(text=COMMON)),
            ("rare word", dict(text=RARE)),
            ("phrase", dict(text=f'"{PHRASE}"')),
        ):
            arg = BARE_QUERIES[name]
            cpu = {
                "quill": _cpu(lambda kw=kw: r.search(limit=20, **kw), reps),
                "quill, no context": _cpu(
                    lambda kw=kw: r.search(limit=20, context=False, **kw), reps
                ),
                "bare FTS5": _cpu(
                    lambda arg=arg: r.conn.execute(BARE_SQL, (arg,)).fetchall(), reps
                ),
            }
            cpu["quill ÷ bare"] = ratio(cpu["quill"], cpu["bare FTS5"])
            cpu["no context ÷ bare"] = ratio(cpu["quill, no context"], cpu["bare FTS5"])
            out[f"cpu per call: {name}"] = cpu
        # Substring and CJK (trigram index merged with the scan of the rows it does not
        # cover): CPU per call with context, few reps (an unfenced scan costs ~0.5 s a call).
        for name, kw in (
            ("substring", dict(text=SUBSTRING, substring=True)),
            ("CJK", dict(text=CJK)),
        ):
            out[f"cpu per call: {name}"] = {
                "quill": _cpu(lambda kw=kw: r.search(limit=20, **kw), max(3, reps // 10))
            }
        # Ranked, bounded: Quill's ranked search vs FTS5's bm25() over the same candidates.
        sql, arg = RANKED_SQL["ranked common (FTS5 bm25(), newest 1k)"]
        few = max(3, reps // 4)
        cpu = {
            "Quill bm25": _cpu(lambda: r.search(COMMON, limit=20, order="relevance"), few),
            "FTS5 bm25()": _cpu(lambda: r.conn.execute(sql, (arg,)).fetchall(), few),
        }
        cpu["FTS5 ÷ Quill"] = ratio(cpu["FTS5 bm25()"], cpu["Quill bm25"])
        out["cpu per call: ranked common, newest 1k"] = cpu
    for name in BARE_QUERIES:
        bare = out[f"bare FTS5: {name}"]["p95_ms"]
        out[name]["over_bare_p95"] = ratio(out[name]["p95_ms"], bare)
    out["common word, no context"]["over_bare_p95"] = ratio(
        out["common word, no context"]["p95_ms"], out["bare FTS5: common word"]["p95_ms"]
    )
    return out


def naive_latencies(db: Path, reps: int) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {
        name: _time(
            lambda sql=sql, arg=arg: len(conn.execute(sql, (arg,)).fetchall()), max(5, reps // 2)
        )
        for name, (sql, arg) in NAIVE_SQL.items()
    }
    conn.close()
    return out


def run_one(n: int, quill_db: Path, work: Path, sizes, log) -> dict[str, Any]:
    q = quill_latencies(quill_db, sizes.search_reps)
    res: dict[str, Any] = {"messages": n, "quill": q}
    if n <= sizes.naive_search_max:
        ndb = work / "naive-search" / "naive.db"
        ndb.parent.mkdir(parents=True, exist_ok=True)
        res["naive_build_s"] = round(build_naive(ndb, n), 1)
        nv = naive_latencies(ndb, sizes.search_reps)
        res["naive"] = nv
        res["naive_over_quill_p50"] = {
            k: ratio(nv[k]["p50_ms"], q[k]["p50_ms"]) for k in nv if k in q
        }
        import shutil

        shutil.rmtree(ndb.parent, ignore_errors=True)
    else:
        res["naive"] = None
        res["naive_skipped"] = (
            f"naive baseline built only up to {sizes.naive_search_max:,} messages (build time)"
        )
    nf = [k for k in ("rare word", "common word", "phrase")]
    res["newest_first_p95_ms"] = max(q[k]["p95_ms"] for k in nf)
    res["ranked_bounded_p95_ms"] = max(q[k]["p95_ms"] for k in QUILL_RANKED)
    res["fts5_bm25_bounded_p95_ms"] = max(
        v["p95_ms"] for k, v in q.items() if "FTS5 bm25(), newest 1k" in k
    )
    report(n, q, log, res.get("naive"))
    return res


def report(n: int, q: dict[str, Any], log, naive: dict[str, Any] | None = None) -> None:
    """Log §3 lines for the ``quill_latencies`` result ``q`` of a store of ``n`` messages."""
    for k, v in q.items():
        if k.startswith(("stages", "cpu")):
            log(
                f"§3 {n:>9,d} {k:36s} "
                + "  ".join(f"{s} {t}" + ("×" if "÷" in s else " ms") for s, t in v.items())
            )
            continue
        log(
            f"§3 {n:>9,d} {k:36s} p50 {v['p50_ms']:>9} ms  p95 {v['p95_ms']:>9} ms  "
            f"hits {v['hits']}"
            + (f"  ÷ bare FTS5 p95 {v['over_bare_p95']}×" if v.get("over_bare_p95") else "")
            + (f"  naive p50 {naive[k]['p50_ms']} ms" if naive and k in naive else "")
        )


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.search STORE [--reps N] [--out PATH] [--baseline REV]
    [--baseline-store PATH] [--json]``: §3 on an existing store (one built by
    ``bench.build_store``), without building one; prints the lines (with ``--baseline``, a
    table against revision REV measured on the same store, or on ``--baseline-store``, in the
    same run) and writes JSON."""
    import argparse
    import os

    from .common import machine

    ap = argparse.ArgumentParser(
        prog="python -m bench.search", description=main.__doc__.splitlines()[0]
    )
    ap.add_argument("store", type=Path, help="state.db of a synthetic store (bench.build_store)")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--out", type=Path, default=None, help="JSON results file")
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure git revision REV's search on the same store, in the same run "
        "(a subprocess on an exported copy, before and after this tree's)",
    )
    ap.add_argument(
        "--baseline-store",
        type=Path,
        metavar="PATH",
        help="the store the baseline searches (default: STORE): the same messages indexed in "
        "the baseline's index layout, when this tree's layout differs (a reader treats an "
        "index of another layout as stale)",
    )
    ap.add_argument("--json", action="store_true", help="print this tree's latencies as JSON only")
    args = ap.parse_args(argv)
    from quill.store.read.reader import Reader

    if args.json:
        print(json.dumps(quill_latencies(args.store, args.reps), default=str))
        return 0
    with Reader(args.store) as r:
        n = r.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    began = time.monotonic()
    load = os.getloadavg()
    base_store = args.baseline_store or args.store
    base = _baseline(args.baseline, base_store, args.reps) if args.baseline else None
    q = quill_latencies(args.store, args.reps)
    if base is not None:
        # The baseline again after this tree: a load that changed during the run shows as two
        # baseline figures apart; the comparison takes the better of the two.
        again = _baseline(args.baseline, base_store, args.reps)
        base = {
            k: min((b, a), key=lambda v: v.get("p95_ms", 0)) if "p95_ms" in b else b
            for (k, b), a in zip(base.items(), again.values())
        }
    res = {
        "messages": n,
        "quill": q,
        "load_before": load,
        "load_after": os.getloadavg(),
        "seconds": round(time.monotonic() - began, 1),
        "machine": machine(),
    }
    nf = ("rare word", "common word", "phrase")
    res["newest_first_p95_ms"] = max(q[k]["p95_ms"] for k in nf)
    res["ranked_bounded_p95_ms"] = max(q[k]["p95_ms"] for k in QUILL_RANKED)
    res["fts5_bm25_bounded_p95_ms"] = max(
        v["p95_ms"] for k, v in q.items() if "FTS5 bm25(), newest 1k" in k
    )
    report(n, q, print)
    if base is not None:
        res["baseline"] = {"rev": args.baseline, "quill": base}
        print(compare(args.baseline, base, q))
    print(
        f"load average before {load}, after {res['load_after']}; "
        f"newest-first p95 {res['newest_first_p95_ms']} ms; "
        f"ranked bounded p95 {res['ranked_bounded_p95_ms']} ms "
        f"(FTS5 bm25() {res['fts5_bm25_bounded_p95_ms']} ms)"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2, default=str))
    return 0


def _baseline(rev: str, store: Path, reps: int) -> dict[str, Any]:
    """``quill_latencies`` under the ``quill`` of git revision ``rev`` (same store, same run)."""
    from .common import at_revision

    return at_revision("bench.search", rev, str(store), "--reps", str(reps), "--json")


def compare(rev: str, base: dict[str, Any], q: dict[str, Any]) -> str:
    """A markdown table of p50/p95 of every timed query: ``rev`` and this tree, and the ratio
    of this tree's p95 to the baseline's."""
    lines = [
        f"| query | {rev} p50 / p95 ms | this tree p50 / p95 ms | p95 ÷ {rev} | hits same count |",
        "|---|---:|---:|---:|---|",
    ]
    for k, v in q.items():
        b = base.get(k)
        if k.startswith("cpu per call") and b and "quill" in v and "quill" in b:
            lines.append(
                f"| {k} (CPU ms, Quill) | {b['quill']} | {v['quill']} | "
                f"{ratio(v['quill'], b['quill'])} | |"
            )
            continue
        if not isinstance(v, dict) or "p95_ms" not in v or not b or "p95_ms" not in b:
            continue
        lines.append(
            f"| {k} | {b['p50_ms']} / {b['p95_ms']} | {v['p50_ms']} / {v['p95_ms']} | "
            f"{ratio(v['p95_ms'], b['p95_ms'])} | {b['hits'] == v['hits']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.exit(main())
