"""A page of search hits capped per session, with a bounded count of every match.

A search walks its candidates best first (newest first, or by rank) and offers each display
id with its session to a ``Page``. The page keeps the first ``limit`` of them, at most
``per_session`` from any one session (so one chatty session cannot fill the whole list and
hide every other session that matches), and counts every distinct match it is offered, per
session and in all, until it holds ``COUNT_MAX`` of them.

Why a bounded count and not an exact total: counting every match of a common word reads
every row that holds it (the whole store, for ``the``), where a page reads only a page's
worth; ``COUNT_MAX`` keeps the cost of the count to at most that many index rows. Below the
bound the total is exact (``total_exact``); at it the total is a lower bound ("1000+"),
unless every candidate was read anyway (a capped page that never filled).
Filling a capped page may need more candidates than the count does (the newest 5,000 matches
may all be one session's); that walk stops after ``FILL_MAX`` candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

#: Matches counted at most (``total`` is exact below this, a lower bound at it).
COUNT_MAX = 1000
#: Candidates offered at most while a capped page still has room (then the page is short).
FILL_MAX = 20_000
#: Default hits per session on the CLI, HTTP and dashboard (``None``/0: no cap).
PER_SESSION = 3
#: Rows a newest-first batch asks for at most (batches double up to it).
MAX_BATCH = 1000


class Page:
    """Collects display ids (``offer``) into a capped page and counts matches.

    ``limit``: hits wanted (>= 1); ``per_session``: most hits from one session (None or 0:
    no cap); ``count``: False stops as soon as the page is full (no total wanted).
    ``skip`` and ``anchor`` make a later page of the same search (``store.search.request``'s
    cursor): the walk is the first page's, so the per-session cap counts the hits of the
    pages before, and this page holds the ``limit`` hits after ``anchor`` (the previous
    page's last hit; after the first ``skip`` hits when it is no longer a match). One hit
    past the page is kept when the walk meets it (``has_next``); the walk is not made
    longer to find it."""

    def __init__(  # noqa: D107 - see class doc
        self,
        limit: int,
        per_session: int | None,
        count: bool = True,
        *,
        skip: int = 0,
        anchor: int | None = None,
    ):
        self.page_limit = limit
        self.skip, self.anchor = skip, anchor
        #: hits the walk looks for: the pages before and this one
        self.limit = skip + limit
        self.count = count
        self.per_session = per_session or None
        self.ids: list[int] = []
        self.session_of: dict[int, str] = {}
        self.seen: set[int] = set()
        #: the largest row id offered through ``offer_rows`` (a first page's snapshot)
        self.newest_row = 0
        self.shown: dict[str, int] = {}
        self.matches: dict[str, int] = {}  # in first-seen order (dicts keep insertion order)

    def offer(self, display_id: int, session_id: str) -> None:
        """Count ``display_id`` (once) and put it on the page if the page and its session
        have room."""
        if display_id in self.seen:
            return
        self.seen.add(display_id)
        self.matches[session_id] = self.matches.get(session_id, 0) + 1
        shown = self.shown.get(session_id, 0)
        # one id past ``limit`` tells a next page without walking further for it
        if len(self.ids) <= self.limit and (self.per_session is None or shown < self.per_session):
            self.ids.append(display_id)
            self.session_of[display_id] = session_id
            self.shown[session_id] = shown + 1

    @property
    def full(self) -> bool:
        """True when the page has ``limit`` hits."""
        return len(self.ids) >= self.limit

    @property
    def done(self) -> bool:
        """True when no further candidate can change the page and the count is at its bound."""
        filled = self.full or len(self.seen) >= FILL_MAX
        return filled and (not self.count or len(self.seen) >= COUNT_MAX)

    @property
    def start(self) -> int:
        """Where this page starts among the collected ids: after ``anchor`` when it is one
        of them, else after the first ``skip``."""
        if self.anchor is not None and self.anchor in self.session_of:
            return self.ids.index(self.anchor) + 1
        return self.skip

    @property
    def page_ids(self) -> list[int]:
        """The display ids of this page's hits, in order."""
        return self.ids[self.start : self.start + self.page_limit]

    def has_next(self, exhausted: bool) -> bool:
        """Whether a next page may hold hits: one was met past this page, or this page is
        full and the walk stopped before its end (``exhausted`` False: the next page's walk
        goes on; it may find none). A short page is the last: its walk found no more."""
        if len(self.ids) > self.start + self.page_limit:
            return True
        return not exhausted and len(self.ids) >= self.start + self.page_limit

    def result(
        self, hits: list[dict[str, Any]], exhausted: bool, titles: dict[str, Any]
    ) -> dict[str, Any]:
        """The search result:

        * ``hits``: the page's hit dicts (of ``page_ids``), in order;
        * ``total``: distinct matches counted; ``total_exact``: True when every candidate
          was counted (``exhausted``), else ``total`` is a lower bound (>= ``COUNT_MAX``);
        * ``more``: matches exist beyond ``hits`` and the pages before them (hits of a
          later page, or matches the per-session cap leaves out); ``per_session``: the cap
          (None: none);
        * ``sessions``: one entry per session with a match counted, in order of its best
          hit: ``session_id``, ``title`` (from ``titles``), ``shown`` (hits on this page)
          and ``matches`` (its matches counted; exact when ``total_exact``).

        ``next`` (the cursor of the next page, None when no hit follows) is the caller's
        (``store.search.request.next_cursor``)."""
        total = len(self.seen)
        exact = exhausted  # every candidate counted (a page that never filled reads them all)
        on_page: dict[str, int] = {}
        for mid in self.page_ids:
            sid = self.session_of[mid]
            on_page[sid] = on_page.get(sid, 0) + 1
        return {
            "hits": hits,
            "total": total,
            "total_exact": exact,
            "more": total > self.start + len(hits) or not exact,
            "per_session": self.per_session,
            "sessions": [
                {
                    "session_id": sid,
                    "title": titles.get(sid),
                    "shown": on_page.get(sid, 0),
                    "matches": n,
                }
                for sid, n in self.matches.items()
            ],
        }


def titles(conn: Any, session_ids: list[str]) -> dict[str, Any]:
    """``{session_id: title}`` of ``session_ids`` (one query; works on both backends)."""
    if not session_ids:
        return {}
    out: dict[str, Any] = {}
    for at in range(0, len(session_ids), 500):
        part = session_ids[at : at + 500]
        marks = ", ".join("?" for _ in part)
        out.update(
            conn.execute(f"SELECT id, title FROM sessions WHERE id IN ({marks})", part).fetchall()
        )
    return out


def empty(per_session: int | None) -> dict[str, Any]:
    """The result of a search that has nothing to look for (no next page)."""
    return {**Page(1, per_session).result([], True, {}), "next": None}


def first_batch(page: Page) -> int:
    """Rows the first newest-first batch asks for: a page's worth, or at least 50 when the
    page counts (the count reads on past a full page)."""
    return max(page.limit, 50) if page.count else page.limit


def newest_batches(
    fetch: Callable[[int, int], list[tuple]], first: int, *, scan: bool, below: int = 2**62
) -> Iterator[tuple]:
    """Matching rows newest first, a batch at a time, read only as they are consumed (both
    backends). ``fetch(below, n)``: at most ``n`` rows whose id (``row[0]``) is below
    ``below``, newest first. Batches double from ``first`` up to ``MAX_BATCH``. An index
    batch shorter than asked is every row its conditions admit, so it is the last (one query
    saved for rare words); a ``scan`` batch reads a window of rows, so a scan goes on until
    a window holds no match. ``below``: the first batch's bound (a search's snapshot, past
    its newest id)."""
    batch = first
    while True:
        rows = fetch(below, batch)
        yield from rows
        if not rows or (not scan and len(rows) < batch):
            return
        below = rows[-1][0]
        batch = min(batch * 2, MAX_BATCH)


def offer_rows(page: Page, rows: Iterable[tuple]) -> bool:
    """Offer ``rows`` (each ``(id, display id, session id)``, newest first) to ``page`` until
    it is ``done``; True when every row was offered. (Two sources merged newest first:
    ``store.search.fence.offer_fenced``.)"""
    for fid, mid, sid in rows:
        if fid > page.newest_row:
            page.newest_row = fid
        page.offer(mid, sid)
        if page.done:
            return False
    return True
