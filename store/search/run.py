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
"""

from __future__ import annotations

import time
from typing import Any

import apsw

from quill.store.apply.normalize import scrub
from quill.store.read import projections
from quill.store.schema import KIND_COLUMNS, SEARCH_COLUMNS_SQL, TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES
from quill.store.search import hits as hits_mod
from quill.store.search import plan as query
from quill.store.search import rank, textfold
from quill.store.sqlite.indexer import search_state

SNIPPET_CHARS = hits_mod.SNIPPET_CHARS
#: Upper bound on rows a scan reads (newest first) before giving up: keeps a short-CJK
#: query on a huge store to a bounded cost; older matches beyond it are not reported.
SCAN_MAX_ROWS = 200_000
#: Result orders: ``newest`` first (the default) or by ``relevance`` (bounded BM25, ``rank``).
ORDERS = ("newest", "relevance")
#: Search kinds: which text of a message a query looks in (``kinds=None``: all of them).
KINDS = tuple(KIND_COLUMNS)
#: Row shape every candidate query returns: ids, filters' columns and the index columns' texts.
_COLS = (
    "m.id, m.session_id, m.role, m.ts, s.title, m.state, m.content, "
    f"{SEARCH_COLUMNS_SQL['tools']}, m.reasoning"
)
_TEXTS = slice(6, 9)  # content, tools, reasoning in a _COLS row
_COLUMN_KIND = {col: kind for kind, col in KIND_COLUMNS.items()}


def _kinds(kinds: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if not kinds:
        return KINDS
    bad = [k for k in kinds if k not in KIND_COLUMNS]
    if bad:
        raise ValueError(f"search kind must be one of {list(KINDS)}, got {bad}")
    return tuple(k for k in KINDS if k in kinds)


def _texts(plan: query.Plan, row: tuple, kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(kind, text)`` of a row that ``plan`` looks in: word queries every selected index
    column; trigram the indexed prefix of the content (its scope); scans content and reasoning."""
    content, tools, reasoning = row[_TEXTS]
    if plan.kind == "trigram":
        ok = row[2] in TRIGRAM_ROLES and "text" in kinds
        return [("text", content[:TRIGRAM_PREFIX_CHARS])] if ok and content else []
    by_kind = {
        "text": content,
        "tool": tools if plan.kind == "fts" else None,
        "reasoning": reasoning,
    }
    return [(k, by_kind[k]) for k in kinds if by_kind[k]]


def _filters(
    projection: str | None,
    session_id: str | None,
    role: str | None,
    source: str | None,
    since: float | None,
    until: float | None,
) -> tuple[str, list[Any]]:
    """``(SQL condition over m and s, its parameters)``: the projection's visible states
    (none when ``projection`` is None) and the given filters; ``"1"`` when there is none."""
    sts = projections.states(projection) if projection is not None else ()
    conds, args = ([f"m.state IN ({', '.join('?' for _ in sts)})"], list(sts)) if sts else ([], [])
    for cond, value in (
        ("m.session_id = ?", session_id),
        ("m.role = ?", role),
        ("s.source = ?", source),
        ("m.ts >= ?", since),
        ("m.ts <= ?", until),
    ):
        if value is not None:
            conds.append(cond)
            args.append(scrub(value) if isinstance(value, str) else value)
    return " AND ".join(conds) or "1", args


