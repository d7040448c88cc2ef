"""The arguments of a store search, defined once for both backends' ``search_page``
(``store.search.run`` for SQLite, ``store.postgres.search`` for PostgreSQL), and the start
both make of them: the order checked, the query planned, the kinds resolved and the page
made (``begin``), and the cursor of the page after (``next_cursor``).

Paging (``after``, a ``store.paging`` cursor of the ``search`` listing): a search's pages are
slices of one result, the one the first page saw. Its cursor holds that page's snapshot —
the newest message id then (PostgreSQL's word search: the newest match it walked, as reading
the newest id would cost it a round trip; no row it could see matches above it), the
``upto_id`` of every later page: no row stored later is a candidate of a later page, so
rows added meanwhile never shift one — with the count of hits shown so far and the last
of them (a keyset: the next page starts after that hit; after the count when it is no longer
a match). Every page walks the candidates from the first, so the per-session cap counts the
hits of the pages before exactly as one page holding them all would, and pages give the
same hits in the same order as one big page; the walk reads at most the candidates the
bounded count reads anyway, until a page lies deeper than ``group.COUNT_MAX`` matches. The
cursor is bound to the query and every filter but ``limit`` and ``context`` (its scope): a
cursor of another query is refused (``BadCursorError``). Relevance pages rank by the scores
each page computes: SQLite's BM25 weighs terms by statistics of the whole index, so rows
indexed between two pages can reorder the ranked candidates (PostgreSQL's ``ts_rank`` is
per message: its pages are stable).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from quill.store import paging
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
    ``count=False`` stops at a full page (no total wanted); ``after``: the ``next`` cursor of
    the previous page of the same search (module doc); ``upto_id``: the snapshot, set by
    ``begin`` (from the cursor, else the newest message id)."""

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
    after: str | None = None
    upto_id: int | None = None

    @property
    def filters(self) -> tuple[Any, ...]:
        """``(session_id, role, source, since, until, upto_id)``: what
        ``candidates._filters`` takes after the projection."""
        return self.session_id, self.role, self.source, self.since, self.until, self.upto_id


class Start(NamedTuple):
    """What ``begin`` makes of a search: its arguments, plan, kinds, page, and the filter
    condition (SQL over rows ``m`` and sessions ``s``) with its arguments."""

    a: SearchArgs
    plan: query.Plan
    kinds: tuple[str, ...]
    page: group.Page
    cond: str
    args: list[Any]
    scope: str


def begin(
    text: str, kw: dict[str, Any], newest_id: Callable[[], int | None]
) -> Start | dict[str, Any]:
    """The ``Start`` of a search of ``text`` with keyword arguments ``kw`` (``SearchArgs``),
    or the empty result (``group.empty``) when nothing can match (a query with no term,
    ``limit`` ≤ 0). ``newest_id()``: the store's newest message id (0 when empty), read
    for a first page only (its snapshot; None: the backend gives it to ``next_cursor``
    after the walk, and the first page's walk has no id bound). Raises ``BadCursorError``
    for an ``after`` that is not a cursor of this search; ``TypeError`` for a name that is
    not a search argument, ``ValueError`` for an unknown order, kind or projection, a
    ``since``/``until`` that is not a finite number within 64 bits, and for a ranked query
    that is not a word query (substring, CJK and scan routes have no word index to rank by)."""
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
    scope = paging.scope_of(
        text, a.substring, a.order, a.projection, a.filters[:5], sorted(kinds), cap or None
    )
    skip, anchor = 0, None
    if a.after is not None:  # checked before anything else: a foreign cursor is an error
        upto, skip, anchor = paging.decode(a.after, "search", (int, int, int), scope)
    if plan.kind == "none" or a.limit <= 0:
        return group.empty(cap)
    a = replace(a, upto_id=upto if a.after is not None else newest_id())
    cond, args = _filters(a.projection, *a.filters)
    page = group.Page(a.limit, cap, a.count, skip=max(skip, 0), anchor=anchor)
    return Start(a, plan, kinds, page, cond, args, scope)


def next_cursor(start: Start, exhausted: bool, snapshot: int | None = None) -> str | None:
    """The ``after`` cursor of the page following ``start``'s, once its walk is done
    (``exhausted``: every candidate was offered); None when no hit can follow
    (``group.Page.has_next``). The cursor's snapshot is ``start``'s (``upto_id``), else
    ``snapshot``: an id no row the first page could see as a candidate is above (a backend
    whose first page reads no newest id before its walk, PostgreSQL's word search)."""
    page = start.page
    if not page.has_next(exhausted):
        return None
    shown = page.page_ids
    upto = start.a.upto_id if start.a.upto_id is not None else snapshot
    if upto is None:
        raise ValueError("a first page's search snapshot is unknown")
    return paging.encode("search", (upto, page.start + len(shown), shown[-1]), start.scope)
