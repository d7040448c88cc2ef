"""The sections of a results JSON (``bench.run``) as tables, defined once (``sections``) and
rendered twice: as Markdown here (``python -m bench.report bench/out/results.json``, used to
write the measured part of ``bench/RESULTS.md``; the notes around it are written by hand from
the same run) and as rich tables on the console (bench/tables.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any, NamedTuple

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
SEARCH_COLUMNS = (
    "query",
    "Quill p50 ms",
    "Quill p95 ms",
    "hits",
    "Quill p95 ÷ bare FTS5 p95",
    "naive p50 ms",
    "naive ÷ Quill",
)
MAINTENANCE_COLUMNS = (
    "system",
    "phase",
    "seconds",
    "samples",
    "p50 ms",
    "p99 ms",
    "max ms",
    "p99 ÷ idle",
    "bare fsync p99 ms",
)
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
TARGET_COLUMNS = ("target", "measured", "goal", "result")
#: Columns that hold names, not figures (left-aligned on the console).
TEXT_COLUMNS = frozenset(
    {"case", "variant", "system", "phase", "query", "target", "goal", "result"}
)


class Section(NamedTuple):
    """One table of a results JSON: its title, column heads, rows (raw values, formatted by
    ``_f``) and the lines of notes printed after it."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[Any]]
    notes: list[str]


def _f(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,d}"
    return str(v)


def _ingest(g: dict[str, Any]) -> Section:
    keys = ("system", "batch", "procs", "msgs_per_s", "p50_ms", "p99_ms", "cpu_ms_per_call")
    rows = [
        [
            *(r[k] for k in keys),
            r["quill_speedup"],
            r.get("p99_over_bare_1"),
            r.get("p99_over_bare_same_procs"),
            r["errors"],
        ]
        for r in g["rows"]
    ]
    notes = [
        f"Bare 4 KiB write+fdatasync, {procs} process(es), same run: p50 {b['p50_ms']} ms, "
        f"p99 {b['p99_ms']} ms."
        for procs, b in (g.get("bare_fsync") or {}).items()
    ] + [f"Skipped {k}: {v}" for k, v in g["skipped"].items()]
    return Section("§1 Acknowledged-durable ingest (real messages)", INGEST_COLUMNS, rows, notes)


def _searchable(s: dict[str, Any]) -> Section:
    rows = [
        [
            e["chunk"],
            e["effective_rows_per_txn"],
            e["quill"]["msgs_per_s"],
            e["raw_fts"]["msgs_per_s"],
            e["quill_vs_raw_fts"],
        ]
        for e in s["sweep"]
    ]
    a = s["at500"]
    note = (
        f"At chunk 500: Quill {a['quill']:,.0f}/s, raw FTS ceiling {a['raw_fts']:,.0f}/s, "
        f"no-FTS ceiling {a['raw_nofts']:,.0f}/s, naive FTS writer {a['naive']:,.0f}/s → "
        f"Quill is {a['vs_naive']}× the naive writer"
    )
    if "vs_raw_fts" in a and "vs_raw_nofts" in a:
        note += (
            f", {round(a['vs_raw_fts'] * 100)} % of the raw FTS ceiling, "
            f"{round(a['vs_raw_nofts'] * 100)} % of the no-FTS ceiling"
        )
    title = f"§2 Searchable ingest ({s['messages']:,} real messages; median of runs)"
    return Section(title, SEARCHABLE_COLUMNS, rows, [note + "."])


def _search(sr: dict[str, Any]) -> Section:
    rows = [
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
    ]
    notes = [
        f"{key} (ms): " + ", ".join(f"{k} {v}" for k, v in sr["quill"][key].items())
        for key in sr["quill"]
        if key.startswith(("stages", "cpu")) and sr["quill"][key]
    ]
    title = f"§3 Search at {sr['messages']:,} synthetic messages (limit 20, warm)"
    return Section(title, SEARCH_COLUMNS, rows, notes)


def _maintenance(mt: dict[str, Any]) -> Section:
    rows = []
    for who in ("quill", "naive"):
        for ph in ("idle", "VACUUM", "FTS optimize", "TRUNCATE checkpoint"):
            r = mt[who][ph]
            rows.append(
                [who, ph, r["seconds"], r["n"], r["p50_ms"], r["p99_ms"], r["max_ms"]]
                + [r.get("p99_over_idle"), r.get("fsync_probe_p99_ms")]
            )
    title = (
        f"§4 Producer latency under maintenance ({mt['producers']} producers, batch 10, "
        f"{mt['messages']:,}-message store)"
    )
    return Section(title, MAINTENANCE_COLUMNS, rows, [])


def _scale(sc: dict[str, Any]) -> Section:
    rows = []
    for x in sc["sizes"]:
        q, pv, ing = x.get("search") or {}, x.get("prune_vacuum") or {}, x["ingest"]
        rows.append(
            [x["messages"], ing["msgs_per_s"], ing["rss_peak_mb"]]
            + [ing["spool_bytes"] / 2**20, ing["db_bytes"] / 2**20]
            + [(q.get("rare word") or {}).get("p50_ms"), (q.get("common word") or {}).get("p50_ms")]
            + [pv.get("prune_s"), pv.get("vacuum_s")]
        )
    notes = [
        f"{k}: exponent {g['exponent']} → {g['verdict']}"
        for k, g in (sc.get("growth") or {}).items()
    ]
    return Section("§5 Scale (synthetic messages)", SCALE_COLUMNS, rows, notes)


def targets(res: dict[str, Any]) -> Section:
    """The targets with their verdicts (``result``: PASS, FAIL or another word, then a note)."""
    rows = [
        [
            t["target"],
            t["measured"],
            t["goal"],
            t["result"] + (f" ({t['note']})" if t["note"] else ""),
        ]
        for t in res.get("targets", [])
    ]
    return Section("Targets", TARGET_COLUMNS, rows, [])


def sections(res: dict[str, Any]) -> list[Section]:
    """Every section that ran, in order (§1 … §5); the targets are ``targets``."""
    out = []
    if res.get("ingest"):
        out.append(_ingest(res["ingest"]))
    if res.get("searchable"):
        out.append(_searchable(res["searchable"]))
    out += [_search(sr) for sr in res.get("search") or []]
    if res.get("maintenance"):
        out.append(_maintenance(res["maintenance"]))
    if res.get("scale"):
        out.append(_scale(res["scale"]))
    return out


def _markdown(s: Section) -> list[str]:
    out = [f"### {s.title}", "", "| " + " | ".join(s.columns) + " |"]
    out.append("|" + "|".join("---" for _ in s.columns) + "|")
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in s.rows]
    return out + [""] + [line for note in s.notes for line in (note, "")]


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
    for s in [targets(res), *sections(res)]:
        parts += _markdown(s)
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
