"""Message search on PostgreSQL: the same query language (``store.search.plan.plan``), visibility
rules (``projections.states``), display dedupe, newest-first order, snippets and context as
SQLite's ``store.search.run``; only the index access differs.

* ``fts`` plans → ``words @@ to_tsquery('simple', …)`` (``words`` is the stored
  ``quill_words(content, tool_calls)`` column) on its GIN index. The tsquery is built from
  the plan's groups: a term's words joined by ``<->`` (a phrase), a trailing ``*`` → ``:*``
  (prefix), ``NOT`` → ``!``, AND within a group, OR between groups. Words are split on
  non-alphanumerics on both sides, like FTS5 unicode61.
* ``trigram`` plans → ``left(content, TRIGRAM_PREFIX_CHARS) ILIKE '%term%'`` under the
  trigram scope (pg_trgm GIN index, same scope as SQLite's trigram table), merged newest
  first with the bounded scan of every row the index does not wholly cover (``_covered``),
  so a trigram query looks in the same texts as a shorter query it contains. That scan reads
  only the rows the substring index ``messages_scan`` finds holding the terms
  (``scan_index``), once it is built.
* ``scan`` plans (terms under 3 characters) → the same bounded newest-first ILIKE scan of
  text, tool-call text (``quill_tool_text``) and reasoning.
* Pages are capped per session with a bounded count (``store.search.group``, shared).
Differences from SQLite (docs/backends.md): indexes are updated in the writer's transaction,
so there is no unindexed tail and no watermark; the word index covers the first
``WORD_INDEX_CHARS`` characters of a message (FTS5 indexes all of it); an underscore splits
words here (``foo_bar`` is ``foo`` + ``bar``), as in FTS5.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

from quill.store.postgres import hits as pg_hits
from quill.store.postgres import scan_index, windows
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.schema import TRIGRAM_SCOPE
from quill.store.search import candidates, fence, rank, textfold
from quill.store.search import group as group_mod
from quill.store.search import plan as query
from quill.store.search.candidates import (
    KINDS,
    WINDOW_SQL,
    _escape_like,
    trigram_covered_sql,
    window_rows,
)
from quill.store.search.columns import PREFIX_WHOLE_SQL, TOOL_RESULT_ROLES, TRIGRAM_PREFIX_CHARS
from quill.store.search.request import begin, next_cursor

_WORD = re.compile(r"[^\W_]+")
#: Search kind → the weight its words carry in ``words`` (``schema.quill_words``).
WEIGHTS = {"text": "A", "tool": "B", "reasoning": "C"}


def _weights(kinds: tuple[str, ...]) -> str:
    """The weight letters ``kinds`` restrict a lexeme to ("" for every kind)."""
    return "" if set(kinds) == set(KINDS) else "".join(WEIGHTS[k] for k in kinds)


def tsquery(plan: query.Plan, kinds: tuple[str, ...] = KINDS) -> str:
    """The ``to_tsquery('simple', …)`` text for an ``fts`` plan, or ``""`` when no group
    keeps a positive term (nothing can match). ``kinds`` narrower than all restrict every
    lexeme to their weights (``'word':AB``)."""
    weights = _weights(kinds)
    groups = []
    for group in plan.groups:
        parts = []
        for term in group:
            words = [w.lower() for w in _WORD.findall(term.text)]
            if not words:
                continue
            lexemes = [f"'{w}'" + (":" + weights if weights else "") for w in words]
            if term.prefix:
                lexemes[-1] = f"'{words[-1]}':*{weights}"
            phrase = " <-> ".join(lexemes)
            parts.append(f"!({phrase})" if term.negated else f"({phrase})")
        if any(not p.startswith("!") for p in parts):
            groups.append("(" + " & ".join(parts) + ")")
    return " | ".join(groups)


#: An fts plan's match condition. The tsquery is a sub-select (an InitPlan: built once per
#: statement); written as a call on the argument, it is built again for every row the
#: condition is tested on (the rows a key walk passes, a phrase's or weighted query's
#: bitmap rows re-checked), as PostgreSQL folds no function of a parameter. The planner sees
#: no constant either way (a generic plan, or ``windows._hidden``): its default selectivity.
TSQUERY_MATCH = "m.words @@ (SELECT to_tsquery('simple', {fold}))"


def _where(conn: PgConnection, plan: query.Plan, kinds: tuple[str, ...]) -> tuple[str, list[Any]]:
    """The match condition of an fts/trigram plan and its arguments ("" = nothing matches).
    The trigram index covers message text only (as on SQLite)."""
    if plan.kind == "fts":
        tsq = tsquery(plan, kinds)
        return (TSQUERY_MATCH.format(fold=windows.unaccent(conn)), [tsq]) if tsq else ("", [])
    if "text" not in kinds:
        return "", []
    likes, like_args = [], []
    for group in plan.groups:
        conds = []
        for t in group:
            conds.append(
                ("NOT " if t.negated else "")
                + f"left(m.content, {TRIGRAM_PREFIX_CHARS}) ILIKE ? ESCAPE '\\'"
            )
            like_args.append("%" + _escape_like(t.text) + "%")
        likes.append("(" + " AND ".join(conds) + ")")
    scope = " AND ".join("m." + c.strip() for c in TRIGRAM_SCOPE.split(" AND "))
    return f"{scope} AND ({' OR '.join(likes)})", like_args


#: ``pg_hits.TOOL_TEXT``'s value, written out for a row without tool calls (a tool result's
#: tool name and a space, else ""), so a scan calls the function (plpgsql: the calls' JSON
#: decoded inside a subtransaction, behind a ``SET search_path`` wrapper) only on rows that
#: have calls: the same text, about 40 % less server CPU per scanned row for the tool test.
_SCAN_TOOL_TEXT = (
    "CASE WHEN coalesce(m.tool_calls, '[]') = '[]' THEN CASE WHEN m.role IN "
    f"{TOOL_RESULT_ROLES!r} AND m.tool_name IS NOT NULL THEN m.tool_name || ' ' ELSE '' END "
    f"ELSE {pg_hits.TOOL_TEXT} END"
)
#: The substring routes' texts (kind → SQL over ``m``), as SQLite's ``SCAN_COLUMNS_SQL``.
SCAN_COLUMNS_SQL = {
    "text": "m.content",
    "reasoning": "m.reasoning",
    "tool": _SCAN_TOOL_TEXT,
}


def _covered(kinds: tuple[str, ...]) -> str:
    """SQL condition: the trigram index wholly covers the row's searched texts (SQLite's
    ``candidates.trigram_covered_sql``, in PostgreSQL's dialect)."""
    return trigram_covered_sql(kinds, "false", PREFIX_WHOLE_SQL)


