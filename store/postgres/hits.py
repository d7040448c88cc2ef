"""The hits of a PostgreSQL search page: each display id's row with its session's title, the
texts a snippet is cut from, and (with context) its visible neighbours, read by one
statement, and usually by the statement that found the page's candidates (``Prefetch``).

A neighbour is the row just before or after the hit in its session's projection order: the
visible row at the adjacent position, and, where several rows share that position
(display), the live one, then the newest (``seq``): the rule of
``projections.neighbor_positions_sql`` and ``projections.neighbor_rows``, here as one
``LATERAL`` probe per side and hit (ordered by position, then that rule, first row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quill.store.postgres.connection import PgConnection
from quill.store.read import projections
from quill.store.search import hits as hits_mod
from quill.store.search import page as page_mod
from quill.store.search import plan as query
from quill.store.search.columns import TOOL_RESULT_ROLES

_HIT_WIDTH = 12
_MSG_WIDTH = len(projections.MSG_COLS.split(","))
#: A message's tool text (search kind "tool"): its tool-call text and, on a tool result, the
#: tool's name (``schema.quill_tool_text``), as SQLite's ``tools`` column.
TOOL_TEXT = "quill_tool_text(m.tool_calls, m.role, m.tool_name)"
#: ``TOOL_TEXT``'s value on a row without tool calls, NULL on a row with calls:
#: ``quill_tool_text`` of NULL or ``[]`` is "", so what is left is a tool result's tool name
#: and a space. The function (plpgsql: the calls' JSON decoded in a subtransaction, behind a
#: ``SET search_path`` wrapper) runs only where this is NULL and a snippet needs the text.
TOOL_TEXT_WITHOUT_CALLS = (
    "CASE WHEN coalesce(m.tool_calls, '[]') = '[]' THEN CASE WHEN m.role IN "
    f"{TOOL_RESULT_ROLES!r} AND m.tool_name IS NOT NULL THEN m.tool_name || ' ' ELSE '' END END"
)
#: Columns of a hit row before its neighbours': id, session, role, content, one unused
#: (NULL), ts, title, state, two unused, reasoning, ``TOOL_TEXT_WITHOUT_CALLS``.
_COLS = (
    "m.id AS hid, m.session_id, m.role, m.content, NULL, m.ts, s.title, m.state, NULL, NULL, "
    f"m.reasoning, {TOOL_TEXT_WITHOUT_CALLS}"
)


#: Of the display projection's states, ``live`` sorts last (``compacted`` < ``live``), so
#: among them ``state DESC`` orders as ``state = 'live' DESC`` (the live row first): the
#: order the ``messages_session_state`` index (session, pos, state, seq) gives read
#: backwards, so a probe ordered so needs no sort of its own (a plan node fewer to start on
#: every run). Checked by ``tests/test_pg_search_prefetch.py``.
LIVE_FIRST = {"display": "state DESC"}
_LIVE_DESC = "state = 'live' DESC"  # any other projection: the rule as written


def live_first(projection: str, alias: str) -> str:
    """SQL ordering rows of ``alias`` in ``projection``'s states live first (``LIVE_FIRST``)."""
    return f"{alias}.{LIVE_FIRST.get(projection, _LIVE_DESC)}"


#: ``projections.REPRESENTATIVE_SQL`` (a display position's row: live first, then the
#: newest), ordered by ``LIVE_FIRST``: the index gives its order, no sort per candidate.
REPRESENTATIVE_SQL = (
    "(SELECT r.id FROM messages r WHERE r.session_id = m.session_id "
    "AND r.pos = m.pos "
    "AND r.state IN ('live', 'compacted') "
    f"ORDER BY {live_first('display', 'r')}, r.seq DESC LIMIT 1)"
)


def _sql(projection: str, context: bool, ids: str | None) -> tuple[str, tuple[Any, ...], tuple]:
    """``(sql, head, tail)``: SQL of the hit rows of the display ids ``ids`` selects (an SQL
    condition on ``m.id``; its parameters go between ``head`` and ``tail``): ``_HIT_WIDTH``
    columns, then with ``context`` the ``MSG_COLS`` of the row before and of the row after
    (NULLs at an end). ``ids`` None: the display ids ``d`` of a CTE ``f`` (``Prefetch``),
    each row led by one more column, ``pat``: the id ``f`` pairs with that display id."""
    lead, rows_from, where = (
        ("f.at AS pat, ", "f JOIN messages m ON m.id = f.d", "")
        if ids is None
        else ("", "messages m", f" WHERE {ids}")
    )
    if not context:
        return (
            f"SELECT {lead}{_COLS} FROM {rows_from} JOIN sessions s ON s.id = m.session_id{where}",
            (),
            (),
        )
    sts = projections.states(projection)
    marks = ", ".join("?" for _ in sts)
    col = "pos" if projection == "display" else "seq"
    near = ", ".join(f"n.{c.strip()}" for c in projections.MSG_COLS.split(","))

    def probe(alias: str, op: str, order: str) -> str:
        # The visible row nearest before/after the hit in its session's order; of several
        # at that position the live one, then the newest (``projections.neighbor_rows``).
        return (
            f"LEFT JOIN LATERAL (SELECT {near} FROM messages n WHERE n.session_id = "
            f"m.session_id AND n.state IN ({marks}) AND n.{col} {op} m.{col} ORDER BY "
            f"n.{col} {order}, {live_first(projection, 'n')}, n.seq DESC LIMIT 1) AS {alias} "
            "ON true"
        )

    return (
        f"SELECT {lead}{_COLS}, nb.*, na.* FROM {rows_from} "
        f"JOIN sessions s ON s.id = m.session_id "
        f"{probe('nb', '<', 'DESC')} {probe('na', '>', 'ASC')}{where}",
        (*sts, *sts),
        (),
    )


