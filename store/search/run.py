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
``store.search.candidates``, the page of hits (snippets, context) in ``store.search.page``.
"""

from __future__ import annotations

import time
from typing import Any

import apsw

from quill.store.read import projections
from quill.store.schema import TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES
from quill.store.search import hits as hits_mod
from quill.store.search import plan as query
from quill.store.search.candidates import (
    KINDS,
    SCAN_MAX_ROWS,
    _filters,
    _indexed,
    _kinds,
    _ranked_page,
    _tail,
)
from quill.store.search.page import _hits
from quill.store.sqlite.indexer import search_state

SNIPPET_CHARS = hits_mod.SNIPPET_CHARS
#: Result orders: ``newest`` first (the default) or by ``relevance`` (bounded BM25, ``rank``).
ORDERS = ("newest", "relevance")
#: Re-exported: callers read the search kinds and the scan bound here.
__all__ = ["KINDS", "ORDERS", "SCAN_MAX_ROWS", "SNIPPET_CHARS", "route", "search"]


def route(text: str, *, substring: bool = False, kinds: list[str] | None = None) -> dict[str, Any]:
    """How ``text`` will be searched, for telling the user: ``{"route": fts |
    trigram | scan | none, "narrower": bool, "note": str | None}``. ``narrower`` is True when
    the route covers less than the word index does; ``note`` then says what is left out."""
    plan = query.plan(text, substring=substring)
    note = None
    if plan.kind == "trigram":
        note = (
            "substring search uses the trigram index, which covers only "
            f"{' and '.join(TRIGRAM_ROLES)} message text "
            f"(its first {TRIGRAM_PREFIX_CHARS} characters); tool calls, tool output "
            "and reasoning are not searched"
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
            f"{why} searched by a scan of the newest {SCAN_MAX_ROWS} messages' text and reasoning; "
            "older messages and tool calls are not searched"
        )
    elif plan.kind == "none" and text.strip():
        note = (
            "nothing in this query can be searched for: it has no letter, digit or symbol term, or "
            "every term is excluded with NOT (add a term to look for)"
        )
    return {"route": plan.kind, "narrower": note is not None, "note": note}


def search(
    conn: apsw.Connection,
    text: str,
    *,
    limit: int = 20,
    session_id: str | None = None,
    role: str | None = None,
    source: str | None = None,
    projection: str = "display",
    since: float | None = None,
    until: float | None = None,
    substring: bool = False,
    context: bool = True,
    kinds: list[str] | None = None,
    order: str = "newest",
    timings: dict[str, float] | None = None,
    clock: Any = time.perf_counter,
) -> list[dict[str, Any]]:
    """Messages matching ``text``, newest first (or by relevance, ``order``), at most ``limit``.

    Hits are dicts: ``session_id``, ``message_id``, ``role``, ``state``, ``ts``, ``title``,
    ``matched_in`` (``text`` | ``tool`` | ``reasoning``: where the snippet comes from),
    ``snippet`` (centred on the match) with ``highlights`` (``[start, end)`` character spans
    of the matched words in it) and, with ``context``, ``before``/``after``: the neighbouring
    messages in the projection's order (display dicts as ``projections.read`` returns them,
    cut to a bounded preview by ``hits.preview``, or None at an end).
    ``since``/``until`` bound the message timestamp (epoch seconds). ``substring=True``
    searches substrings (trigram scope) instead of words. ``kinds`` limits where to look:
    message ``text``, ``tool`` calls (names and decoded arguments), ``reasoning``.
    ``order="relevance"`` ranks instead (``_ranked_page``): the newest ``rank.CANDIDATES``
    indexed matches that pass the filters (session, role, source, since, until; the
    projection's visibility is applied to the ranked list), the visible ones best BM25 first
    (``rank.ranked``: FTS5's bm25(), its scores exactly while every phrase is in at most
    ``rank.DF_SAMPLE`` rows), same hits;
    rows not yet indexed are not ranked, and with the index detached (``search_health``
    degraded) the answer is the newest-first one, as there are no index statistics to rank by.
    ``timings``, when given, receives the seconds of each stage by ``clock`` (wall time by
    default; ``time.process_time`` for CPU): ``candidates_s`` (index, tail and display
    dedupe: ids with their display ids, one query per batch), ``page_s`` (the page's rows,
    titles, neighbour positions — one query — and snippets) and ``context_s`` (the
    neighbours' rows, one query, cut to previews) — for the benchmark.
    Raises ``ValueError`` for an unknown projection, kind or order, and for a ranked query
    that is not a word query (substring, CJK and scan routes have no word index to rank by);
    otherwise any query string is accepted.
    """
    if order not in ORDERS:
        raise ValueError(f"search order must be one of {list(ORDERS)}, got {order!r}")
    plan = query.plan(text, substring=substring)
    kinds_t = _kinds(kinds)
    if order == "relevance" and plan.kind not in ("fts", "none"):
        raise ValueError(
            f"ranked search needs a word query; {text!r} goes to the {plan.kind} route"
        )
    if plan.kind == "none" or limit <= 0:
        return []
    cond, args = _filters(projection, session_id, role, source, since, until)
    display = projection == "display"
    t0 = clock()
    # Detached (damaged) indexes are not read: everything counts as the unindexed tail.
    state, upto, top = search_state(conn)
    if order == "relevance" and state == "ok":
        picked = _filters(None, session_id, role, source, since, until)
        page = _ranked_page(conn, plan, text, upto, picked, projection, limit, kinds_t)
        return _hits(conn, plan, page, projection, context, kinds_t, t0, timings, clock)
    usable = state == "ok"
    upto = upto if usable else 0
    found: list[int] = (
        [] if plan.kind == "scan" or top <= upto else _tail(conn, plan, upto, cond, args, kinds_t)
    )
    reps = projections.representatives(conn, found) if display else {}
    pairs = [(fid, reps.get(fid, fid)) for fid in found]
    below = 2**62
    page: list[int] = []
    seen: set[int] = set()
    batch = (
        limit  # most pages need no more: filters are in the query; only display dedupe drops rows
    )
    more = True  # an index query may still hold rows below ``below``
    while True:
        for _fid, mid in pairs:
            if mid in seen:
                continue
            seen.add(mid)
            page.append(mid)
            if len(page) >= limit:
                break
        if len(page) >= limit:
            break
        if not more or (not usable and plan.kind != "scan"):
            break
        try:
            pairs = _indexed(conn, plan, upto, cond, args, below, batch, kinds_t, display)
        except (apsw.CorruptError, apsw.NotADBError):
            pairs = []  # damaged index met by a reader: the tail scan is all we can offer
        if not pairs:
            break
        # An fts/trigram batch shorter than asked is every row its conditions admit: the next
        # one (same conditions, ids below this one's last) would be empty — one query saved
        # for rare words. A scan's next batch reads another window of rows, so it goes on.
        more = len(pairs) >= batch or plan.kind == "scan"
        below = pairs[-1][0]
        batch = min(batch * 2, 1000)
    return _hits(conn, plan, page, projection, context, kinds_t, t0, timings, clock)