def _contains(col: str, term: str, args: list[Any]) -> str:
    """SQL: ``col`` holds ``term`` as ``ILIKE '%term%'`` finds it (appends the argument).
    ILIKE lowercases text and pattern with ``lower()`` before matching, so a term no
    character folds into (``textfold.fold_free``: CJK, digits, emoji) that ``lower()``
    leaves as it is is found exactly where ``strpos`` finds it, without lowercasing the text
    (much cheaper per scanned row; figure in bench/RESULTS.md)."""
    if textfold.fold_free(term) and term.lower() == term:
        args.append(term)
        return f"strpos({col}, ?) > 0"
    args.append("%" + _escape_like(term) + "%")
    return f"{col} ILIKE ? ESCAPE '\\'"


def _scan(
    conn: PgConnection,
    plan: query.Plan,
    cond: str,
    args: list[Any],
    below: int,
    limit: int,
    rep: str,
    kinds: tuple[str, ...],
    rest: bool = False,
    lo: int = 0,
    cap: int | None = None,
    whole: bool = False,
) -> list[tuple]:
    """``(id, display id, session id)`` of up to ``limit`` matching rows among the newest
    ``cap`` rows (None: ``SCAN_MAX_ROWS``) below ``below`` with ``id >= lo`` (``whole``: every
    row of that window), newest first, for a scan plan or (``rest``) the rows the trigram
    index does not wholly cover (``fence.Scan`` picks ``lo``, ``cap`` and ``whole``); ``rep``
    is the SQL of the display id (``hits.REPRESENTATIVE_SQL`` or ``m.id``). Text,
    reasoning and tool-call text are searched, as SQLite's scan does."""
    cols = [c for k, c in SCAN_COLUMNS_SQL.items() if k in kinds]
    if not cols:
        return []
    likes, like_args = [], []
    for group in plan.groups:
        conds = []
        for t in group:
            tests = " OR ".join(_contains(c, t.text, like_args) for c in cols)
            conds.append(("NOT " if t.negated else "") + f"coalesce({tests}, false)")
        likes.append("(" + " AND ".join(conds) + ")")
    outside = f"NOT {_covered(kinds)} AND " if rest else ""
    bound, bound_args = "?", [lo]
    if rest and scan_index.usable(conn):  # the rows it reads: those holding the terms
        pre_args: list[Any] = []
        outside += scan_index.prefilter(plan, pre_args) + " AND "
        like_args[:0] = pre_args  # ``outside`` comes first in the statement
        if not whole:
            # The window's rows are those from its oldest id up (ids are unique), so the
            # index's bitmap is ANDed with that id range before any row is rechecked,
            # instead of each window row being tested on its own. An empty window's min is
            # NULL: no row.
            bound, bound_args = f"(SELECT min(id) FROM ({WINDOW_SQL}) AS w)", [below, lo, cap]
            whole = True
    if whole:  # one walk down the key, no second lookup of each row
        return conn.execute(
            f"SELECT m.id, {rep}, m.session_id FROM messages m "
            f"JOIN sessions s ON s.id = m.session_id WHERE m.id < ? AND m.id >= {bound} AND "
            f"{outside}({' OR '.join(likes)}) AND {cond} ORDER BY m.id DESC LIMIT ?",
            (below, *bound_args, *like_args, *args, limit),
        ).fetchall()
    return conn.execute(
        f"SELECT m.id, {rep}, m.session_id FROM "
        f"({WINDOW_SQL}) AS w "
        f"JOIN messages m ON m.id = w.id JOIN sessions s ON s.id = m.session_id "
        f"WHERE {outside}({' OR '.join(likes)}) AND {cond} ORDER BY m.id DESC LIMIT ?",
        (below, lo, candidates.SCAN_MAX_ROWS if cap is None else cap, *like_args, *args, limit),
    ).fetchall()


