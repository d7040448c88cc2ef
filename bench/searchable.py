"""§2 Searchable ingest: messages/s from the spool to committed, FTS-indexed rows.

* Quill: a spool of real messages (calls of 10, sessions of 50) is drained exactly as the
  writer's loop does it (``workers/writer.py`` ``_step``): the one drain loop
  (``workers.drain.Drain``: a chunk of ``chunk_rows``, rows + batch ids + cursor in one
  transaction) → the store's ``index`` (bulk FTS, 2,000 rows) after each chunk, then the
  index is brought fully up to date. The clock stops
  when every row is committed *and* indexed.
* raw FTS ceiling: plain apsw ``executemany`` of the very same, already normalised rows into
  the same schema (``store.schema``), with per-row FTS triggers that fill the same two FTS
  tables with the same text (word index + scoped trigram index), same chunk size, same
  ``synchronous=NORMAL``. No spool, no JSON, no validation: a ceiling, not a competitor.
* no-FTS ceiling: the same inserts without the triggers.
* naive FTS writer: §1's naive writer (stdlib sqlite3, one transaction per message,
  synchronous=FULL, FTS5 triggers), single process, time-boxed, same messages.

Chunk sizes 1, 10, 100, 500, 5000. A spool record is applied all-or-nothing, so Quill's
smallest chunk is one 10-message record: the ceilings use the same effective rows per
transaction (``max(chunk, 10)``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quill.home import DEFAULTS

from .alternatives import Naive
from .common import ratio, tempdir
from .messages import calls, real_stream

CHUNKS = (1, 10, 100, 500, 5000)
BATCH = 10
INDEX_SLICE_ROWS = DEFAULTS.index_slice_rows  # the writer's default ([writer] index_slice_rows)


def write_spool(spool_dir: Path, stream, batch: int = BATCH, prefix: str = "s") -> int:
    """Fill a spool (fsync off: preparation, not measured). Returns messages written."""
    from quill.spool import Spool

    n = 0
    with Spool(spool_dir, fsync=False) as sp:
        for sid, msgs in calls(stream, batch, prefix=prefix):
            sp.append("messages.append", {"session_id": sid, "messages": msgs})
            n += len(msgs)
    return n


def drain(
    spool_dir: Path, db_path: Path, chunk_rows: int = 500, index_slice_rows: int = INDEX_SLICE_ROWS
) -> dict[str, Any]:
    """Drain the spool into a fresh store like the writer's loop; returns figures."""
    from quill.spool import Quarantine, SpoolReader
    from quill.spool.segments import Position, list_segments
    from quill.store.factory import open_url
    from quill.workers.drain import Drain

    t0, c0 = time.perf_counter(), time.process_time()
    store = open_url(None, db_path, "bench")
    quarantine = Quarantine(spool_dir)
    drain = Drain(store, SpoolReader(spool_dir), quarantine, chunk_rows)
    drain.start(Position(min(list_segments(spool_dir), default=1), 0))
    while drain.step().entries:  # the one drain loop, then one index slice, as the writer
        store.index(index_slice_rows)
    committed = time.perf_counter() - t0
    while store.index(index_slice_rows):
        pass
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    rows, chunks = drain.totals["rows"], drain.totals["chunks"]
    rejected = [e["reason"] for e in quarantine.entries()]
    return {
        "rows": rows,
        "chunks": chunks,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "msgs_per_s": round(rows / seconds, 1),
        "commit_seconds": round(committed, 3),
        "rejected": len(rejected),
        "rejected_reasons": sorted(set(rejected))[:5],
    }


def _trigger_sql() -> str:
    from quill.store.search.columns import SEARCH_COLUMNS_SQL, TRIGRAM_SCOPE_SQL, TRIGRAM_TEXT_SQL

    def new(sql):  # the expressions use the alias m; the trigger reads the row as new
        return sql.replace("m.", "new.")

    return (
        f"CREATE TRIGGER bench_fts AFTER INSERT ON messages BEGIN "
        f"INSERT INTO messages_fts (rowid, {', '.join(SEARCH_COLUMNS_SQL)}) "
        f"SELECT new.id, {', '.join(new(e) for e in SEARCH_COLUMNS_SQL.values())}; "
        f"INSERT INTO messages_trigram (rowid, text) SELECT new.id, {new(TRIGRAM_TEXT_SQL)} "
        f"WHERE {new(TRIGRAM_SCOPE_SQL)}; END;"
    )


def normalised_rows(n: int) -> list[tuple]:
    """The rows Quill would insert for ``n`` real messages
    (``store.apply.normalize.message_row``), each with its batch's number
    (``messages.batch``)."""
    from quill.store.apply.normalize import message_row

    now = time.time()
    out = []
    for call_no, (sid, msgs) in enumerate(calls(real_stream(n), BATCH)):
        batch = call_no + 1
        for m in msgs:
            out.append((sid, *message_row(m, now), now, batch))
    return out


def raw_insert(db_path: Path, rows: list[tuple], chunk: int, fts: bool) -> dict[str, Any]:
    from quill.store import open_writer
    from quill.store.apply.normalize import ROW_COLUMNS

    conn = open_writer(db_path)
    if fts:
        conn.execute(_trigger_sql())
    sql = (
        f"INSERT INTO messages (session_id, {', '.join(ROW_COLUMNS)}, arrived_at, batch) "
        f"VALUES ({', '.join('?' for _ in range(len(ROW_COLUMNS) + 3))})"
    )
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR IGNORE INTO sessions (id, created_at) VALUES (?, ?)",
            [(s, r[-2]) for s in {r[0] for r in part} for r in part[:1]],
        )
        conn.executemany(sql, part)
        conn.execute("COMMIT")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    conn.close()
    return {
        "rows": len(rows),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "msgs_per_s": round(len(rows) / seconds, 1),
    }


