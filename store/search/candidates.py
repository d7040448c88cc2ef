"""Candidate ids of a message search: filters, the word/trigram index and scan queries, and the
ranked page (``store.search.run.search`` pages through them; the PostgreSQL backend reuses the
filters and kinds).

Candidates are ids only: texts, snippets and context are read for the page of hits alone
(``store.search.page``). Visibility is filtered here (``_filters``), never in the index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw

from quill.store.apply.normalize import scrub
from quill.store.read import projections
from quill.store.search import group, rank, textfold
from quill.store.search import plan as query
from quill.store.search.columns import (
    CONTENT_SQL,
    KIND_COLUMNS,
    PREFIX_WHOLE_SQL,
    TOOL_RESULT_ROLES,
    TOOLS_BLOB_SQL,
    TRIGRAM_TEXT_SQL,
    TRIGRAM_WHOLE_SQL,
    tools_text,
)

#: Upper bound on rows a scan reads (newest first) before giving up: keeps a short-CJK
#: query on a huge store to a bounded cost; older matches beyond it are not reported.
SCAN_MAX_ROWS = 200_000
#: Upper bound on not-yet-indexed rows a search reads and matches in Python (newest first).
#: Normally the tail is the few rows the indexer has not reached; after an index rebuild it is
#: the whole store, and reading all of it made every search take tens of seconds. Rows past
#: the bound are not searched until indexed; ``search_health`` reports ``degraded``.
TAIL_MAX_ROWS = 10_000
#: Search kinds: which text of a message a query looks in (``kinds=None``: all of them).
KINDS = tuple(KIND_COLUMNS)
#: Row shape every candidate query returns: ids, filters' columns and the index columns' texts.
_COLS = (
    f"m.id, m.session_id, m.role, m.ts, s.title, m.state, {CONTENT_SQL}, {TOOLS_BLOB_SQL}, "
    "m.reasoning"
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
    """``(kind, text)`` of a row that ``plan`` looks in: every selected kind's whole text, for
    every route (the word index holds all of them; the substring routes match the same texts,
    so a longer query never looks in less than a shorter query it contains)."""
    content, tools, reasoning = row[_TEXTS]
    by_kind = {"text": content, "tool": tools_text(tools), "reasoning": reasoning}
    return [(k, by_kind[k]) for k in kinds if by_kind[k]]


#: The substring routes' texts (kind → SQL over a row aliased ``m``), scanned in this order:
#: the tool-call text last, as it is the costly one (``json_tree``) and OR stops early.
SCAN_COLUMNS_SQL = {"text": CONTENT_SQL, "reasoning": "m.reasoning", "tool": TOOLS_BLOB_SQL}


def trigram_covered_sql(
    kinds: tuple[str, ...], false: str = "0", whole: str = TRIGRAM_WHOLE_SQL
) -> str:
    """SQL condition (row ``m``): every text of the row that ``kinds`` select is inside the
    trigram index's view (its whole content is indexed: ``whole``, and no reasoning or tool
    text is searched). For those rows the index answers exactly; every other row is
    scanned (``_indexed(..., rest=True)``). Both backends use it; ``false``: the dialect's
    false (SQLite ``0``, PostgreSQL ``false``); ``whole``: what the backend's index holds
    whole (SQLite ``columns.TRIGRAM_WHOLE_SQL``, PostgreSQL ``columns.PREFIX_WHOLE_SQL``)."""
    if "text" not in kinds:
        return false
    conds = [whole]
    if "reasoning" in kinds:
        conds.append("coalesce(m.reasoning, '') = ''")
    if "tool" in kinds:
        conds.append("coalesce(m.tool_calls, '[]') = '[]'")
        # A tool result's tool name is tool text too. The prefix index holds only
        # TRIGRAM_ROLES rows, never a tool result (and PostgreSQL's partial index keeps the
        # predicate it was built with); a packed tool output is held whole.
        if whole != PREFIX_WHOLE_SQL:
            conds.append(f"NOT (m.role IN {TOOL_RESULT_ROLES!r} AND m.tool_name IS NOT NULL)")
    return "(" + " AND ".join(conds) + ")"


def _filters(
    projection: str | None,
    session_id: str | None,
    role: str | None,
    source: str | None,
    since: float | None,
    until: float | None,
    upto_id: int | None = None,
) -> tuple[str, list[Any]]:
    """``(SQL condition over m and s, its parameters)``: the projection's visible states
    (none when ``projection`` is None) and the given filters (``upto_id``: rows with an id
    at most that, a search's snapshot); ``"1"`` when there is none."""
    sts = projections.states(projection) if projection is not None else ()
    conds, args = ([f"m.state IN ({', '.join('?' for _ in sts)})"], list(sts)) if sts else ([], [])
    for cond, value in (
        ("m.session_id = ?", session_id),
        ("m.role = ?", role),
        ("s.source = ?", source),
        ("m.ts >= ?", since),
        ("m.ts <= ?", until),
        ("m.id <= ?", upto_id),
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
) -> Iterator[list[tuple[int, str]]]:
    """Batches of ``(id, session id)`` of the matching rows above ``upto`` (not yet indexed),
    newest first, matched in Python over the same texts as every route (``_texts``). Rows are
    read a window at a time as batches are consumed, so a page filled by the newest rows
    stops early; at most ``TAIL_MAX_ROWS`` rows are read in all."""
    below, window, left = 2**62, 250, TAIL_MAX_ROWS
    while left > 0:
        rows = conn.execute(
            f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
            f"WHERE m.id > ? AND m.id < ? AND {cond} ORDER BY m.id DESC LIMIT ?",
            (upto, below, *args, min(window, left)),
        ).fetchall()
        if not rows:
            return
        yield [
            (r[0], r[1])
            for r in rows
            if (texts := _texts(plan, r, kinds)) and query.matches(plan, [t for _, t in texts])
        ]
        below, left, window = rows[-1][0], left - len(rows), min(window * 2, 2000)


#: The ids a scan reads: the newest ``cap`` rows with ``lo <= id < below`` (parameters
#: below, lo, cap), walked down the primary key (both backends).
WINDOW_SQL = "SELECT id FROM messages WHERE id < ? AND id >= ? ORDER BY id DESC LIMIT ?"


def window_rows(conn: Any, below: int, lo: int, cap: int) -> int:
    """Rows (matching or not) with ``lo <= id < below``, at most ``cap``: what a scan of that
    window reads (``fence.Scan``'s count; works on both backends)."""
    return conn.execute(f"SELECT count(*) FROM ({WINDOW_SQL}) AS w", (below, lo, cap)).fetchone()[0]


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
    rest: bool = False,
    lo: int = 0,
    cap: int | None = None,
    whole: bool = False,
) -> list[tuple[int, int, str]]:
    """``(id, display id, session id)`` of up to ``limit`` matching rows below ``below``,
    newest first (the display id is the row's representative,
    ``projections.REPRESENTATIVE_SQL``, when ``display``; else the id itself). Only ids:
    texts, snippets and context are read for the page of hits alone (``search``).

    A scan plan, or a trigram plan with ``rest``, scans the newest ``cap`` rows (None:
    ``SCAN_MAX_ROWS``) below ``below`` with ``id >= lo``, or with ``whole`` every row of that
    window (with ``rest``: only the rows the trigram index does not wholly cover,
    ``trigram_covered_sql``; ``fence.Scan`` picks ``lo``, ``cap`` and ``whole``); otherwise
    the word or trigram index answers."""
    rep = f"coalesce({projections.REPRESENTATIVE_SQL}, m.id)" if display else "m.id"
    join = _join(cond)
    if plan.kind == "scan" or rest:
        # Every OR-group, each an AND of (NOT) substring tests over the scanned texts, folded
        # as FTS5 folds (quill_fold): the same logic as query.matches over _texts.
        cols = [c for k, c in SCAN_COLUMNS_SQL.items() if k in kinds]
        if not cols:
            return []
        textfold.register(conn)
        # Packed rows at most ``upto`` are in the trigram index whole: the index side finds a
        # match in their content, so a single-term group need not unpack them here.
        ors, like_args = _substring_sql(plan, cols, upto if rest else None)
        outside = f"NOT {trigram_covered_sql(kinds)} AND " if rest else ""
        if whole:  # one walk down the key, no second lookup of each row
            return conn.execute(
                f"SELECT m.id, {rep}, m.session_id FROM messages m {join} "
                f"WHERE m.id < ? AND m.id >= ? AND {outside}{ors} AND {cond} "
                "ORDER BY m.id DESC LIMIT ?",
                (below, lo, *like_args, *args, limit),
            ).fetchall()
        return conn.execute(
            f"SELECT m.id, {rep}, m.session_id FROM "
            f"({WINDOW_SQL}) AS w JOIN messages m ON m.id = w.id {join} "
            f"WHERE {outside}{ors} AND {cond} ORDER BY m.id DESC LIMIT ?",
            (below, lo, SCAN_MAX_ROWS if cap is None else cap, *like_args, *args, limit),
        ).fetchall()
    if plan.kind == "trigram":
        if "text" not in kinds:
            return []
        # The index (detail=none) answers "holds these trigrams": a superset, made exact by
        # the same substring tests the scan route makes, over the text the index was fed.
        table, match = "messages_trigram", trigram_match(plan)
        textfold.register(conn)
        exact, exact_args = _substring_sql(plan, [TRIGRAM_TEXT_SQL])
        cond, args = f"{exact} AND {cond}", [*exact_args, *args]
    else:
        table, match = "messages_fts", plan.match
        if kinds != KINDS:
            match = "{" + " ".join(KIND_COLUMNS[k] for k in kinds) + "} : (" + match + ")"
    # LIMIT is a literal, not a parameter: SQLite marks an FTS5 query's LIMIT parameter as
    # plan-relevant and re-prepares the whole statement at every bind (as costly as the query's
    # own run; bench/RESULTS.md). Batch sizes are few (limit × 2^k).
    return conn.execute(
        f"SELECT m.id, {rep}, m.session_id FROM {table} f JOIN messages m ON m.id = f.rowid "
        f"{join} WHERE {table} MATCH ? AND f.rowid <= ? AND f.rowid < ? AND {cond} "
        f"ORDER BY f.rowid DESC LIMIT {int(limit)}",
        (match, upto, below, *args),
    ).fetchall()