def search(conn: PgConnection, text: str, **kw: Any) -> list[dict[str, Any]]:
    """The hits of ``search_page`` (same arguments; no per-session cap unless given)."""
    return search_page(conn, text, count=False, **kw)["hits"]


def search_page(conn: PgConnection, text: str, **kw: Any) -> dict[str, Any]:
    """Messages matching ``text``, newest first (or, with ``order="relevance"``, the newest
    ``rank.CANDIDATES`` word matches by ``ts_rank``: ``_ranked_page``), at most ``limit``,
    at most ``per_session`` per session, with the bounded count — the contract of
    ``store.search.run.search_page`` (result keys, hit keys, filters, projections, context).
    Raises ``ValueError`` for an unknown projection, kind or order, and for a ranked query
    that is not a word query. ``kinds`` (text, tool, reasoning; None = all) select the
    weights of the word index and the texts the substring routes look in (the trigram index
    for what it covers, a bounded scan for the rest). Any query string is accepted. Keyword
    arguments: ``store.search.request.SearchArgs`` (shared with SQLite)."""
    # A first page takes its snapshot from its own walk (``_newest_page``, ``_ranked_page``):
    # reading the newest id first would cost a word search a round trip of its own.
    started = begin(text, kw, lambda: None)
    if isinstance(started, dict):
        return started
    a, plan, kinds_t, page, cond, args, _scope = started
    rep = f"coalesce({pg_hits.REPRESENTATIVE_SQL}, m.id)" if a.projection == "display" else "m.id"
    # A word search's first candidate statement reads the hits of the page it finds too
    # (usually the whole page: one statement); the rest are read after.
    pre = pg_hits.Prefetch(conn, a.projection, a.context, a.limit)
    exhausted, snapshot = (
        _ranked_page(conn, plan, cond, args, rep, kinds_t, page)
        if a.order == "relevance"
        else _newest_page(conn, plan, cond, args, rep, kinds_t, page, pre, a.upto_id)
    )
    found = pg_hits.rows(conn, page.page_ids, a.projection, a.context, pre.rows)
    hits = pg_hits.dicts(conn, plan, found, a.projection, a.context, kinds_t)
    # The hits carry their sessions' titles; only sessions counted without a hit on the page
    # are read (usually none: one round trip less).
    titles = {h["session_id"]: h["title"] for h in hits}
    titles.update(group_mod.titles(conn, [sid for sid in page.matches if sid not in titles]))
    return {
        **page.result(hits, exhausted, titles),
        "next": next_cursor(started, exhausted, snapshot),
    }


