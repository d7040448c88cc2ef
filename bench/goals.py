"""The benchmark's goal table: each target of docs/benchmarks.md, its measured value from a
results dict (``bench.run``), its goal and PASS/FAIL (n/a when its section did not run)."""

from __future__ import annotations

from typing import Any

from . import ingest
from .common import ratio


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name, value, goal, ok, note=""):
        out.append(
            {
                "target": name,
                "measured": value,
                "goal": goal,
                "result": "n/a" if ok is None else ("PASS" if ok else "FAIL"),
                "note": note,
            }
        )

    ing = res.get("ingest") or {}
    for procs in ingest.PROCS:
        b = (ing.get("best_alternative") or {}).get(f"batch10_procs{procs}")
        add(
            f"ack ingest, batch 10, {procs} producer(s): Quill / best alternative",
            f"{b['ratio']}× (vs {b['system']})" if b else None,
            "≥ 2×",
            b["ratio"] >= 2 if b else None,
            f"per interleaved round: {b.get('round_ratios')}"
            if b and b.get("round_ratios")
            else "",
        )
    q16 = [r for r in ing.get("rows", []) if r["system"] == "quill" and r["procs"] == 16]
    bare = ing.get("bare_fsync") or {}
    if q16 and bare:
        w = max(q16, key=lambda r: r["p99_ms"])
        add(
            "append p99, 16 producers (worst batch) ÷ bare 4 KiB write+fdatasync p99, 1 process",
            f"{w['p99_over_bare_1']}× ({w['p99_ms']} vs {bare[1]['p99_ms']} ms)",
            "≤ 1.5×",
            w["p99_over_bare_1"] <= 1.5,
        )
        add(
            "append p99, 16 producers (worst batch) ÷ bare write+fdatasync p99, 16 processes",
            f"{w['p99_over_bare_same_procs']}× ({w['p99_ms']} vs {bare[16]['p99_ms']} ms)",
            "(context)",
            None,
        )
        # The floor against itself: 16 bare processes doing nothing but write+fdatasync, same
        # rounds. Above 1.5× here, no appender of 16 concurrent processes can meet the line above.
        floor = ratio(bare[16]["p99_ms"], bare[1]["p99_ms"])
        add(
            "the floor itself: bare write+fdatasync p99, 16 processes ÷ 1 process",
            f"{floor}× ({bare[16]['p99_ms']} vs {bare[1]['p99_ms']} ms)",
            "(context)",
            None,
            "the bound any 16-process appender starts from",
        )
    else:
        add("append p99, 16 producers ÷ bare fdatasync p99", None, "≤ 1.5×", None)
    pc = res.get("paced")
    if pc:
        add(
            f"append p99, {pc['procs']} paced producers "
            f"(1 call / {pc['interval_s'] * 1000:.0f} ms each) ÷ bare "
            "write+fdatasync p99 on the same schedule",
            f"{pc['quill_p99_over_bare']}× ({pc['quill']['p99_ms']} vs {pc['bare']['p99_ms']} ms)",
            "(context)",
            None,
        )
    s = (res.get("searchable") or {}).get("at500")
    add(
        "searchable ingest vs naive FTS writer (chunk 500)",
        f"{s['vs_naive']}×" if s else None,
        "≥ 2×",
        s["vs_naive"] >= 2 if s else None,
    )
    add(
        "searchable ingest ÷ raw FTS ceiling (chunk 500)",
        f"{s['vs_raw_fts']}×" if s else None,
        "≥ 1.5×",
        s["vs_raw_fts"] >= 1.5 if s else None,
    )
    srch = res.get("search") or []
    at1m = next((x for x in srch if x["messages"] >= 1_000_000), None)
    largest = max(srch, key=lambda x: x["messages"]) if srch else None
    if at1m:
        add(
            "newest-first search p95 at 1M",
            f"{at1m['newest_first_p95_ms']} ms",
            "< 10 ms",
            at1m["newest_first_p95_ms"] < 10,
        )
    else:
        add(
            "newest-first search p95 at 1M",
            f"{largest['newest_first_p95_ms']} ms at {largest['messages']:,}" if largest else None,
            "< 10 ms",
            None,
            "1M not run (use --full)",
        )
    if largest:
        v = largest["ranked_bounded_p95_ms"]
        add(
            "ranked search (Reader.search order=relevance, bounded bm25) "
            f"p95 at {largest['messages']:,}",
            f"{v} ms (FTS5 bm25(): {largest.get('fts5_bm25_bounded_p95_ms')} ms)",
            "< 20 ms",
            v < 20,
        )
    sc = (res.get("scale") or {}).get("sizes") or []
    if sc:
        rss = max(x["ingest"]["rss_peak_mb"] for x in sc)
        add(
            f"writer RSS peak (up to {sc[-1]['messages']:,} msgs)",
            f"{rss} MB",
            "< 200 MB",
            rss < 200,
        )
    m = (res.get("maintenance") or {}).get("quill")
    if m:
        v = m["VACUUM"]["p99_over_idle"]
        add(
            "producer p99 during VACUUM / idle",
            f"{v}× ({m['VACUUM']['p99_ms']} vs {m['idle']['p99_ms']} ms)",
            "≤ 2×",
            v is not None and v <= 2,
        )
    return out
