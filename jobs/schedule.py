"""What APScheduler calls when a trigger fires: put the job on its huey queue.

APScheduler stores jobs by textual reference (``jobs.schedule:fire``) with plain keyword
arguments, so a persisted schedule survives restarts and code reloads.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .queues import build


def fire(queue_db: str, job: str, params: dict[str, Any], queue_url: str | None = None) -> None:
    """Enqueue ``job`` with ``params`` into the queues in ``queue_db``, or on the shared
    Redis at ``queue_url`` (its worker queue, which every host's consumer serves)."""
    build(Path(queue_db), url=queue_url).enqueue(job, **params)
