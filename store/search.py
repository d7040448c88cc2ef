"""Message search over the word index (FTS5 unicode61), the scoped trigram index, and scans.

Rules (issue 3 §5; architecture.md "Measured facts the schema relies on"):
* any string is a valid query (``query.plan``); results are newest first (ranking a common
  word over 1M rows costs seconds, newest-first ~1 ms);
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
* only the page of hits returned gets a snippet and context.
"""
from __future__ import annotations

import time
from typing import Any

import apsw

from . import hits as hits_mod
from . import projections, query, textfold
from .indexer import fts_state, indexed_upto
from .normalize import scrub
from .schema import KIND_COLUMNS, SEARCH_COLUMNS_SQL, TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES

SNIPPET_CHARS = hits_mod.SNIPPET_CHARS
#: Upper bound on rows a scan reads (newest first) before giving up: keeps a short-CJK
#: query on a huge store to a bounded cost; older matches beyond it are not reported.
SCAN_MAX_ROWS = 200_000
#: Search kinds: which text of a message a query looks in (``kinds=None``: all of them).
KINDS = tuple(KIND_COLUMNS)
#: Row shape every candidate query returns: ids, filters' columns and the index columns' texts.
_COLS = ("m.id, m.session_id, m.role, m.ts, s.title, m.state, m.content, "
         f"{SEARCH_COLUMNS_SQL['tools']}, m.reasoning")
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
    by_kind = {"text": content, "tool": tools if plan.kind == "fts" else None, "reasoning": reasoning}
    return [(k, by_kind[k]) for k in kinds if by_kind[k]]


def _filters(projection: str, session_id: str | None, role: str | None, source: str | None,
             since: float | None, until: float | None) -> tuple[str, list[Any]]:
    sts = projections.states(projection)
    conds, args = [f"m.state IN ({', '.join('?' for _ in sts)})"], list(sts)
    for cond, value in (("m.session_id = ?", session_id), ("m.role = ?", role), ("s.source = ?", source),
                        ("m.ts >= ?", since), ("m.ts <= ?", until)):
        if value is not None:
            conds.append(cond)
            args.append(scrub(value) if isinstance(value, str) else value)
    return " AND ".join(conds), args


