"""``/metrics``: the figures of ``quill.ops.status.health.collect`` in Prometheus text format.

A custom collector reads them at scrape time (nothing is cached or counted here), so the
numbers are exactly those of ``quill status --json`` under ``"metrics"``. Metric names carry
their unit (``_bytes``, ``_seconds``, ``_total``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

from quill.ops.status import health
from quill.ops.status.schedule import STATES as SCHEDULE_STATES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Collector:
    def __init__(self, cfg: Any):
        self.cfg = cfg

    def collect(self) -> Iterator[Metric]:
        m = health.collect(self.cfg)["metrics"]
        gauges = (
            ("spool_pending_bytes", "spool bytes not yet applied by the writer"),
            ("spool_lag_seconds", "age of the oldest unapplied spool record"),
            (
                "spool_cursor_age_seconds",
                "age of the applied cursor the spool figures use (0: the store's own; more: "
                "the one the writer published, the store being unreadable)",
            ),
            ("store_readable", "0 while the store cannot be read (status shows why)"),
            ("quarantined_records", "records in spool/quarantine"),
            (
                "spool_loss_detected",
                "1 while the spool shows acknowledged records lost (a segment missing or "
                "cut short, a line quarantined as damaged; quill spool verify counts them)",
            ),
            ("fts_pending_rows", "message rows not yet in the search index"),
            (
                "writer_halted",
                "1 while the writer is halted (see quill status for the command to run)",
            ),
            ("queue_unavailable", "1 while the job queue (Redis or queue.db) is unreachable"),
            (
                "jobs_overdue",
                "schedules whose next run passed over two minutes ago (no scheduler fired them)",
            ),
            ("disk_free_bytes", "free bytes on the data dir's filesystem"),
            ("watch_pending_files", "watched agent files new or changed since last imported"),
            ("watch_bytes_behind", "bytes of watched agent files not yet imported"),
            ("watch_unreadable_files", "watched agent files that could not be read"),
        )
        for name, doc in gauges:
            if m[name] is None:
                continue  # unknown (no applied cursor anywhere): absent, never a made-up 0
            yield GaugeMetricFamily(f"quill_{name}", doc, value=m[name])
        state = GaugeMetricFamily(
            "quill_schedule_state",
            "1 for the schedule's state, 0 for the others: ok, damaged (schedule.db must be "
            "moved aside), locked (another process holds its lock), unavailable (I/O), "
            "unwritable (next run times held in memory), unknown (a shared job store)",
            labels=["state"],
        )
        for name in SCHEDULE_STATES:
            state.add_metric([name], 1 if m["schedule_state"] == name else 0)
        yield state
        if m["scheduler_waiting_seconds"] is not None:
            yield GaugeMetricFamily(
                "quill_scheduler_waiting_seconds",
                "seconds the live scheduler has waited for its schedule (damaged, locked, "
                "unavailable or unwritable); 0 while it reads and writes it",
                value=m["scheduler_waiting_seconds"],
            )
        for name, doc in (
            ("ops_applied", "spool ops applied by the running writer"),
            ("ops_duplicate", "spool ops skipped as already applied (batch id seen)"),
            ("ops_rejected", "spool ops quarantined by the running writer"),
            ("rows_applied", "message rows written by the running writer"),
        ):
            yield CounterMetricFamily(f"quill_{name}", doc, value=m[f"{name}_total"])
        hist = m["chunk_commit_seconds"]
        yield HistogramMetricFamily(
            "quill_chunk_commit_seconds",
            "seconds to apply and commit one drain chunk",
            buckets=[*[(b, c) for b, c in hist["buckets"].items()], ("+Inf", hist["count"])],
            sum_value=hist["sum"],
        )
        restarts = CounterMetricFamily(
            "quill_worker_restarts", "fleet child exits followed by a restart", labels=["role"]
        )
        for role, n in m["worker_restarts"].items():
            restarts.add_metric([role], n)
        yield restarts
        runs = CounterMetricFamily("quill_job_runs", "recorded job runs", labels=["job", "outcome"])
        took = CounterMetricFamily(
            "quill_job_run_seconds", "total seconds of recorded job runs", labels=["job", "outcome"]
        )
        for row in m["job_runs"]:
            labels = [row["job"], row["outcome"] or "running"]
            runs.add_metric(labels, row["runs"])
            took.add_metric(labels, row["seconds"])
        yield runs
        yield took


def render(cfg: Any) -> bytes:
    """The exposition text for one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(cfg))
    return generate_latest(registry)
