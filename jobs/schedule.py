"""What APScheduler calls when a trigger fires: put the job on its huey queue.

APScheduler stores jobs by textual reference (``jobs.schedule:fire``) with plain keyword
arguments, so a persisted schedule survives restarts and code reloads.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .queues import build


def fire(queue_db: str, job: str, params: dict[str, Any], queue_url: str | None = None,
         host_id: str = "local") -> None:
    """Enqueue ``job`` with ``params`` into the queues in ``queue_db``, or on the shared
    Redis at ``queue_url``: a worker job on the shared worker queue (any host's consumer), a
    store job on host ``host_id``'s store queue (the firing leader's own writer)."""
    build(Path(queue_db), url=queue_url, host_id=host_id).enqueue(job, **params)
