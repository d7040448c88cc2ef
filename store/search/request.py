"""The arguments of a store search, defined once for both backends' ``search_page``
(``store.search.run`` for SQLite, ``store.postgres.search`` for PostgreSQL), and the start
both make of them: the order checked, the query planned, the kinds resolved and the page
made (``begin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quill.store.search import group
from quill.store.search import plan as query
from quill.store.search.candidates import _kinds

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


def begin(
    text: str, a: SearchArgs
) -> tuple[query.Plan, tuple[str, ...], group.Page] | dict[str, Any]:
    """``(plan, kinds, page)`` for a search of ``text`` with ``a``, or the empty result
    (``group.empty``) when nothing can match (a query with no term, ``limit`` ≤ 0). Raises
    ``ValueError`` for an unknown order or kind, and for a ranked query that is not a word
    query (substring, CJK and scan routes have no word index to rank by)."""
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
    return plan, kinds, group.Page(a.limit, cap, a.count)
