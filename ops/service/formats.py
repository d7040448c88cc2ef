"""Number and time-axis formatting for the dashboard's pages (Jinja filters ``num`` and
``usd``, and the usage charts' day axis)."""

from __future__ import annotations

import datetime as dt
from typing import Any


def human_number(value: Any) -> str:
    """``27946415`` → ``"27.9M"``, ``12500`` → ``"12.5k"``, ``812`` → ``"812"``; "-" for None."""
    if value is None:
        return "-"
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:g}"


def usd(value: Any) -> str:
    """A cost in dollars that never rounds a real cost to zero: ``$12.35``, ``$0.0045``,
    ``$0.000012`` (two significant digits under a cent), ``$0`` for zero; "unpriced" for None."""
    if value is None:
        return "unpriced"
    if value == 0:
        return "$0"
    if abs(value) >= 0.01:
        return f"${value:,.2f}"
    return f"${value:.2g}" if abs(value) >= 1e-4 else f"${value:.2e}"


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
