"""What APScheduler calls when a trigger fires: put the job on its huey queue.

APScheduler stores jobs by textual reference (``jobs.schedule:fire``) with plain keyword
arguments, so a persisted schedule survives restarts and code reloads.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .queues import build


def fire(queue_db: str, job: str, params: dict[str, Any]) -> None:
    """Enqueue ``job`` with ``params`` into the queues in ``queue_db``."""
    build(Path(queue_db)).enqueue(job, **params)
