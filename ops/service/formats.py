"""Number and time-axis formatting for the dashboard's pages: the Jinja filters ``num`` and
``usd`` (``quill.ops.human``, the CLI's rule too) and the usage charts' day axis."""

from __future__ import annotations

import datetime as dt
from typing import Any

from quill.ops.human import human_number, usd

__all__ = ["day_axis", "human_number", "usd"]


def day_axis(per_day: list[dict[str, Any]], since: float | None) -> list[dict[str, Any]]:
    """``per_day`` rows (``day`` = ``YYYY-MM-DD``) on a time axis: one slot per calendar day
    from ``since`` (or the first day with usage) to the last day with usage, ``{"day", "row"}``
    with ``row`` None on a day without usage (drawn as a gap, not squeezed out)."""
    if not per_day:
        return []
    rows = {r["day"]: r for r in per_day if r.get("day")}
    first = dt.date.fromisoformat(min(rows))
    if since is not None:
        first = min(first, dt.datetime.fromtimestamp(since, dt.UTC).date())
    last = dt.date.fromisoformat(max(rows))
    span = (last - first).days + 1
    days = [(first + dt.timedelta(days=i)).isoformat() for i in range(span)]
    return [{"day": d, "row": rows.get(d)} for d in days]
