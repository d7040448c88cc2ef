"""The shape of one ``quill doctor`` check and the small formatters its details share."""

from __future__ import annotations

import time
from typing import Any


def version(text: str) -> tuple[int, ...]:
    """``"3.51.3"`` → ``(3, 51, 3)`` (the first three numbers)."""
    return tuple(int(x) for x in text.split(".")[:3])


def when(ts: float) -> str:
    """Epoch seconds as ``YYYY-mm-dd HH:MM:SS UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def pending_text(pending: dict[str, int] | None) -> str:
    """Tasks waiting per queue as text: ``store 1, worker 0 pending``; ``pending unknown``
    when they could not be counted (never ``None pending`` or a dict's repr)."""
    if pending is None:
        return "pending unknown"
    return ", ".join(f"{q} {n}" for q, n in pending.items()) + " pending"


def check(name: str, ok: bool, detail: str, *, warn_only: bool = False) -> dict[str, Any]:
    """One check's result: ``{"check", "status", "detail"}``; ``status`` is ``ok``, else
    ``warn`` (``warn_only``) or ``fail``."""
    return {
        "check": name,
        "status": "ok" if ok else ("warn" if warn_only else "fail"),
        "detail": detail,
    }


def overdue_check(overdue: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``overdue jobs`` check (a warning) over ``overdue.overdue_jobs``'s items."""
    return check(
        "overdue jobs",
        not overdue,
        "; ".join(f"{o['job']}: {o['reason']}" for o in overdue)
        or "every scheduled job ran within twice its period",
        warn_only=True,
    )
