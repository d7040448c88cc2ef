"""The arguments of a store search, defined once for both backends' ``search_page``
(``store.search.run`` for SQLite, ``store.postgres.search`` for PostgreSQL), and the start
both make of them: the order checked, the query planned, the kinds resolved and the page
made (``begin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from quill.store.search import group
from quill.store.search import plan as query
from quill.store.search.candidates import _filters, _kinds

#: Result orders: newest first, or ranked over the newest matches (``store.search.rank``).
ORDERS = ("newest", "relevance")


@dataclass(frozen=True)
class SearchArgs:
    """``search_page``'s keyword arguments (the store contract's search filters): at most
    ``limit`` hits, at most ``per_session`` from one session (None or 0: no cap; ignored with
    ``session_id``); ``role``, ``source``, ``since``/``until`` (epoch seconds) filter;
    ``projection`` (display, model, audit) decides what is visible; ``substring`` searches
    substrings instead of words; ``context`` adds each hit's neighbours; ``kinds`` (text,
    tool, reasoning; None: all) limits where to look; ``order`` is one of ``ORDERS``;
    ``count=False`` stops at a full page (no total wanted)."""

    limit: int = 20
    session_id: str | None = None
    role: str | None = None
    source: str | None = None
    projection: str = "display"
    since: float | None = None
    until: float | None = None
    substring: bool = False
    context: bool = True
    kinds: list[str] | None = None
    order: str = "newest"
    per_session: int | None = None
    count: bool = True

    @property
    def filters(self) -> tuple[Any, ...]:
        """``(session_id, role, source, since, until)``: what ``candidates._filters`` takes
        after the projection."""
        return self.session_id, self.role, self.source, self.since, self.until


class Start(NamedTuple):
    """What ``begin`` makes of a search: its arguments, plan, kinds, page, and the filter
    condition (SQL over rows ``m`` and sessions ``s``) with its arguments."""

    a: SearchArgs
    plan: query.Plan
    kinds: tuple[str, ...]
    page: group.Page
    cond: str
    args: list[Any]


def begin(text: str, kw: dict[str, Any]) -> Start | dict[str, Any]:
    """The ``Start`` of a search of ``text`` with keyword arguments ``kw`` (``SearchArgs``),
    or the empty result (``group.empty``) when nothing can match (a query with no term,
    ``limit`` ≤ 0). Raises ``TypeError`` for a name that is not a search argument,
    ``ValueError`` for an unknown order, kind or projection, a ``since``/``until`` that is not
    a finite number within 64 bits, and for a ranked query that is
    not a word query (substring, CJK and scan routes have no word index to rank by)."""
    a = SearchArgs(**kw)
    for name, bound in (("since", a.since), ("until", a.until)):
        # NaN compares as NULL on SQLite (nothing matches) but above every number on
        # PostgreSQL; an int past 64 bits overflows SQLite's binding only: refuse both alike.
        if bound is not None and not (-(2.0**63) < bound < 2.0**63):
            raise ValueError(f"search {name} must be finite epoch seconds, got {bound!r}")
    if a.order not in ORDERS:
        raise ValueError(f"search order must be one of {list(ORDERS)}, got {a.order!r}")
    plan = query.plan(text, substring=a.substring)
    kinds = _kinds(a.kinds)
    if a.order == "relevance" and plan.kind not in ("fts", "none"):
        raise ValueError(
            f"ranked search needs a word query; {text!r} goes to the {plan.kind} route"
        )
    cap = None if a.session_id is not None else a.per_session
    if plan.kind == "none" or a.limit <= 0:
        return group.empty(cap)
    cond, args = _filters(a.projection, *a.filters)
    return Start(a, plan, kinds, group.Page(a.limit, cap, a.count), cond, args)
