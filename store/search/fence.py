"""A newest-first merge of an index's matches with a bounded scan of the rows the index does not
cover, where the scan reads only the rows the merge can place next (both backends).

A substring query looks in two sources: the trigram index for the rows it wholly covers, and a
scan of every other row. Merged newest first, the merge can place the index's next match only
once the scan has shown it holds nothing newer; asking the scan for *n matches* instead makes it
read until it has found them, which, when the matches are mostly in covered rows, is every
uncovered row down to the scan's bound before the page gets its first hit. Here the scan is
asked for the rows *above a fence* instead (``Scan.above``): the id of an index match the merge
will place next. A page filled by index matches then reads, of the uncovered rows, only those
newer than its last hit (``offer_fenced``).

The scan's bound is the one the unfenced scan had, so the rows found are the same: starting at
the newest row, each match found must be among the ``max_rows`` rows just below the previous
one (the first among the newest ``max_rows``); the scan ends at the first gap wider than that.
How the rows are read (window by window, a batch at a time) does not change which are found.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator

from quill.store.search.group import COUNT_MAX, MAX_BATCH, Page

#: ``fetch(below, lo, n, cap)``: at most ``n`` matching rows ``(id, display id, session id)``
#: with ``lo <= id < below``, newest first, among the newest ``cap`` rows of that range (``cap``
#: None: every row of it); None when the source could not be read, which ends the scan.
Fetch = Callable[[int, int, int, "int | None"], "list[tuple] | None"]
#: ``count(below, lo, cap)``: rows (matching or not) with ``lo <= id < below``, at most ``cap``.
Count = Callable[[int, int, int], int]


class Scan:
    """A bounded newest-first scan read down to fences (see the module doc).

    ``top``: the newest id (0: an empty store); ``first``: matches the first read asks for
    (reads double up to ``group.MAX_BATCH``); ``max_rows``: the bound (rows below a match
    within which the next must lie). Raises whatever ``fetch`` and ``count`` raise."""

    def __init__(  # noqa: D107 - see class doc
        self, fetch: Fetch, count: Count, *, top: int, first: int, max_rows: int
    ):
        self._fetch, self._count, self._max = fetch, count, max_rows
        self._batch = first
        # Rows below ``_anchor`` (the last match found, or above the newest row) are within
        # the bound while fewer than ``max_rows`` rows lie between; ``_below`` is where the
        # scan goes on (every row from it up to the anchor was read and holds no match);
        # ``_used``: the rows in [_below, _anchor), None when not counted yet.
        self._anchor = self._below = top + 1
        self._used: int | None = 0
        self.done = False

    def above(self, fence: int) -> Iterator[tuple]:
        """The scan's matches with ``id >= fence``, newest first, read as consumed; once
        exhausted, the next call goes on below ``fence``."""
        while not self.done and self._below > fence:
            # The ids are distinct integers: at most (anchor - fence) rows lie in the window,
            # so when that is within the bound no row of it can be past the bound.
            near = self._anchor - fence <= self._max
            cap: int | None = None  # near: the whole window, read in one walk down the key
            if not near:
                if self._used is None:
                    self._used = self._count(self._anchor, self._below, self._max)
                cap = self._max - self._used
                if cap <= 0:
                    self.done = True
                    return
            rows = self._fetch(self._below, fence, self._batch, cap)
            if rows is None:
                self.done = True
                return
            yield from rows
            if len(rows) == self._batch:  # the window may hold more: go on below the last
                self._anchor = self._below = rows[-1][0]
                self._used = 0
                self._batch = min(self._batch * 2, MAX_BATCH)
                continue
            # Every match among the rows read was returned.
            read = None if cap is None else self._count(self._below, fence, cap)
            if read is not None and cap is not None and read >= cap:
                # The bound stopped the read inside the window (or at its last row).
                if not rows:
                    self.done = True  # no match within the bound: the scan ends here
                    return
                self._anchor = self._below = rows[-1][0]  # a new anchor: read on below it
                self._used = 0
                continue
            if rows:
                self._anchor, self._used = rows[-1][0], None
            elif read is not None and self._used is not None:
                self._used += read
            else:
                self._used = None
            self._below = fence


def offer_fenced(page: Page, index: Iterable[tuple], scan: Scan) -> bool:
    """Offer the rows of ``index`` (``(id, display id, session id)``, newest first) and of
    ``scan`` merged newest first to ``page`` until it is ``done``; True when every row was
    offered. The scan is read down to the index match that ends the current group of index
    rows (groups double from one row, up to what the page still wants and ``group.MAX_BATCH``),
    so it reads little past the window the page placed; with the index exhausted, it reads
    to its own end."""
    rows = iter(index)
    ahead = 1
    while True:
        held = list(itertools.islice(rows, ahead))
        last = len(held) < ahead
        fence = 0 if last else held[-1][0]
        for _fid, mid, sid in heapq.merge(held, scan.above(fence), key=lambda row: -row[0]):
            page.offer(mid, sid)
            if page.done:
                return False
        if last:
            return True
        ahead = max(1, min(ahead * 2, MAX_BATCH, _wanted(page)))


def _wanted(page: Page) -> int:
    """Offers that may finish ``page``: the hits it lacks, or the matches its count lacks
    (a capped page may need more; the group after this one is then sized again)."""
    if not page.full:
        return page.limit - len(page.ids)
    return COUNT_MAX - len(page.seen) if page.count else 1