class Prefetch:
    """Runs a search's first candidate statement (``windows.newest``'s ``fetch``) with the
    hit rows of the first ``limit`` display ids it finds joined on, so a page filled by its
    first batch costs one statement. ``rows``: ``{display id: hit row}`` read so far."""

    def __init__(self, conn: PgConnection, projection: str, context: bool, limit: int):
        self.conn, self.projection, self.context, self.limit = conn, projection, context, limit
        self.rows: dict[int, tuple] = {}

    def __call__(self, sql: str, args: Sequence[Any], generic: bool = False) -> list[tuple]:
        """The candidate statement's rows (its own columns), newest first; keeps the hit rows
        of its first ``limit`` distinct display ids. ``generic``: as ``PgConnection.execute``
        (the hits' part is key lookups whatever the values). Raises the store error tree."""
        # ``c`` and ``p`` are MATERIALIZED (read once): a generic plan estimates a row or two
        # for ``c``, and with ``p`` inlined it may re-read the hits once per candidate row.
        # Each hit row carries the candidate id it goes with (``pat``: the newest candidate
        # of its display id), so it joins the candidates by that alone (one join and no
        # second read of ``f``: fewer plan nodes to start on every run).
        hit_sql, head, tail = _sql(self.projection, self.context, None)
        width = _HIT_WIDTH + (2 * _MSG_WIDTH if self.context else 0)
        rows = self.conn.execute(
            f"WITH c AS MATERIALIZED ({sql}), "
            f"f AS (SELECT d, max(id) AS at FROM c GROUP BY d ORDER BY at DESC LIMIT ?), "
            f"p AS MATERIALIZED ({hit_sql}) "
            "SELECT c.*, p.* FROM c LEFT JOIN p ON p.pat = c.id ORDER BY c.id DESC",
            (*args, self.limit, *head, *tail),
            generic=generic,
        ).fetchall()
        for r in rows:
            if r[-width] is not None:
                self.rows[r[-width]] = r[-width:]
        return [r[: -width - 1] for r in rows]


def rows(
    conn: PgConnection, page: list[int], projection: str, context: bool, have: dict[int, tuple]
) -> list[tuple]:
    """The hit rows of ``page`` (display ids), in order: those in ``have`` and the rest read
    in one statement. Raises the store error tree."""
    missing = [i for i in page if i not in have]
    if missing:
        sql, head, tail = _sql(projection, context, "m.id = ANY(?)")
        read = conn.execute(sql, (*head, missing, *tail), generic=True).fetchall()
        have = {**have, **{r[0]: r for r in read}}
    return [have[i] for i in page if i in have]


def dicts(
    conn: PgConnection,
    plan: query.Plan,
    found: list[tuple],
    projection: str,
    context: bool,
    kinds_t: tuple[str, ...],
) -> list[dict[str, Any]]:
    """The hit dicts of the hit rows ``found`` (``rows``), with snippets and context."""
    mid = _HIT_WIDTH + _MSG_WIDTH
    near = [n for r in found for n in (r[_HIT_WIDTH:mid], r[mid:]) if context and n[0] is not None]
    unique = {n[0]: n for n in near}
    inflated = dict(
        zip(
            unique,
            projections.inflate_rows(conn, list(unique.values()), with_meta=projection != "model"),
        )
    )
    find = page_mod.snippet_finder(plan)
    snippets = [_snippet(r, r[11] if r[11] is not None else _UNREAD, kinds_t, find) for r in found]
    unread = [r[0] for r, s in zip(found, snippets) if s is _UNREAD]
    if unread:  # rows with tool calls whose snippet needs their tool text: one statement
        tools = dict(
            conn.execute(
                f"SELECT m.id, {TOOL_TEXT} FROM messages m WHERE m.id = ANY(?)",
                (unread,),
                generic=True,
            ).fetchall()
        )
        snippets = [
            _snippet(r, tools[r[0]], kinds_t, find) if s is _UNREAD else s
            for r, s in zip(found, snippets)
        ]
    out = []
    for r, (matched_in, (snip, marks)) in zip(found, snippets):
        hit = {
            "session_id": r[1],
            "message_id": r[0],
            "role": r[2],
            "state": r[7],
            "ts": r[5],
            "title": r[6],
            "matched_in": matched_in,
            "snippet": snip,
            "highlights": marks,
        }
        if context:
            before, after = r[_HIT_WIDTH], r[mid]
            hit["before"] = None if before is None else hits_mod.preview(inflated[before])
            hit["after"] = None if after is None else hits_mod.preview(inflated[after])
        out.append(hit)
    return out


_UNREAD: Any = object()  # a hit's tool text not read yet (it has tool calls)


def _snippet(
    r: tuple, tools: Any, kinds: tuple[str, ...], find: Any
) -> tuple[str, tuple[str, list[list[int]]]] | Any:
    """``(matched_in, (snippet, highlights))`` of the hit row ``r`` (as SQLite's
    ``page._snippet``): from the first of the searched ``kinds`` whose text holds a match
    (``find``: ``page.snippet_finder``), else the first non-empty one; ``tools`` is the row's
    tool text, or ``_UNREAD`` (then ``_UNREAD`` is returned where the answer needs it)."""
    first = None
    for kind in kinds:
        text = r[3] if kind == "text" else r[10] if kind == "reasoning" else tools
        if text is _UNREAD:
            return _UNREAD
        if not text:
            continue
        found = find(text)
        if found is not None:
            return kind, found
        if first is None:
            first = (kind, text)
    if first is None:
        if not r[3] and tools is _UNREAD:
            return _UNREAD
        first = ("text", r[3] or tools or r[10] or "")
    return first[0], hits_mod.excerpt(first[1], [])
