"""Message search over the word index (FTS5 unicode61), the scoped trigram index, and scans.

Rules (architecture.md "Measured facts the schema relies on"):
* any string is a valid query (``query.plan``); results are newest first (ranking every
  row holding a common word costs in proportion to the store; newest-first reads only the
  page), or, with ``order="relevance"``, the newest ``rank.CANDIDATES`` word-index matches
  ordered by bounded BM25 (``rank``);
* visibility is filtered here, never in the index: ``display`` (default) searches live and
  compacted rows, ``audit`` every row (superseded and rewound too), ``model`` live rows;
* display hits are deduplicated by display position and reported as the row display shows
  (a carried message is one hit), so a hit and its context are exactly what a display read
  of the session shows around it;
* rows above the index watermark are scanned directly, so a committed message is found before
  the indexer reaches it; the trigram index covers only its scope (schema.py), and rows above
  the watermark are checked against the same scope;
* short CJK terms (< 3 characters) and short substring or emoji terms fall back to a scan
  (FTS5's case folding, ``textfold``), newest first, stopped after ``SCAN_MAX_ROWS`` rows;
  ``route`` says when a query goes to one of these narrower routes;
* only the page of hits returned gets a snippet and context: after the candidate ids, one
  query reads the page's rows with their neighbours' positions and one the neighbours' rows;
  a tool-call text is built (json_tree) only for a hit whose snippet needs it.

This module holds the route and the paging loop; the candidate queries are in
``store.search.candidates``, the merge of the trigram index with the scan of the rows it does
not cover in ``store.search.fence``, the page of hits (snippets, context) in
``store.search.page``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import apsw

from quill.store.read import projections
from quill.store.search import candidates, fence, group
from quill.store.search import hits as hits_mod
from quill.store.search import plan as query
from quill.store.search.candidates import (
    KINDS,
    SCAN_MAX_ROWS,
    TAIL_MAX_ROWS,
    _filters,
    _indexed,
    _ranked_page,
    _tail,
    window_rows,
)
from quill.store.search.columns import TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES
from quill.store.search.page import _hits
from quill.store.search.request import ORDERS, begin, next_cursor
from quill.store.sqlite.indexer import search_state

SNIPPET_CHARS = hits_mod.SNIPPET_CHARS
#: Re-exported: callers read the search kinds and the scan bound here.
__all__ = [
    "KINDS",
    "ORDERS",
    "SCAN_MAX_ROWS",
    "SNIPPET_CHARS",
    "TAIL_MAX_ROWS",
    "route",
    "search",
    "search_page",
]


def route(text: str, *, substring: bool = False, kinds: list[str] | None = None) -> dict[str, Any]:
    """How ``text`` will be searched, for telling the user: ``{"route": fts |
    trigram | scan | none, "narrower": bool, "note": str | None}``. ``narrower`` is True when
    the route covers less than the word index does; ``note`` then says what is left out."""
    plan = query.plan(text, substring=substring)
    note = None
    if plan.kind == "trigram":
        note = (
            "substring search uses the trigram index for the first "
            f"{TRIGRAM_PREFIX_CHARS} characters of {' and '.join(TRIGRAM_ROLES)} text and the "
            "whole of every text stored compressed, and a scan "
            f"of the newest {SCAN_MAX_ROWS} messages for the rest (tool calls and output, "
            "reasoning, longer text); older messages' rest is not searched"
        )
    elif plan.kind == "scan":
        short = [t for g in plan.groups for t in g if len(t.text) < query.TRIGRAM_MIN_CHARS]
        why = (
            f"short term(s) {', '.join(repr(t.text) for t in short)} "
            f"(< {query.TRIGRAM_MIN_CHARS} characters)"
            if short
            else "this query"
        )
        note = (
            f"{why} searched by a scan of the newest {SCAN_MAX_ROWS} messages "
            "(text, tool calls, reasoning); older messages are not searched"
        )
    elif plan.kind == "none" and text.strip():
        note = (
            "nothing in this query can be searched for: it has no letter, digit or symbol term, or "
            "every term is excluded with NOT (add a term to look for)"
        )
    return {"route": plan.kind, "narrower": note is not None, "note": note}


def search(conn: apsw.Connection, text: str, **kw: Any) -> list[dict[str, Any]]:
    """The hits of ``search_page`` (same arguments; no per-session cap unless
    ``per_session`` is given): the list every caller before the grouped result used."""
    return search_page(conn, text, count=False, **kw)["hits"]


def search_page(
    conn: apsw.Connection,
    text: str,
    *,
    timings: dict[str, float] | None = None,
    clock: Any = time.perf_counter,
    **kw: Any,
) -> dict[str, Any]:
    """Messages matching ``text``, newest first (or by relevance, ``order``), at most ``limit``,
    at most ``per_session`` from one session (None or 0: no cap; ignored with
    ``session_id``), with a bounded count of every match: ``group.Page.result`` — ``hits``,
    ``total``, ``total_exact``, ``more``, ``per_session``, ``sessions``.

    Hits are dicts: ``session_id``, ``message_id``, ``role``, ``state``, ``ts``, ``title``,
    ``matched_in`` (``text`` | ``tool`` | ``reasoning``: where the snippet comes from),
    ``snippet`` (centred on the match) with ``highlights`` (``[start, end)`` character spans
    of the matched words in it) and, with ``context``, ``before``/``after``: the neighbouring
    messages in the projection's order (display dicts as ``projections.read`` returns them,
    cut to a bounded preview by ``hits.preview``, or None at an end).
    ``since``/``until`` bound the message timestamp (epoch seconds). ``substring=True``
    searches substrings instead of words. ``kinds`` limits where to look:
    message ``text``, ``tool`` calls (names and decoded arguments), ``reasoning``; every route
    looks in the same texts (a substring route through the trigram index for what it covers
    and a bounded scan for the rest).
    ``order="relevance"`` ranks instead (``_ranked_page``): the newest ``rank.CANDIDATES``
    indexed matches that pass the filters (session, role, source, since, until; the
    projection's visibility is applied to the ranked list), the visible ones best BM25 first
    (``rank.ranked``: FTS5's bm25(), its scores exactly while every phrase is in at most
    ``rank.DF_SAMPLE`` rows), same hits;
    rows not yet indexed are not ranked: they follow the ranked hits, newest first (a
    committed message is found by every order), and with the index detached (``search_health``
    degraded) the answer is the newest-first one, as there are no index statistics to rank by.
    ``timings``, when given, receives the seconds of each stage by ``clock`` (wall time by
    default; ``time.process_time`` for CPU): ``candidates_s`` (index, tail, display
    dedupe and the bounded count: ids with their display ids, one query per batch),
    ``page_s`` (the page's rows, titles, neighbour positions — one query — and snippets) and
    ``context_s`` (the neighbours' rows, one query, cut to previews) — for the benchmark.
    Raises ``ValueError`` for an unknown projection, kind or order, and for a ranked query
    that is not a word query (substring, CJK and scan routes have no word index to rank by);
    ``count=False`` stops at a full page (``search``: no total wanted; ``total`` then counts
    only the candidates read). Otherwise any query string is accepted. Keyword arguments:
    ``store.search.request.SearchArgs`` (shared with PostgreSQL), plus ``timings`` and ``clock``.
    """
    t0 = clock()
    # Detached (damaged) indexes are not read: everything counts as the unindexed tail.
    state, upto, top = search_state(conn)
    started = begin(text, kw, lambda: top)
    if isinstance(started, dict):
        return started
    a, plan, kinds_t, page, cond, args, _scope = started
    top = min(top, a.upto_id)  # the snapshot of the first page (request.py)
    if a.order == "relevance" and state == "ok":
        picked = _filters(None, *a.filters)
        exhausted = _ranked_page(conn, plan, text, upto, picked, a.projection, kinds_t, page)
        if top > upto and not page.done:  # committed, not yet indexed: found, after the ranked
            display = a.projection == "display"
            exhausted = _offer_tail(conn, plan, upto, cond, args, kinds_t, display, page) and (
                exhausted
            )
    else:
        display = a.projection == "display"
        exhausted = _newest(conn, plan, (state, upto, top), cond, args, kinds_t, display, page)
    hits = _hits(conn, plan, page.page_ids, a.projection, a.context, kinds_t, t0, timings, clock)
    result = page.result(hits, exhausted, group.titles(conn, list(page.matches)))
    return {**result, "next": next_cursor(started, exhausted)}


def _newest(
    conn: apsw.Connection,
    plan: query.Plan,
    index: tuple[str, int, int],
    cond: str,
    args: list[Any],
    kinds: tuple[str, ...],
    display: bool,
    page: group.Page,
) -> bool:
    """Offer the matches newest first to ``page`` until it is ``done``; True when every
    candidate was offered. ``index`` is ``search_state``: (state, watermark, newest id)."""
    state, upto, top = index
    usable = state == "ok"
    upto = upto if usable else 0
    # Rows above the watermark (all of them when the index is not usable) are matched here.
    if plan.kind != "scan" and top > upto:
        if not _offer_tail(conn, plan, upto, cond, args, kinds, display, page):
            return False
    if not usable and plan.kind != "scan":
        return True  # the tail (bounded as a scan) was everything there is to read
    first = group.first_batch(page)
    indexed = _batches(conn, plan, upto, cond, args, kinds, display, first, top)
    if plan.kind != "trigram":
        return group.offer_rows(page, indexed)
    # The trigram index sees only the first characters of user/assistant text; every row
    # holding more (other roles, longer text, reasoning, tool calls) is scanned as the scan
    # route scans, so a longer query never looks in less than a shorter one would. The scan
    # reads only down to the index match the merge places next (``fence``).

    def fetch(below: int, lo: int, n: int, cap: int | None) -> list[tuple] | None:
        try:
            return _indexed(
                conn,
                plan,
                upto,
                cond,
                args,
                below,
                n,
                kinds,
                display,
                rest=True,
                lo=lo,
                cap=cap,
                whole=cap is None,
            )
        except (apsw.CorruptError, apsw.NotADBError):
            return None

    def count(below: int, lo: int, cap: int) -> int:
        return window_rows(conn, below, lo, cap)

    scan = fence.Scan(fetch, count, top=top, first=first, max_rows=candidates.SCAN_MAX_ROWS)
    return fence.offer_fenced(page, indexed, scan)


def _offer_tail(
    conn: apsw.Connection,
    plan: query.Plan,
    upto: int,
    cond: str,
    args: list[Any],
    kinds: tuple[str, ...],
    display: bool,
    page: group.Page,
) -> bool:
    """Offer the matching rows above the index watermark ``upto`` (``_tail``: newest first,
    a bounded scan) to ``page`` as their display rows; False when the page was done first."""
    for found in _tail(conn, plan, upto, cond, args, kinds):
        reps = projections.representatives(conn, [i for i, _ in found]) if display else {}
        for fid, sid in found:
            page.offer(reps.get(fid, fid), sid)
            if page.done:
                return False
    return True


def _batches(
    conn: apsw.Connection,
    plan: query.Plan,
    upto: int,
    cond: str,
    args: list[Any],
    kinds: tuple[str, ...],
    display: bool,
    first: int,
    top: int,
) -> Iterator[tuple[int, int, str]]:
    """``_indexed``'s rows newest first, a batch at a time, read only as they are consumed
    (``group.newest_batches``, from the snapshot's newest id ``top`` down, so a scan's window
    is the same rows on every page); a damaged index met by a reader ends them: the tail
    scan is all we can offer."""

    def fetch(below: int, batch: int) -> list[tuple]:
        try:
            return _indexed(conn, plan, upto, cond, args, below, batch, kinds, display)
        except (apsw.CorruptError, apsw.NotADBError):
            return []

    return group.newest_batches(fetch, first, scan=plan.kind == "scan", below=top + 1)