def _escape_like(text: str) -> str:
    """``text`` as a literal inside ``LIKE … ESCAPE '\\'`` (used by the PostgreSQL backend)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _tail(
    conn: apsw.Connection,
    plan: query.Plan,
    upto: int,
    cond: str,
    args: list[Any],
    kinds: tuple[str, ...],
) -> list[int]:
    # Bounded newest-first: after an index rebuild the unindexed tail can be the whole store.
    rows = conn.execute(
        f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE m.id > ? AND {cond} ORDER BY m.id DESC LIMIT ?",
        (upto, *args, SCAN_MAX_ROWS),
    ).fetchall()
    return [
        r[0]
        for r in rows
        if (texts := _texts(plan, r, kinds)) and query.matches(plan, [t for _, t in texts])
    ]


def _indexed(
    conn: apsw.Connection,
    plan: query.Plan,
    upto: int,
    cond: str,
    args: list[Any],
    below: int,
    limit: int,
    kinds: tuple[str, ...],
    display: bool,
) -> list[tuple[int, int]]:
    """``(id, display id)`` of up to ``limit`` matching rows below ``below``, newest first
    (the display id is the row's representative, ``projections.REPRESENTATIVE_SQL``, when
    ``display``; else the id itself). Only ids: texts, snippets and context are read for the
    page of hits alone (``search``)."""
    rep = f"coalesce({projections.REPRESENTATIVE_SQL}, m.id)" if display else "m.id"
    join = _join(cond)
    if plan.kind == "scan":
        # Every OR-group, each an AND of (NOT) substring tests over the scanned columns, folded
        # as FTS5 folds (quill_fold): the same logic as query.matches.
        cols = [c for k, c in (("text", "m.content"), ("reasoning", "m.reasoning")) if k in kinds]
        textfold.register(conn)
        ors, like_args = [], []
        for group in plan.groups:
            conds = []
            for t in group:
                anycol = " OR ".join(f"instr(quill_fold({c}), ?) > 0" for c in cols)
                conds.append(("NOT " if t.negated else "") + f"coalesce({anycol}, 0)")
                like_args.extend([textfold.fold(t.text)] * len(cols))
            ors.append("(" + " AND ".join(conds) + ")")
        if not cols:
            return []
        return conn.execute(
            f"SELECT m.id, {rep} FROM "
            "(SELECT id FROM messages WHERE id < ? ORDER BY id DESC LIMIT ?) AS w "
            f"JOIN messages m ON m.id = w.id {join} "
            f"WHERE ({' OR '.join(ors)}) AND {cond} ORDER BY m.id DESC LIMIT ?",
            (below, SCAN_MAX_ROWS, *like_args, *args, limit),
        ).fetchall()
    if plan.kind == "trigram":
        if "text" not in kinds:
            return []
        table, match = "messages_trigram", plan.match
    else:
        table, match = "messages_fts", plan.match
        if kinds != KINDS:
            match = "{" + " ".join(KIND_COLUMNS[k] for k in kinds) + "} : (" + match + ")"
    # LIMIT is a literal, not a parameter: SQLite marks an FTS5 query's LIMIT parameter as
    # plan-relevant and re-prepares the whole statement at every bind (as costly as the query's
    # own run; bench/RESULTS.md). Batch sizes are few (limit × 2^k).
    return conn.execute(
        f"SELECT m.id, {rep} FROM {table} f JOIN messages m ON m.id = f.rowid {join} "
        f"WHERE {table} MATCH ? AND f.rowid <= ? AND f.rowid < ? AND {cond} "
        f"ORDER BY f.rowid DESC LIMIT {int(limit)}",
        (match, upto, below, *args),
    ).fetchall()


def _join(cond: str) -> str:
    """The sessions join, only when a filter needs it (``s.source``)."""
    return "JOIN sessions s ON s.id = m.session_id" if "s." in cond else ""


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
    ``rank.DF_SAMPLE`` rows), same hits; rows not yet indexed are not ranked, and with the
    index detached (``search_health`` degraded) the answer is the newest-first one, as there
    are no index statistics to rank by.
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


def _ranked_page(
    conn: apsw.Connection,
    plan: query.Plan,
    text: str,
    upto: int,
    picked: tuple[str, list[Any]],
    projection: str,
    limit: int,
    kinds: tuple[str, ...],
) -> list[int]:
    """Display ids of the best ``limit`` visible rows of the ranked candidates, best first.

    The candidates are the newest ``rank.CANDIDATES`` indexed rows (at most ``upto``) that
    match and pass the caller's filters ``picked`` (``_filters`` without a projection): the
    filters bound the candidate set. Visibility (the projection's states) and display dedupe
    are applied to the ranked list, in order, a chunk of ids at a time, so only the rows the
    page needs are read: checking a state reads the message row, and a thousand rows scattered
    over a large store cost more than the ranking itself. Rows above
    ``upto`` have no index statistics and are not ranked (``search_health``: pending)."""
    match = plan.match
    if kinds != KINDS:
        match = "{" + " ".join(KIND_COLUMNS[k] for k in kinds) + "} : (" + match + ")"
    cond, args = picked
    join = f"JOIN messages m ON m.id = f.rowid {_join(cond)}" if args else ""
    try:
        # Every candidate ordered (limit = candidates): visibility and dedupe may drop some.
        ranked = rank.ranked(
            conn,
            match,
            query.phrases(text),
            limit=rank.CANDIDATES,
            candidates=rank.CANDIDATES,
            sample=rank.DF_SAMPLE,
            join=join,
            where=f"f.rowid <= ? AND {cond}",
            args=(upto, *args),
        )
    except (apsw.CorruptError, apsw.NotADBError):
        return []  # damaged index met by a reader: as newest-first, nothing ranked to offer
    ids = [i for i, _ in ranked]
    sts = projections.states(projection)
    rep = f"coalesce({projections.REPRESENTATIVE_SQL}, m.id)" if projection == "display" else "m.id"
    sql = (
        f"SELECT m.id, {rep} FROM messages m WHERE m.id IN ({{marks}}) "
        f"AND m.state IN ({', '.join('?' for _ in sts)})"
    )
    page: list[int] = []
    seen: set[int] = set()
    at, chunk = 0, max(2 * limit, 20)
    while at < len(ids) and len(page) < limit:
        part = ids[at : at + chunk]
        at, chunk = at + len(part), min(2 * chunk, rank.CANDIDATES)
        shown = dict(
            conn.execute(sql.format(marks=", ".join("?" for _ in part)), (*part, *sts)).fetchall()
        )
        for mid in part:
            if mid in shown and shown[mid] not in seen:
                seen.add(shown[mid])
                page.append(shown[mid])
                if len(page) >= limit:
                    break
    return page


def _hits(
    conn: apsw.Connection,
    plan: query.Plan,
    page: list[int],
    projection: str,
    context: bool,
    kinds_t: tuple[str, ...],
    t0: float,
    timings: dict[str, float] | None,
    clock: Any,
) -> list[dict[str, Any]]:
    """The hit dicts of ``page`` (display ids, in order) with snippets and context (``search``)."""
    t1 = clock()
    out: list[dict[str, Any]] = []
    near: list[tuple] = []
    if page:
        # The page's rows, titles and (with context) its neighbours' positions: one query.
        ncols, nargs = (
            projections.neighbor_positions_sql(projection) if context else ("NULL, NULL", ())
        )
        marks = ", ".join("?" for _ in page)
        rows = {
            r[0]: r
            for r in conn.execute(
                f"SELECT {_PAGE_COLS}, {ncols} "
                "FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id IN ({marks})",
                (*nargs, *page),
            )
        }
        prefixes = (
            tuple(
                w
                for g in plan.groups
                for t in g
                if t.prefix and not t.negated
                for w in textfold.word_tokens(t.text)[-1:]
            )
            if plan.kind == "fts"
            else ()
        )
        find = hits_mod.snippet_finder(
            "fts" if plan.kind == "fts" else "substring", plan.terms, prefixes
        )
        for mid in page:
            r = rows[mid]
            matched_in, snippet, marks_ = _snippet(conn, plan, r, kinds_t, find)
            out.append(
                {
                    "session_id": r[1],
                    "message_id": mid,
                    "role": r[2],
                    "state": r[5],
                    "ts": r[3],
                    "title": r[4],
                    "matched_in": matched_in,
                    "snippet": snippet,
                    "highlights": marks_,
                }
            )
            near.append((mid, r[1], r[9], r[10]))
    t2 = clock()
    if context and out:
        rows_near = projections.neighbor_rows(conn, projection, near)
        preview = hits_mod.preview
        for hit in out:
            before, after = rows_near[hit["message_id"]]
            hit["before"] = None if before is None else preview(before)
            hit["after"] = None if after is None else preview(after)
    if timings is not None:
        timings.update(candidates_s=t1 - t0, page_s=t2 - t1, context_s=clock() - t2)
    return out


#: Row shape of the page query: ids, hit fields, and the raw texts (``m.tool_calls`` as stored:
#: its index text, ``SEARCH_COLUMNS_SQL['tools']``, is computed only when a snippet needs it).
_PAGE_COLS = (
    "m.id, m.session_id, m.role, m.ts, s.title, m.state, m.content, m.tool_calls, m.reasoning"
)


def _tools_text(conn: apsw.Connection, message_id: int) -> str | None:
    """The word index's ``tools`` text of one message (what a tool-call snippet shows)."""
    return conn.execute(
        f"SELECT {SEARCH_COLUMNS_SQL['tools']} FROM messages m WHERE m.id = ?", (message_id,)
    ).fetchone()[0]


def _snippet(
    conn: apsw.Connection, plan: query.Plan, row: tuple, kinds: tuple[str, ...], find: Any
) -> tuple[str, str, list[list[int]]]:
    """``(matched_in, snippet, highlights)`` of a hit (a ``_PAGE_COLS`` row): from the first
    of its searched texts (``_texts``' rules and order) that holds a match, else the first
    non-empty one; the tools text is read only when the texts before it hold no match.
    ``find`` is ``hits.snippet_finder`` of the plan's terms (text -> snippet and highlights,
    None without a match)."""
    content, raw_tools, reasoning = row[6], row[7], row[8]
    if plan.kind == "trigram":
        order: tuple[str, ...] = (
            ("text",) if row[2] in TRIGRAM_ROLES and "text" in kinds and content else ()
        )
    else:
        order = kinds
    tools: Any = _UNREAD
    first: tuple[str, str] | None = None
    for kind in order:
        if kind == "text":
            text = content[:TRIGRAM_PREFIX_CHARS] if plan.kind == "trigram" else content
        elif kind == "reasoning":
            text = reasoning
        elif plan.kind == "fts":
            if tools is _UNREAD:
                tools = _tools_text(conn, row[0]) if raw_tools else None
            text = tools
        else:
            continue
        if not text:
            continue
        found = find(text)
        if found is not None:
            return (kind, *found)
        if first is None:
            first = (kind, text)
    if first is None:
        if tools is _UNREAD:
            tools = _tools_text(conn, row[0]) if raw_tools else None
        first = ("text", content or tools or reasoning or "")
    return (first[0], *hits_mod.excerpt(first[1], []))


_UNREAD = object()  # a hit's tools text not read yet (None is a value: no tool calls)
