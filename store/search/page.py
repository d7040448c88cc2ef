"""The page of search hits: the page's rows, snippets (from the first searched text holding a
match) and, with context, the neighbouring messages' previews (``store.search.run.search``).

One query reads the page's rows with their neighbours' positions and one the neighbours' rows;
a tool-call text is built (json_tree) only for a hit whose snippet needs it.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.read import projections
from quill.store.search import hits as hits_mod
from quill.store.search import plan as query
from quill.store.search import textfold
from quill.store.search.columns import CONTENT_SQL, HAS_TOOLS_SQL, TOOLS_BLOB_SQL, tools_text


def snippet_finder(plan: query.Plan) -> Any:
    """``hits.snippet_finder`` for ``plan``'s terms, with the words its prefix terms
    (``conf*``) start (both backends' snippets: text -> (snippet, highlights) | None)."""
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
    return hits_mod.snippet_finder(
        "fts" if plan.kind == "fts" else "substring", plan.terms, prefixes
    )


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
                f"SELECT {_PAGE_COLS}, {ncols} FROM messages m "
                f"JOIN sessions s ON s.id = m.session_id WHERE m.id IN ({marks})",
                (*nargs, *page),
            )
        }
        find = snippet_finder(plan)
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


#: Row shape of the page query: ids, hit fields, and the raw texts (in place of the tools text,
#: ``HAS_TOOLS_SQL``: its index text, ``TOOLS_BLOB_SQL``, is computed only when a snippet needs
#: it).
_PAGE_COLS = (
    f"m.id, m.session_id, m.role, m.ts, s.title, m.state, {CONTENT_SQL}, {HAS_TOOLS_SQL}, "
    "m.reasoning"
)


def _tools_text(conn: apsw.Connection, message_id: int) -> str | None:
    """The word index's ``tools`` text of one message (what a tool-call snippet shows)."""
    return tools_text(
        conn.execute(
            f"SELECT {TOOLS_BLOB_SQL} FROM messages m WHERE m.id = ?", (message_id,)
        ).fetchone()[0]
    )


def _snippet(
    conn: apsw.Connection, plan: query.Plan, row: tuple, kinds: tuple[str, ...], find: Any
) -> tuple[str, str, list[list[int]]]:
    """``(matched_in, snippet, highlights)`` of a hit (a ``_PAGE_COLS`` row): from the first
    of its searched texts (``_texts``' rules and order) that holds a match, else the first
    non-empty one; the tools text is read only when the texts before it hold no match.
    ``find`` is ``hits.snippet_finder`` of the plan's terms (text -> snippet and highlights,
    None without a match)."""
    content, raw_tools, reasoning = row[6], row[7], row[8]
    tools: Any = _UNREAD
    first: tuple[str, str] | None = None
    for kind in kinds:  # every route looks in the same texts (candidates._texts)
        if kind == "text":
            text = content
        elif kind == "reasoning":
            text = reasoning
        else:
            if tools is _UNREAD:
                tools = _tools_text(conn, row[0]) if raw_tools else None
            text = tools
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