def naive_rate(n: int, seconds: float) -> dict[str, Any]:
    with tempdir("naive2") as d:
        Naive.prepare(d)
        w = Naive()
        w.open(d, 0)
        done = 0
        t0 = time.perf_counter()
        for sid, msgs in calls(real_stream(n), BATCH):
            w.write(sid, msgs)
            done += len(msgs)
            if time.perf_counter() - t0 >= seconds:
                break
        el = time.perf_counter() - t0
        w.close()
    return {"rows": done, "seconds": round(el, 3), "msgs_per_s": round(done / el, 1)}


def profile_drain(spool_dir: Path, db_path: Path, chunk_rows: int = 500, top: int = 18) -> str:
    """cProfile of one drain: the top functions by own time (text for RESULTS.md)."""
    import cProfile
    import io
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    drain(spool_dir, db_path, chunk_rows)
    pr.disable()
    buf = io.StringIO()
    st = pstats.Stats(pr, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "ncalls" in ln), 0)
    head = [ln for ln in lines[:start] if "function calls" in ln]
    return "\n".join(head + lines[start:])


def run(sizes, log) -> dict[str, Any]:
    n = sizes.searchable_n
    out: dict[str, Any] = {
        "messages": n,
        "batch": BATCH,
        "index_slice_rows": INDEX_SLICE_ROWS,
        "sweep": [],
    }
    rows = normalised_rows(n)
    with tempdir("searchable") as d:
        write_spool(d / "spool", real_stream(n))
        import shutil

        for chunk in CHUNKS:
            eff = max(chunk, BATCH)
            qs, raws = [], []
            for rep in range(sizes.reps):  # interleaved, median reported
                qs.append(drain(d / "spool", d / f"quill-{chunk}-{rep}.db", chunk))
                raws.append(raw_insert(d / f"raw-{chunk}-{rep}.db", rows, eff, fts=True))
                shutil.rmtree(d / "spool" / "quarantine", ignore_errors=True)
                for p in d.glob(f"*-{chunk}-{rep}.db*"):
                    p.unlink()
            q = sorted(qs, key=lambda r: r["msgs_per_s"])[len(qs) // 2]
            raw = sorted(raws, key=lambda r: r["msgs_per_s"])[len(raws) // 2]
            q["all_msgs_per_s"] = [r["msgs_per_s"] for r in qs]
            raw["all_msgs_per_s"] = [r["msgs_per_s"] for r in raws]
            # CPU seconds (this process: Python + SQLite, no I/O wait) are far steadier than wall
            # time on a shared machine: the median of each side, and their ratio.
            q_cpu = sorted(r["cpu_seconds"] for r in qs)[len(qs) // 2]
            raw_cpu = sorted(r["cpu_seconds"] for r in raws)[len(raws) // 2]
            entry = {
                "chunk": chunk,
                "effective_rows_per_txn": eff,
                "quill": q,
                "raw_fts": raw,
                "quill_vs_raw_fts": ratio(q["msgs_per_s"], raw["msgs_per_s"]),
                "cpu_seconds": {"quill": q_cpu, "raw_fts": raw_cpu},
                "quill_vs_raw_fts_cpu": ratio(raw_cpu, q_cpu),
            }
            if chunk == 500:
                entry["raw_nofts"] = raw_insert(d / "nofts.db", rows, eff, fts=False)
            out["sweep"].append(entry)
            log(
                f"§2 chunk={chunk:<5d} quill {q['msgs_per_s']:>8.1f} msg/s  "
                f"raw-FTS {raw['msgs_per_s']:>8.1f}  "
                f"ratio {entry['quill_vs_raw_fts']}  cpu s {q_cpu:.2f} vs {raw_cpu:.2f} "
                f"(cpu ratio {entry['quill_vs_raw_fts_cpu']})  rejected={q['rejected']}"
            )
        shutil.rmtree(d / "spool" / "quarantine", ignore_errors=True)
        out["profile_chunk500"] = profile_drain(d / "spool", d / "profile.db", 500)
    out["naive"] = naive_rate(n, sizes.naive_seconds)
    at500 = next(e for e in out["sweep"] if e["chunk"] == 500)
    out["at500"] = {
        "quill": at500["quill"]["msgs_per_s"],
        "raw_fts": at500["raw_fts"]["msgs_per_s"],
        "raw_nofts": at500["raw_nofts"]["msgs_per_s"],
        "naive": out["naive"]["msgs_per_s"],
        "vs_naive": ratio(at500["quill"]["msgs_per_s"], out["naive"]["msgs_per_s"]),
        "vs_raw_fts": at500["quill_vs_raw_fts"],
        "vs_raw_fts_cpu": at500["quill_vs_raw_fts_cpu"],
        "cpu_seconds": at500["cpu_seconds"],
        "vs_raw_nofts": ratio(at500["quill"]["msgs_per_s"], at500["raw_nofts"]["msgs_per_s"]),
    }
    log(
        f"§2 naive {out['naive']['msgs_per_s']} msg/s; "
        f"no-FTS ceiling {out['at500']['raw_nofts']} msg/s; "
        f"chunk 500 CPU s quill {at500['cpu_seconds']['quill']} "
        f"vs raw FTS {at500['cpu_seconds']['raw_fts']}"
    )
    return out
