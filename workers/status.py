"""Small JSON status files in ``run/`` that each worker publishes about itself, atomically
(write a temp file, rename), so ``quill status`` and the supervisor can read them without
talking to the worker. One file per worker; only that worker writes it."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def publish(path: Path, data: dict[str, Any]) -> None:
    """Atomically replace ``path`` with ``data`` plus ``pid`` and ``updated_at`` (epoch s)."""
    body = {**data, "pid": os.getpid(), "updated_at": time.time()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def try_publish(path: Path, data: dict[str, Any]) -> bool:
    """``publish``, but a full or read-only disk is not fatal: status is advisory, and the
    process that publishes it must keep doing its real work. Returns False on failure."""
    try:
        publish(path, data)
        return True
    except OSError:
        return False


def read(path: Path) -> dict[str, Any] | None:
    """The last published status, or None if there is none (or it is unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