def _escape_like(text: str) -> str:
    """``text`` as a literal inside ``LIKE … ESCAPE '\\'`` (used by the PostgreSQL backend)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _tail(conn: apsw.Connection, plan: query.Plan, upto: int, cond: str, args: list[Any],
          kinds: tuple[str, ...]) -> list[int]:
    # Bounded newest-first: after an index rebuild the unindexed tail can be the whole store.
    rows = conn.execute(f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                        f"WHERE m.id > ? AND {cond} ORDER BY m.id DESC LIMIT ?", (upto, *args, SCAN_MAX_ROWS)).fetchall()
    return [r[0] for r in rows if (texts := _texts(plan, r, kinds)) and query.matches(plan, [t for _, t in texts])]


def _indexed(conn: apsw.Connection, plan: query.Plan, upto: int, cond: str, args: list[Any],
             below: int, limit: int, kinds: tuple[str, ...]) -> list[int]:
    """Ids of up to ``limit`` matching rows below ``below``, newest first. Only ids: texts,
    snippets and context are read for the page of hits alone (``search``)."""
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
        return [r[0] for r in conn.execute(
            f"SELECT m.id FROM (SELECT id FROM messages WHERE id < ? ORDER BY id DESC LIMIT ?) AS w "
            f"JOIN messages m ON m.id = w.id {join} "
            f"WHERE ({' OR '.join(ors)}) AND {cond} ORDER BY m.id DESC LIMIT ?",
            (below, SCAN_MAX_ROWS, *like_args, *args, limit))]
    if plan.kind == "trigram":
        if "text" not in kinds:
            return []
        table, match = "messages_trigram", plan.match
    else:
        table, match = "messages_fts", plan.match
        if kinds != KINDS:
            match = "{" + " ".join(KIND_COLUMNS[k] for k in kinds) + "} : (" + match + ")"
    return [r[0] for r in conn.execute(
        f"SELECT m.id FROM {table} f JOIN messages m ON m.id = f.rowid {join} "
        f"WHERE {table} MATCH ? AND f.rowid <= ? AND f.rowid < ? AND {cond} ORDER BY f.rowid DESC LIMIT ?",
        (match, upto, below, *args, limit))]


def _join(cond: str) -> str:
    """The sessions join, only when a filter needs it (``s.source``)."""
    return "JOIN sessions s ON s.id = m.session_id" if "s." in cond else ""


def route(text: str, *, substring: bool = False, kinds: list[str] | None = None) -> dict[str, Any]:
    """How ``text`` will be searched, for telling the user (issue 12 B8): ``{"route": fts |
    trigram | scan | none, "narrower": bool, "note": str | None}``. ``narrower`` is True when
    the route covers less than the word index does; ``note`` then says what is left out."""
    plan = query.plan(text, substring=substring)
    note = None
    if plan.kind == "trigram":
        note = (f"substring search uses the trigram index, which covers only {' and '.join(TRIGRAM_ROLES)} "
                f"message text (its first {TRIGRAM_PREFIX_CHARS} characters); tool calls, tool output "
                "and reasoning are not searched")
    elif plan.kind == "scan":
        short = [t for g in plan.groups for t in g if len(t.text) < query.TRIGRAM_MIN_CHARS]
        why = (f"short term(s) {', '.join(repr(t.text) for t in short)} (< {query.TRIGRAM_MIN_CHARS} characters)"
               if short else "this query")
        note = (f"{why} searched by a scan of the newest {SCAN_MAX_ROWS} messages' text and reasoning; "
                "older messages and tool calls are not searched")
    return {"route": plan.kind, "narrower": note is not None, "note": note}


def search(conn: apsw.Connection, text: str, *, limit: int = 20, session_id: str | None = None,
           role: str | None = None, source: str | None = None, projection: str = "display",
           since: float | None = None, until: float | None = None, substring: bool = False,
           context: bool = True, kinds: list[str] | None = None,
           timings: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Messages matching ``text``, newest first, at most ``limit``.

    Hits are dicts: ``session_id``, ``message_id``, ``role``, ``state``, ``ts``, ``title``,
    ``matched_in`` (``text`` | ``tool`` | ``reasoning``: where the snippet comes from),
    ``snippet`` (centred on the match) with ``highlights`` (``[start, end)`` character spans
    of the matched words in it) and, with ``context``, ``before``/``after``: the neighbouring
    messages in the projection's order (display dicts as ``projections.read`` returns them,
    cut to a bounded preview by ``hits.preview``, or None at an end).
    ``since``/``until`` bound the message timestamp (epoch seconds). ``substring=True``
    searches substrings (trigram scope) instead of words. ``kinds`` limits where to look:
    message ``text``, ``tool`` calls (names and decoded arguments), ``reasoning``.
    ``timings``, when given, receives the seconds of each stage: ``candidates_s`` (index,
    tail and display dedupe: ids only), ``page_s`` (the page's rows and snippets, one query)
    and ``context_s`` (the page's neighbours, two queries) — for the benchmark.
    Raises ``ValueError`` for an unknown projection or kind; any query string is accepted.
    """
    plan = query.plan(text, substring=substring)
    kinds_t = _kinds(kinds)
    if plan.kind == "none" or limit <= 0:
        return []
    cond, args = _filters(projection, session_id, role, source, since, until)
    clock = time.perf_counter
    t0 = clock()
    # Detached (damaged) indexes are not read: everything counts as the unindexed tail.
    usable = fts_state(conn) == "ok"
    upto = indexed_upto(conn) if usable else 0
    found: list[int] = [] if plan.kind == "scan" else _tail(conn, plan, upto, cond, args, kinds_t)
    below = 2 ** 62
    page: list[int] = []
    seen: set[int] = set()
    batch = max(limit * 2, 20)
    while True:
        reps = projections.representatives(conn, found) if projection == "display" else {}
        for fid in found:
            mid = reps.get(fid, fid)
            if mid in seen:
                continue
            seen.add(mid)
            page.append(mid)
            if len(page) >= limit:
                break
        if len(page) >= limit:
            break
        if not usable and plan.kind != "scan":
            break
        try:
            found = _indexed(conn, plan, upto, cond, args, below, batch, kinds_t)
        except (apsw.CorruptError, apsw.NotADBError):
            found = []  # damaged index met by a reader: the tail scan is all we can offer
        if not found:
            break
        below = found[-1]
    t1 = clock()
    rows: dict[int, tuple] = {}
    if page:
        marks = ", ".join("?" for _ in page)
        rows = {r[0]: r for r in conn.execute(
            f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id IN ({marks})", page)}
    prefixes = tuple(w for g in plan.groups for t in g if t.prefix and not t.negated
                     for w in textfold.word_tokens(t.text)[-1:]) if plan.kind == "fts" else ()
    out = []
    for mid in page:
        r = rows[mid]
        hit = {"session_id": r[1], "message_id": r[0], "role": r[2], "state": r[5], "ts": r[3], "title": r[4]}
        hit.update(_snippet(plan, r, kinds_t, prefixes))
        out.append(hit)
    t2 = clock()
    if context and out:
        near = projections.neighbors_many(conn, projection, [(h["session_id"], h["message_id"]) for h in out])
        for hit in out:
            before, after = near.get(hit["message_id"], (None, None))
            hit["before"] = None if before is None else hits_mod.preview(before)
            hit["after"] = None if after is None else hits_mod.preview(after)
    if timings is not None:
        timings.update(candidates_s=t1 - t0, page_s=t2 - t1, context_s=clock() - t2)
    return out


def _snippet(plan: query.Plan, row: tuple, kinds: tuple[str, ...], prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The snippet of a hit: from the first of its searched texts that holds a match."""
    texts = _texts(plan, row, kinds) or [("text", row[6] or row[7] or row[8] or "")]
    for kind, text in texts:
        spans = hits_mod.match_spans(text, "fts" if plan.kind == "fts" else "substring", plan.terms, prefixes)
        if spans:
            break
    else:
        kind, text = texts[0]
        spans = []
    snippet, marks = hits_mod.excerpt(text, spans)
    return {"matched_in": kind, "snippet": snippet, "highlights": marks}
