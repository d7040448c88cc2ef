"""How numbers read to a person, the same in the CLI's tables and the dashboard's pages
(``--json`` and the API keep the exact values): ``human_number`` for counts, ``usd`` for
costs, ``count`` for a number of things, ``figures`` for a job's or check's figures."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

#: Significant digits a cost under a cent keeps (``$0.0045``, ``$0.000012``).
COST_DIGITS = 2


def human_number(value: Any) -> str:
    """``27946415`` → ``"27.9M"``, ``12500`` → ``"12.5k"``, ``812`` → ``"812"``; "-" for None."""
    if value is None:
        return "-"
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:g}"


def usd(value: Any) -> str:
    """A cost in dollars (float) that never rounds a real cost to zero: cents from a cent up
    (``$12.35``, ``$1,234.50``), ``COST_DIGITS`` significant digits below, in plain
    notation (``$0.0045``, ``$0.000012``, ``$0.00000034``); ``$0`` for zero, "unpriced"
    for None."""
    if value is None:
        return "unpriced"
    if value == 0:
        return "$0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value >= 0.01:
        return f"{sign}${value:,.2f}"
    # Rounded to significant digits, then written out without an exponent.
    return f"{sign}${Decimal(f'{value:.{COST_DIGITS}g}'):f}"


def figures(values: Any) -> str:
    """A dict of figures as text, never a Python ``repr``: ``mode=TRUNCATE, wal_bytes=0,
    blocked=false``. Strings bare, other values as JSON (``true``, ``null``, ``[1, 2]``);
    empty for an empty dict or None; anything else as ``str``."""
    if not values:
        return ""
    if not isinstance(values, dict):
        return str(values)
    return ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)}"
        for k, v in values.items()
    )


def count(n: Any, noun: str, plural: str | None = None) -> str:
    """``n`` things with the noun agreeing: ``1 session``, ``2 sessions``, ``0 sessions``;
    ``plural`` for an irregular one (``count(3, "batch", "batches")``). ``n`` as given (a
    count that is None reads ``? sessions``, never ``None``)."""
    if n is None:
        return f"? {plural or noun + 's'}"
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def store_counts(figures: dict[str, Any]) -> str:
    """A store's ``sessions`` and ``messages`` figures: ``1 session, 2 messages``."""
    return f"{count(figures['sessions'], 'session')}, {count(figures['messages'], 'message')}"


def ago(seconds: float) -> str:
    """A duration for a sentence: ``1.5 d``, ``2.0 h``, ``3.0 min``, ``42 s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
