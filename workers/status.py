"""The writer's chunk-commit latency histogram (published in its status, exported by
/metrics). Run-directory files themselves are owned by ``quill.home.RunDir``."""

from __future__ import annotations

from typing import Any

#: Upper bounds (seconds) of the writer's chunk-commit latency histogram buckets.
COMMIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def observe(h: dict[str, Any], seconds: float) -> None:
    """Add one latency (seconds) to a histogram ``{"counts": [one per bucket of
    COMMIT_BUCKETS_S, cumulative as Prometheus buckets are], "count", "sum"}`` in place."""
    for i, bound in enumerate(COMMIT_BUCKETS_S):
        if seconds <= bound:
            h["counts"][i] += 1
    h["count"] += 1
    h["sum"] += seconds
