"""Usage totals: tokens and cost grouped by session, model, source, task, provider and day.

Rules: each row is one model call already counted once (``usage.response_id``
is unique); ``cost_usd`` sums priced rows only and ``unpriced`` counts the rows without a
price, so an unknown model never reads as $0. A group whose rows are all unpriced has
``cost_usd`` None. Days are UTC calendar days of the call's ``ts``.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.apply.usage import TOKEN_FIELDS

#: Group keys and the SQL expression each groups by (``u`` = usage, ``s`` = sessions).
GROUPS = {
    "session": "u.session_id",
    "model": "u.model",
    "source": "coalesce(s.source, u.source)",
    "task": "u.task",
    "provider": "u.provider",
    "day": "u.day",
}
TOTAL_KEYS = ("calls", *TOKEN_FIELDS, "cost_usd", "unpriced")
# Portable to the PostgreSQL store: sums cast back to integers (PostgreSQL's sum of bigint is
# numeric), no boolean sums.
_SUMS = ", ".join(
    [
        "count(*)",
        *(f"CAST(sum(u.{f}) AS BIGINT)" for f in TOKEN_FIELDS),
        "sum(u.cost_usd)",
        "sum(CASE WHEN u.cost_usd IS NULL THEN 1 ELSE 0 END)",
    ]
)

__all__ = ["GROUPS", "TOTAL_KEYS", "empty_totals", "session_totals", "totals"]


def totals(
    conn: apsw.Connection,
    by: tuple[str, ...] = (),
    *,
    since: float | None = None,
    until: float | None = None,
    session_id: str | None = None,
    source: str | None = None,
    model: str | None = None,
    task: str | None = None,
    session_ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Usage totals per group of ``by`` (keys of ``GROUPS``; empty = one grand total), each a
    dict of the group keys plus ``TOTAL_KEYS`` (tokens, ``cost_usd`` in USD or None when
    nothing in the group is priced, ``unpriced`` = calls without a price). Filters: calls
    with ``since <= ts <= until`` (epoch s), one session (or ``session_ids``, ≤ 500), source,
    model, task. Ordered by
    the group keys. Raises ``ValueError`` for an unknown group key."""
    bad = [b for b in by if b not in GROUPS]
    if bad:
        raise ValueError(f"unknown usage grouping {bad[0]!r}; choose from {', '.join(GROUPS)}")
    where, args = ["1=1"], []
    for cond, value in (
        ("u.ts >= ?", since),
        ("u.ts <= ?", until),
        ("u.session_id = ?", session_id),
        (f"{GROUPS['source']} = ?", source),
        ("u.model = ?", model),
        ("u.task = ?", task),
    ):
        if value is not None:
            where.append(cond)
            args.append(value)
    if session_ids is not None:
        where.append(f"u.session_id IN ({', '.join('?' for _ in session_ids)})")
        args.extend(session_ids)
    cols = [GROUPS[b] for b in by]
    sql = (
        f"SELECT {', '.join([*cols, _SUMS])} "
        "FROM usage u LEFT JOIN sessions s ON s.id = u.session_id "
        f"WHERE {' AND '.join(where)}"
        + (f" GROUP BY {', '.join(cols)} ORDER BY {', '.join(cols)}" if cols else "")
    )
    out = []
    for row in conn.execute(sql, args).fetchall():
        item = dict(zip(by, row[: len(by)]))
        item.update(zip(TOTAL_KEYS, row[len(by) :]))
        if item["calls"] == 0:
            continue  # no group (an empty grand total is reported by the caller as zeros)
        for f in TOKEN_FIELDS:
            item[f] = item[f] or 0
        out.append(item)
    return out


def empty_totals() -> dict[str, Any]:
    """Totals of no calls: zero tokens, ``cost_usd`` None."""
    return {"calls": 0, **{f: 0 for f in TOKEN_FIELDS}, "cost_usd": None, "unpriced": 0}


def session_totals(conn: apsw.Connection, session_id: str) -> dict[str, Any]:
    """One session's totals (``TOTAL_KEYS``; ``empty_totals()`` when it has no usage)."""
    rows = totals(conn, session_id=session_id)
    return rows[0] if rows else empty_totals()
