"""Usage totals: tokens and cost grouped by session, model, source, task, provider and day.

Rules: each row is one model call already counted once (``usage.response_id``
is unique); ``cost_usd`` sums priced rows only and ``unpriced`` counts the rows without a
price, so an unknown model never reads as $0. A group whose rows are all unpriced has
``cost_usd`` None. Days are UTC calendar days of the call's ``ts``.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store import paging
from quill.store.apply.usage import TOKEN_FIELDS
from quill.store.errors import BadCursorError

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

__all__ = ["GROUPS", "TOTAL_KEYS", "cursor_key", "empty_totals", "page", "session_totals", "totals"]


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
    limit: int | None = None,
    after: paging.Key | None = None,
) -> list[dict[str, Any]]:
    """Usage totals per group of ``by`` (keys of ``GROUPS``; empty = one grand total), each a
    dict of the group keys plus ``TOTAL_KEYS`` (tokens, ``cost_usd`` in USD or None when
    nothing in the group is priced, ``unpriced`` = calls without a price). Filters: calls
    with ``since <= ts <= until`` (epoch s), one session (or ``session_ids``, ≤ 500), source,
    model, task. Ordered by the group keys, NULL first (on both backends). ``limit``: at most
    that many groups; ``after``: only the groups after that key (a value per ``by``, None for
    NULL: ``_after``). Raises ``ValueError`` for an unknown group key."""
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
    if after is not None and cols:
        cond, values = _after(cols, after)
        where.append(cond)
        args.extend(values)
    order = ", ".join(f"{c} NULLS FIRST" for c in cols)
    sql = (
        f"SELECT {', '.join([*cols, _SUMS])} "
        "FROM usage u LEFT JOIN sessions s ON s.id = u.session_id "
        f"WHERE {' AND '.join(where)}"
        + (f" GROUP BY {', '.join(cols)} ORDER BY {order}" if cols else "")
        + (" LIMIT ?" if limit is not None and cols else "")
    )
    if limit is not None and cols:
        args.append(limit)
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


def _after(cols: list[str], key: paging.Key) -> tuple[str, list[Any]]:
    """The condition (and its arguments) that a row's group ``cols`` sort strictly after
    ``key`` in ``ORDER BY col NULLS FIRST, …``: for some ``i``, the first ``i`` columns equal
    the key's and the next one is greater. NULL is below every value and equal to NULL only
    (``IS NULL``; ``= NULL`` would match nothing), so a NULL group is neither repeated nor
    skipped, and never confused with ``""``."""
    ors, args = [], []
    for i, col in enumerate(cols):
        ands = []
        for c, v in zip(cols[:i], key[:i]):
            ands.append(f"{c} IS NULL" if v is None else f"{c} = ?")
            args.extend(() if v is None else (v,))
        if key[i] is None:
            ands.append(f"{col} IS NOT NULL")
        else:
            ands.append(f"{col} > ?")
            args.append(key[i])
        ors.append("(" + " AND ".join(ands) + ")")
    return "(" + " OR ".join(ors) + ")", args


def cursor_key(after: str, by: tuple[str, ...], **filters: Any) -> paging.Key:
    """The group key the cursor ``after`` of ``page`` (same ``by`` and filters) continues
    after: one text or None (NULL) per ``by``. Raises ``BadCursorError`` for anything else
    (the grand total, one row, has no next page)."""
    key = paging.decode(
        after, "usage", (paging.NULLABLE_STR,) * len(by), paging.scope_of(list(by), filters)
    )
    if not by:
        raise BadCursorError("the grand total is one row: no page follows it")
    return key


def page(
    conn: apsw.Connection,
    by: tuple[str, ...] = (),
    *,
    limit: int,
    after: str | None = None,
    **filters: Any,
) -> dict[str, Any]:
    """One page of ``totals`` (same ``by`` and filters: since, until, session_id, source,
    model, task): ``{"usage": rows, "next": cursor | None}``, at most ``limit`` groups after
    the cursor ``after`` (``store.paging``, listing ``usage``, bound to ``by`` and the filters;
    keyset on the group key, a NULL group value carried as JSON null). The grand total (no
    ``by``) is one row, never paged. Raises ``BadCursorError`` for a cursor of another
    listing, grouping or filter, ``ValueError`` for an unknown group key."""
    scope = paging.scope_of(list(by), filters)
    key = None if after is None else cursor_key(after, by, **filters)
    # one more row than the page says whether another follows (bounded: a bound SQL integer)
    rows = totals(conn, by, limit=min(limit + 1, 2**63 - 1), after=key, **filters)
    more = len(rows) > limit
    del rows[limit:]
    last = tuple(rows[-1][b] for b in by) if more else None
    return {"usage": rows, "next": paging.encode("usage", last, scope) if more else None}


def empty_totals() -> dict[str, Any]:
    """Totals of no calls: zero tokens, ``cost_usd`` None."""
    return {"calls": 0, **{f: 0 for f in TOKEN_FIELDS}, "cost_usd": None, "unpriced": 0}


def session_totals(conn: apsw.Connection, session_id: str) -> dict[str, Any]:
    """One session's totals (``TOTAL_KEYS``; ``empty_totals()`` when it has no usage)."""
    rows = totals(conn, session_id=session_id)
    return rows[0] if rows else empty_totals()