#: Most trigrams of one term the index is asked for: any subset of a term's trigrams gives a
#: superset of its rows, and the substring test decides; a pasted line stays a cheap query.
TRIGRAMS_PER_TERM = 16


def trigram_match(plan: query.Plan) -> str:
    """The MATCH expression of a trigram ``plan`` for ``messages_trigram`` (``detail=none``:
    no positions, so no phrases): every OR-group becomes the AND of up to
    ``TRIGRAMS_PER_TERM`` distinct trigrams of each of its positive terms (spread over the
    term). Negated terms are left to the substring test: "lacks a trigram" is not "lacks the
    term". Each trigram is a 3-character quoted string, which the trigram tokenizer makes one
    token. The rows it matches are a superset of the plan's; ``_substring_sql`` is exact."""
    ors = []
    for group_ in plan.groups:
        grams: dict[str, None] = {}
        for t in group_:
            if t.negated:
                continue
            folded = textfold.fold(t.text)
            found = list(dict.fromkeys(folded[i : i + 3] for i in range(len(folded) - 2)))
            step = max(1, -(-len(found) // TRIGRAMS_PER_TERM))
            grams.update(dict.fromkeys(found[::step] + found[-1:]))
        ors.append("(" + " AND ".join('"' + g.replace('"', '""') + '"' for g in grams) + ")")
    return " OR ".join(ors)


def _substring_sql(
    plan: query.Plan, cols: list[str], indexed: int | None = None
) -> tuple[str, list[Any]]:
    """``(SQL condition, its arguments)``: a row satisfies ``plan``'s OR-groups, each an AND
    of (NOT) case-folded substring tests where a term holds when one of ``cols`` (SQL text
    expressions over ``m``) holds it — ``query.matches`` in SQL. Needs ``textfold.register``
    on the connection for non-ASCII text.

    ``indexed`` (the index watermark, for the scan beside the trigram index): a packed row
    with ``id <= indexed`` has its whole content in the trigram index
    (``columns.TRIGRAM_SCOPE_SQL``), whose side of the merge finds every row whose content
    satisfies the plan. A group of one positive term is then satisfied by such a row's
    content only where the index finds the row anyway, so it skips the content test there
    (the text is not unpacked); merged with the index's, the rows found are the same. Groups
    of several terms or with a negated one test every text (a term in the content and
    another in the tool calls). A plain row is tested as on PostgreSQL, which packs nothing."""
    ors, args = [], []
    for group_ in plan.groups:
        conds = []
        skip = indexed is not None and len(group_) == 1 and not group_[0].negated
        for t in group_:
            folded = textfold.fold(t.text)
            tests = []
            for c in cols:
                if skip and c == CONTENT_SQL:
                    args.append(indexed)
                    test = _contains(c, folded, args)
                    packed_row = "m.id <= ? AND typeof(m.content) = 'blob'"
                    tests.append(f"(CASE WHEN {packed_row} THEN 0 ELSE {test} END)")
                else:
                    tests.append(_contains(c, folded, args))
            anycol = " OR ".join(tests)
            conds.append(("NOT " if t.negated else "") + f"coalesce({anycol}, 0)")
        ors.append("(" + " AND ".join(conds) + ")")
    return "(" + " OR ".join(ors) + ")", args


def _contains(col: str, folded: str, args: list[Any]) -> str:
    """SQL: the text ``col`` holds the folded term ``folded`` once folded as FTS5 folds
    (``quill_fold``); appends the test's arguments to ``args``. Cheaper forms that are exact:

    * a term no character folds into (CJK, emoji, digits: ``textfold.fold_free``) is in the
      folded text exactly where it is in the raw text: ``instr`` in C, no Python call;
    * for message text, SQLite's ``lower()`` folds ASCII as FTS5 does and leaves other
      characters alone, so a match in ``lower(col)`` is a match in the folded text, and a
      text that is all ASCII (``length = octet_length``) has no other: only the rest (rows
      holding non-ASCII text without an ASCII-folded match) are folded in Python. The tools
      text is a BLOB (``TOOLS_BLOB_SQL``): it always takes the Python fold."""
    if textfold.fold_free(folded):
        args.append(folded)
        return f"instr({col}, ?) > 0"
    if col == TOOLS_BLOB_SQL:
        args.append(folded)
        return f"instr(quill_fold({col}), ?) > 0"
    args.extend([folded, folded])
    return (
        f"(CASE WHEN instr(lower({col}), ?) > 0 THEN 1 "
        f"WHEN length({col}) = octet_length({col}) THEN 0 "
        f"ELSE instr(quill_fold({col}), ?) > 0 END)"
    )


def _join(cond: str) -> str:
    """The sessions join, only when a filter needs it (``s.source``)."""
    return "JOIN sessions s ON s.id = m.session_id" if "s." in cond else ""


def _ranked_page(
    conn: apsw.Connection,
    plan: query.Plan,
    text: str,
    upto: int,
    picked: tuple[str, list[Any]],
    projection: str,
    kinds: tuple[str, ...],
    page: group.Page,
) -> bool:
    """Offer the visible ranked candidates to ``page``, best first; True when every
    candidate was offered and there were fewer than ``rank.CANDIDATES`` (the count is exact).

    The candidates are the newest ``rank.CANDIDATES`` indexed rows (at most ``upto``) that
    match and pass the caller's filters ``picked`` (``_filters`` without a projection): the
    filters bound the candidate set. Visibility (the projection's states) and display dedupe
    are applied to the ranked list, in order, a chunk of ids at a time, so only the rows the
    page and its bounded count (``group``) need are read: checking a state reads the message
    row. Rows above ``upto`` have no index statistics and are not ranked (``search_health``:
    pending); the caller offers them after these (``run._offer_tail``)."""
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
        return True  # damaged index met by a reader: as newest-first, nothing ranked to offer
    ids = [i for i, _ in ranked]
    sts = projections.states(projection)
    rep = f"coalesce({projections.REPRESENTATIVE_SQL}, m.id)" if projection == "display" else "m.id"
    sql = (
        f"SELECT m.id, {rep}, m.session_id FROM messages m WHERE m.id IN ({{marks}}) "
        f"AND m.state IN ({', '.join('?' for _ in sts)})"
    )
    at, chunk = 0, max(2 * page.limit, 20)
    while at < len(ids) and not page.done:
        part = ids[at : at + chunk]
        at, chunk = at + len(part), min(2 * chunk, rank.CANDIDATES)
        shown = {
            mid: (rep_id, sid)
            for mid, rep_id, sid in conn.execute(
                sql.format(marks=", ".join("?" for _ in part)), (*part, *sts)
            ).fetchall()
        }
        for mid in part:
            if mid in shown:
                page.offer(*shown[mid])
    return at >= len(ids) and len(ids) < rank.CANDIDATES
