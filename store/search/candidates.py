"""Candidate ids of a message search: filters, the word/trigram index and scan queries, and the
ranked page (``store.search.run.search`` pages through them; the PostgreSQL backend reuses the
filters and kinds).

Candidates are ids only: texts, snippets and context are read for the page of hits alone
(``store.search.page``). Visibility is filtered here (``_filters``), never in the index.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.apply.normalize import scrub
from quill.store.read import projections
from quill.store.schema import (
    KIND_COLUMNS,
    TOOLS_BLOB_SQL,
    TRIGRAM_PREFIX_CHARS,
    TRIGRAM_ROLES,
    tools_text,
)
from quill.store.search import plan as query
from quill.store.search import rank, textfold

#: Upper bound on rows a scan reads (newest first) before giving up: keeps a short-CJK
#: query on a huge store to a bounded cost; older matches beyond it are not reported.
SCAN_MAX_ROWS = 200_000
#: Search kinds: which text of a message a query looks in (``kinds=None``: all of them).
KINDS = tuple(KIND_COLUMNS)
#: Row shape every candidate query returns: ids, filters' columns and the index columns' texts.
_COLS = (
    f"m.id, m.session_id, m.role, m.ts, s.title, m.state, m.content, {TOOLS_BLOB_SQL}, m.reasoning"
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
    tools = tools_text(tools)
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
