"""§3 Search latency p50/p95 on a Quill store (100k and, with --full, 1M synthetic messages),
through the public read API ``store.reads.Reader.search`` (limit 20, newest first, with the
display context the CLI shows), warm, on a read-only connection.

Queries: rare word (1 in ~20k messages), common word (in ~98 %), phrase (~1 %), substring via
the trigram index (``substring=True``), a CJK term (trigram), and ranked search. Quill's API
has no ranked mode (newest first is the default, docs/architecture.md), so ranked is measured as SQL on
Quill's own word index: bm25 over every match (unbounded) and bm25 over the newest 1,000
matches (the bounded candidate set the design prescribes).

Baseline, same messages, same run: a naive FTS5 store (stdlib sqlite3, external-content FTS5
by triggers) queried the obvious ways (``ORDER BY rank``, ``ORDER BY rowid DESC``, ``LIKE``).
"""
from __future__ import annotations

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
    "ranked rare (bm25, all matches)": ("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                                        "ORDER BY rank LIMIT 20", f'"{RARE}"'),
    "ranked common (bm25, all matches)": ("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                                          "ORDER BY rank LIMIT 20", f'"{COMMON}"'),
    "ranked common (bm25, newest 1k)": (
        "SELECT id FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
        f"WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {BOUNDED_CANDIDATES}) ORDER BY r LIMIT 20",
        f'"{COMMON}"'),
    "ranked phrase (bm25, newest 1k)": (
        "SELECT id FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
        f"WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {BOUNDED_CANDIDATES}) ORDER BY r LIMIT 20",
        f'"{PHRASE}"'),
}
NAIVE_SQL = {
    "rare word": ("SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ? "
                  "ORDER BY f.rowid DESC LIMIT 20", f'"{RARE}"'),
    "common word": ("SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ? "
                    "ORDER BY f.rowid DESC LIMIT 20", f'"{COMMON}"'),
    "phrase": ("SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ? "
               "ORDER BY f.rowid DESC LIMIT 20", f'"{PHRASE}"'),
    "substring": ("SELECT * FROM messages WHERE content LIKE ? ORDER BY id DESC LIMIT 20", f"%{SUBSTRING}%"),
    "CJK": ("SELECT * FROM messages WHERE content LIKE ? ORDER BY id DESC LIMIT 20", f"%{CJK}%"),
    "ranked common (bm25, all matches)": ("SELECT m.* FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                                          "WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20", f'"{COMMON}"'),
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


def build_naive(db: Path, n: int) -> float:
    Naive.prepare(db.parent)
    conn = Naive.connect(db)
    conn.execute("PRAGMA synchronous=NORMAL")
    t0 = time.perf_counter()
    batch: list[tuple] = []

    def flush():
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, "
                         "tool_name, ts, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
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
    from quill.store.reads import Reader
    from quill.store import search as search_mod
    out: dict[str, Any] = {}
    with Reader(db) as r:
        for name, kw in QUERIES:
            out[name] = _time(lambda kw=kw: len(r.search(limit=20, **kw)), reps)
        for name, (sql, arg) in RANKED_SQL.items():
            out[name] = _time(lambda sql=sql, arg=arg: len(r.conn.execute(sql, (arg,)).fetchall()),
                              max(5, reps // 4))
        for name, arg in BARE_QUERIES.items():
            out[f"bare FTS5: {name}"] = _time(lambda arg=arg: len(r.conn.execute(BARE_SQL, (arg,)).fetchall()), reps)
        # Where the time of a common-word search goes (median of each stage over the reps).
        stages: dict[str, list[float]] = {}
        for _ in range(reps):
            t: dict[str, float] = {}
            with r.snapshot() as conn:
                search_mod.search(conn, COMMON, limit=20, timings=t)
            for k, v in t.items():
                stages.setdefault(k, []).append(v)
        out["stages: common word"] = {k: ms(pct(v, 50)) for k, v in stages.items()}
        # CPU time per call (process_time): on a shared, loaded machine wall-clock p95 is mostly
        # queueing for a core; CPU per call is what the code costs.
        cpu = {}
        for label, fn in (("quill", lambda: r.search(COMMON, limit=20)),
                          ("quill, no context", lambda: r.search(COMMON, limit=20, context=False)),
                          ("bare FTS5", lambda: r.conn.execute(BARE_SQL, (f'"{COMMON}"',)).fetchall())):
            fn()
            c0 = time.process_time()
            for _ in range(reps):
                fn()
            cpu[label] = ms((time.process_time() - c0) / reps)
        cpu["quill ÷ bare"] = ratio(cpu["quill"], cpu["bare FTS5"])
        cpu["no context ÷ bare"] = ratio(cpu["quill, no context"], cpu["bare FTS5"])
        out["cpu per call: common word"] = cpu
    for name in BARE_QUERIES:
        bare = out[f"bare FTS5: {name}"]["p95_ms"]
        out[name]["over_bare_p95"] = ratio(out[name]["p95_ms"], bare)
    out["common word, no context"]["over_bare_p95"] = ratio(out["common word, no context"]["p95_ms"],
                                                            out["bare FTS5: common word"]["p95_ms"])
    return out


def naive_latencies(db: Path, reps: int) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {name: _time(lambda sql=sql, arg=arg: len(conn.execute(sql, (arg,)).fetchall()), max(5, reps // 2))
           for name, (sql, arg) in NAIVE_SQL.items()}
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
        res["naive_over_quill_p50"] = {k: ratio(nv[k]["p50_ms"], q[k]["p50_ms"]) for k in nv if k in q}
        import shutil
        shutil.rmtree(ndb.parent, ignore_errors=True)
    else:
        res["naive"] = None
        res["naive_skipped"] = f"naive baseline built only up to {sizes.naive_search_max:,} messages (build time)"
    nf = [k for k in ("rare word", "common word", "phrase")]
    res["newest_first_p95_ms"] = max(q[k]["p95_ms"] for k in nf)
    res["ranked_bounded_p95_ms"] = max(v["p95_ms"] for k, v in q.items() if "newest 1k" in k)
    for k, v in q.items():
        if k.startswith(("stages", "cpu")):
            log(f"§3 {n:>9,d} {k:36s} " + "  ".join(f"{s} {t}" + ("×" if "÷" in s else " ms") for s, t in v.items()))
            continue
        log(f"§3 {n:>9,d} {k:36s} p50 {v['p50_ms']:>9} ms  p95 {v['p95_ms']:>9} ms  hits {v['hits']}"
            + (f"  ÷ bare FTS5 p95 {v['over_bare_p95']}×" if v.get("over_bare_p95") else "")
            + (f"  naive p50 {res['naive'][k]['p50_ms']} ms" if res.get("naive") and k in res["naive"] else ""))
    return res
