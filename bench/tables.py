"""Print a results dict (``bench.run``) as rich tables: one per section that ran, then the
targets with their verdicts. The column lists shared with the Markdown report come from
``bench.report``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .report import INGEST_COLUMNS, SCALE_COLUMNS, SEARCHABLE_COLUMNS, _f


def tables(res: dict[str, Any], console: Console) -> None:
    if res.get("ingest"):
        t = Table(title="§1 Acknowledged-durable ingest (real messages)")
        for c in INGEST_COLUMNS:
            t.add_column(c, justify="right" if c != "system" else "left")
        for r in res["ingest"]["rows"]:
            t.add_row(
                r["system"],
                str(r["batch"]),
                str(r["procs"]),
                _f(r["msgs_per_s"]),
                _f(r["p50_ms"]),
                _f(r["p99_ms"]),
                _f(r["cpu_ms_per_call"]),
                _f(r["quill_speedup"]),
                _f(r.get("p99_over_bare_1")),
                _f(r.get("p99_over_bare_same_procs")),
                str(r["errors"]),
            )
        console.print(t)
        for procs, b in (res["ingest"].get("bare_fsync") or {}).items():
            console.print(
                f"  bare 4 KiB write+fdatasync, {procs} process(es): "
                f"p50 {b['p50_ms']} ms, p99 {b['p99_ms']} ms"
            )
        for k, v in res["ingest"]["skipped"].items():
            console.print(f"  skipped {k}: {v}")
    if res.get("searchable"):
        s = res["searchable"]
        t = Table(
            title="§2 Searchable ingest, spool → committed + FTS-indexed "
            f"({s['messages']:,} real msgs)"
        )
        for c in SEARCHABLE_COLUMNS:
            t.add_column(c, justify="right")
        for e in s["sweep"]:
            t.add_row(
                str(e["chunk"]),
                str(e["effective_rows_per_txn"]),
                _f(e["quill"]["msgs_per_s"]),
                _f(e["raw_fts"]["msgs_per_s"]),
                _f(e["quill_vs_raw_fts"]),
            )
        console.print(t)
        a = s["at500"]
        console.print(
            f"  chunk 500: Quill {a['quill']:,.0f}/s · raw FTS {a['raw_fts']:,.0f}/s · "
            f"no-FTS ceiling {a['raw_nofts']:,.0f}/s · "
            f"naive FTS writer {a['naive']:,.0f}/s (Quill ×{a['vs_naive']})"
        )
    for sr in res.get("search") or []:
        t = Table(title=f"§3 Search at {sr['messages']:,} synthetic msgs (limit 20)")
        for c in (
            "query",
            "Quill p50 ms",
            "Quill p95 ms",
            "hits",
            "÷ bare FTS5 p95",
            "naive p50 ms",
            "naive / Quill",
        ):
            t.add_column(c, justify="right" if c != "query" else "left")
        for k, v in sr["quill"].items():
            if "p50_ms" not in v:
                continue
            nv = (sr.get("naive") or {}).get(k)
            t.add_row(
                k,
                _f(v["p50_ms"]),
                _f(v["p95_ms"]),
                str(v["hits"]),
                _f(v.get("over_bare_p95")),
                _f(nv["p50_ms"]) if nv else "–",
                _f((sr.get("naive_over_quill_p50") or {}).get(k)),
            )
        console.print(t)
        for key in [k for k in sr["quill"] if k.startswith(("stages", "cpu"))]:
            st = sr["quill"].get(key)
            if st:
                console.print(f"  {key} (ms): " + ", ".join(f"{k} {v}" for k, v in st.items()))
    if res.get("maintenance"):
        m = res["maintenance"]
        t = Table(
            title=f"§4 Producer latency under maintenance ({m['producers']} producers, batch 10, "
            f"{m['messages']:,}-msg store)"
        )
        for c in (
            "system",
            "phase",
            "seconds",
            "samples",
            "p50 ms",
            "p99 ms",
            "max ms",
            "p99 / idle",
            "bare fsync p99 ms",
        ):
            t.add_column(c, justify="right" if c not in ("system", "phase") else "left")
        for who in ("quill", "naive"):
            for ph in ("idle", "VACUUM", "FTS optimize", "TRUNCATE checkpoint"):
                r = m[who][ph]
                t.add_row(
                    who,
                    ph,
                    _f(r["seconds"]),
                    str(r["n"]),
                    _f(r["p50_ms"]),
                    _f(r["p99_ms"]),
                    _f(r["max_ms"]),
                    _f(r.get("p99_over_idle")),
                    _f(r.get("fsync_probe_p99_ms")),
                )
        console.print(t)
    if res.get("scale"):
        sc = res["scale"]
        t = Table(title="§5 Scale (synthetic messages)")
        for c in SCALE_COLUMNS:
            t.add_column(c, justify="right")
        for x in sc["sizes"]:
            q = x.get("search") or {}
            pv = x.get("prune_vacuum") or {}
            t.add_row(
                f"{x['messages']:,}",
                _f(x["ingest"]["msgs_per_s"]),
                _f(x["ingest"]["rss_peak_mb"]),
                _f(x["ingest"]["spool_bytes"] / 2**20),
                _f(x["ingest"]["db_bytes"] / 2**20),
                _f((q.get("rare word") or {}).get("p50_ms")),
                _f((q.get("common word") or {}).get("p50_ms")),
                _f(pv.get("prune_s")),
                _f(pv.get("vacuum_s")),
            )
        console.print(t)
        for k, g in (sc.get("growth") or {}).items():
            console.print(f"  {k}: exponent {g['exponent']} → {g['verdict']}")
    t = Table(title="Targets")
    for c in ("target", "measured", "goal", "result"):
        t.add_column(c)
    for x in res.get("targets", []):
        style = {"PASS": "green", "FAIL": "red"}.get(x["result"], "yellow")
        t.add_row(
            x["target"],
            _f(x["measured"]),
            x["goal"],
            f"[{style}]{x['result']}[/{style}]" + (f" ({x['note']})" if x["note"] else ""),
        )
    console.print(t)