def _ranked_page(
    conn: PgConnection,
    plan: query.Plan,
    cond: str,
    args: list[Any],
    rep: str,
    kinds: tuple[str, ...],
    page: group_mod.Page,
) -> tuple[bool, int]:
    """Offer the newest ``rank.CANDIDATES`` visible matches to ``page``, best first; True
    when there were fewer (the count is exact), and the snapshot of a first page: the
    newest candidate's id (every match the page could see is at or below it).

    The score is PostgreSQL's ``ts_rank`` (every weight 1, as FTS5's bm25 weighs every
    column 1; normalisation 1: divided by 1 + log(document length), so a dense short message
    ranks above a long one mentioning the term once), not SQLite's BM25: the two backends
    order the same candidates by different, documented formulas. Ties go newest first. The
    candidates pass the projection's states here (SQLite filters visibility after ranking), so
    hidden rows never take a candidate's place."""
    cands = list(
        itertools.islice(
            _index_rows(conn, plan, cond, args, rep, kinds, rank.CANDIDATES), rank.CANDIDATES
        )
    )
    if cands:
        scores = dict(
            conn.execute(
                "SELECT m.id, ts_rank('{1,1,1,1}', m.words, to_tsquery('simple', "
                f"{windows.unaccent(conn)}), 1) FROM messages m WHERE m.id = ANY(?)",
                (tsquery(plan, kinds), [c[0] for c in cands]),
            ).fetchall()
        )
        cands.sort(key=lambda c: (scores[c[0]], c[0]), reverse=True)
    for _fid, mid, sid in cands:
        page.offer(mid, sid)
    return len(cands) < rank.CANDIDATES, max((c[0] for c in cands), default=0)


def _newest_page(
    conn: PgConnection,
    plan: query.Plan,
    cond: str,
    args: list[Any],
    rep: str,
    kinds_t: tuple[str, ...],
    page: group_mod.Page,
    pre: pg_hits.Prefetch,
    upto: int | None,
) -> tuple[bool, int]:
    """Offer the visible matches newest first to ``page`` until it is done (display dedupe
    and the per-session cap are the page's); True when every candidate was offered. A
    trigram plan merges the index's matches with a scan of the rows it does not wholly
    cover, read only down to the index match the merge places next (``fence``), as on
    SQLite. ``upto``: a later page's snapshot (the first page's newest id; None on a first
    page): scans read their windows from it down, so they cover the same rows on every page.
    Returns whether every candidate was offered, and the snapshot: ``upto``, else the newest
    id (a scan's or trigram merge's, read for its windows anyway) or, for the word index,
    the newest match walked (no row the page could see matches above it; reading the
    newest id would cost a round trip)."""
    first = group_mod.first_batch(page)
    if upto is None and plan.kind != "fts":
        upto = int(conn.execute(windows.TOP_SQL).fetchone()[0])
    if plan.kind == "scan":
        return group_mod.offer_rows(
            page,
            group_mod.newest_batches(
                lambda below, n: _scan(conn, plan, cond, args, below, n, rep, kinds_t),
                first,
                scan=True,
                below=upto + 1,
            ),
        ), upto
    if plan.kind != "trigram":  # a word plan's first statement runs through ``pre``
        exhausted = group_mod.offer_rows(
            page, _index_rows(conn, plan, cond, args, rep, kinds_t, first, fetch=pre)
        )
        return exhausted, page.newest_row if upto is None else upto
    top = upto
    scan = fence.Scan(
        lambda below, lo, n, cap: _scan(
            conn,
            plan,
            cond,
            args,
            below,
            n,
            rep,
            kinds_t,
            rest=True,
            lo=lo,
            cap=cap,
            whole=cap is None,
        ),
        lambda below, lo, cap: window_rows(conn, below, lo, cap),
        top=top,
        first=first,
        max_rows=candidates.SCAN_MAX_ROWS,
    )
    indexed = _index_rows(conn, plan, cond, args, rep, kinds_t, first, top=top)
    return fence.offer_fenced(page, indexed, scan), top


def _index_rows(
    conn: PgConnection,
    plan: query.Plan,
    cond: str,
    args: list[Any],
    rep: str,
    kinds: tuple[str, ...],
    first: int,
    top: int | None = None,
    fetch: windows.Fetch | None = None,
) -> Iterator[tuple]:
    """``windows.newest`` over the word index (with its density bound) or the trigram index;
    ``top``: the newest id when already read; ``fetch``: runs the first statement."""
    match, match_args = _where(conn, plan, kinds)
    if not match:
        return iter(())
    density, table = None, 0.0
    if plan.kind == "fts":
        upper, table = windows.bound(conn, plan, _weights(kinds))
        density = upper / table
    return windows.newest(
        conn,
        match,
        match_args,
        cond,
        args,
        rep,
        first,
        density=density,
        table_rows=table,
        top=top,
        fetch=fetch,
    )
