"""Render a results JSON as Markdown tables: ``python -m bench.report bench/out/results.json``.

Used to write the measured part of ``bench/RESULTS.md``; the notes around it are written by
hand from the same run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: Column heads shared by this Markdown report and the console tables (bench/tables.py).
INGEST_COLUMNS = (
    "system",
    "batch",
    "procs",
    "msgs/s",
    "p50 ms",
    "p99 ms",
    "CPU ms/call",
    "Quill ×",
    "p99 ÷ bare (1 proc)",
    "p99 ÷ bare (same procs)",
    "errors",
)
SEARCHABLE_COLUMNS = ("chunk", "rows/txn", "Quill msgs/s", "raw FTS msgs/s", "Quill / raw")
SCALE_COLUMNS = (
    "messages",
    "drain msgs/s",
    "writer RSS MB",
    "spool MiB",
    "db MiB",
    "rare p50 ms",
    "common p50 ms",
    "prune 10 % s",
    "VACUUM s",
)


def _f(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,d}"
    return str(v)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render(res: dict[str, Any]) -> str:
    m = res["machine"]
    parts = [
        f"Profile `{res['profile']}`, {m['date']}; {m['nproc']} cores ({m.get('cpu', '?')}), "
        f"{m.get('ram_gib')} GiB RAM, /tmp on {m.get('tmp_fs')}; Python {m['python']}; "
        f"apsw {m['apsw']} (SQLite {m['sqlite_apsw']}); stdlib sqlite3 {m['sqlite_stdlib']}; "
        f"openai-agents {m.get('openai-agents')}; langgraph-checkpoint-sqlite "
        f"{m.get('langgraph-checkpoint-sqlite')}; suite took {res.get('elapsed_s')} s.",
        "",
    ]
    parts += [
        "### Targets",
        "",
        _table(
            ["target", "measured", "goal", "result"],
            [
                [
                    t["target"],
                    t["measured"],
                    t["goal"],
                    t["result"] + (f" ({t['note']})" if t["note"] else ""),
                ]
                for t in res["targets"]
            ],
        ),
        "",
    ]
    if res.get("ingest"):
        parts += [
            "### §1 Acknowledged-durable ingest (real messages)",
            "",
            _table(
                list(INGEST_COLUMNS),
                [
                    [
                        r["system"],
                        r["batch"],
                        r["procs"],
                        r["msgs_per_s"],
                        r["p50_ms"],
                        r["p99_ms"],
                        r["cpu_ms_per_call"],
                        r["quill_speedup"],
                        r.get("p99_over_bare_1"),
                        r.get("p99_over_bare_same_procs"),
                        r["errors"],
                    ]
                    for r in res["ingest"]["rows"]
                ],
            ),
            "",
        ]
        for procs, b in (res["ingest"].get("bare_fsync") or {}).items():
            parts.append(
                f"Bare 4 KiB write+fdatasync, {procs} process(es), same run: p50 {b['p50_ms']} ms, "
                f"p99 {b['p99_ms']} ms."
            )
        for k, v in res["ingest"]["skipped"].items():
            parts.append(f"Skipped {k}: {v}")
    if res.get("searchable"):
        s = res["searchable"]
        parts += [
            f"### §2 Searchable ingest ({s['messages']:,} real messages; median of runs)",
            "",
            _table(
                list(SEARCHABLE_COLUMNS),
                [
                    [
                        e["chunk"],
                        e["effective_rows_per_txn"],
                        e["quill"]["msgs_per_s"],
                        e["raw_fts"]["msgs_per_s"],
                        e["quill_vs_raw_fts"],
                    ]
                    for e in s["sweep"]
                ],
            ),
            "",
        ]
        a = s["at500"]
        parts += [
            f"At chunk 500: Quill {a['quill']:,.0f}/s, raw FTS ceiling {a['raw_fts']:,.0f}/s, "
            f"no-FTS ceiling {a['raw_nofts']:,.0f}/s, naive FTS writer {a['naive']:,.0f}/s → "
            f"Quill is {a['vs_naive']}× the naive writer, "
            f"{round(a['vs_raw_fts'] * 100)} % of the raw FTS ceiling, "
            f"{round(a['vs_raw_nofts'] * 100)} % of the no-FTS ceiling.",
            "",
        ]
    for sr in res.get("search") or []:
        parts += [
            f"### §3 Search at {sr['messages']:,} synthetic messages (limit 20, warm)",
            "",
            _table(
                [
                    "query",
                    "Quill p50 ms",
                    "Quill p95 ms",
                    "hits",
                    "Quill p95 ÷ bare FTS5 p95",
                    "naive p50 ms",
                    "naive ÷ Quill",
                ],
                [
                    [
                        k,
                        v["p50_ms"],
                        v["p95_ms"],
                        v["hits"],
                        v.get("over_bare_p95"),
                        ((sr.get("naive") or {}).get(k) or {}).get("p50_ms"),
                        (sr.get("naive_over_quill_p50") or {}).get(k),
                    ]
                    for k, v in sr["quill"].items()
                    if "p50_ms" in v
                ],
            ),
            "",
        ]
        for key in [k for k in sr["quill"] if k.startswith(("stages", "cpu"))]:
            st = sr["quill"].get(key)
            if st:
                parts += [f"{key} (ms): " + ", ".join(f"{k} {v}" for k, v in st.items()), ""]
    if res.get("maintenance"):
        mt = res["maintenance"]
        rows = []
        for who in ("quill", "naive"):
            for ph in ("idle", "VACUUM", "FTS optimize", "TRUNCATE checkpoint"):
                r = mt[who][ph]
                rows.append(
                    [
                        who,
                        ph,
                        r["seconds"],
                        r["n"],
                        r["p50_ms"],
                        r["p99_ms"],
                        r["max_ms"],
                        r.get("p99_over_idle"),
                        r.get("fsync_probe_p99_ms"),
                    ]
                )
        parts += [
            f"### §4 Producer latency under maintenance ({mt['producers']} producers, batch 10, "
            f"{mt['messages']:,}-message store)",
            "",
            _table(
                [
                    "system",
                    "phase",
                    "seconds",
                    "samples",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "p99 ÷ idle",
                    "bare fsync p99 ms",
                ],
                rows,
            ),
            "",
        ]
    if res.get("scale"):
        sc = res["scale"]
        parts += [
            "### §5 Scale (synthetic messages)",
            "",
            _table(
                list(SCALE_COLUMNS),
                [
                    [
                        x["messages"],
                        x["ingest"]["msgs_per_s"],
                        x["ingest"]["rss_peak_mb"],
                        x["ingest"]["spool_bytes"] / 2**20,
                        x["ingest"]["db_bytes"] / 2**20,
                        ((x.get("search") or {}).get("rare word") or {}).get("p50_ms"),
                        ((x.get("search") or {}).get("common word") or {}).get("p50_ms"),
                        (x.get("prune_vacuum") or {}).get("prune_s"),
                        (x.get("prune_vacuum") or {}).get("vacuum_s"),
                    ]
                    for x in sc["sizes"]
                ],
            ),
            "",
        ]
        parts += [
            f"- {k}: exponent {g['exponent']} → **{g['verdict']}**" for k, g in sc["growth"].items()
        ]
        parts.append("")
    if (res.get("searchable") or {}).get("profile_chunk500"):
        parts += [
            "### Profile: one 500-row-chunk drain (cProfile, top by own time)",
            "",
            "```",
            res["searchable"]["profile_chunk500"],
            "```",
            "",
        ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(json.load(open(sys.argv[1] if len(sys.argv) > 1 else "bench/out/results.json"))))
