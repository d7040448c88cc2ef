"""Message search over the word index (FTS5 unicode61), the scoped trigram index, and scans.

Rules (issue 3 §5; DESIGN.md "Measured facts"):
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
* short CJK terms (< 3 characters) and short substring terms fall back to a LIKE scan,
  newest first, stopped after ``SCAN_MAX_ROWS`` rows.
"""
from __future__ import annotations

from typing import Any

import apsw

from . import projections, query
from .indexer import fts_state, indexed_upto
from .schema import TRIGRAM_PREFIX_CHARS, TRIGRAM_ROLES

SNIPPET_CHARS = 160
#: Upper bound on rows a LIKE scan reads (newest first) before giving up: keeps a short-CJK
#: query on a huge store to a bounded cost; older matches beyond it are not reported.
SCAN_MAX_ROWS = 200_000
_COLS = "m.id, m.session_id, m.role, m.content, m.tool_calls, m.ts, s.title, m.state"


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first occurrence of any term (case-insensitive)."""
    low = text.lower()
    hits = [i for t in terms if (i := low.find(t)) >= 0]
    start = max(0, min(hits) - width // 3) if hits else 0
    piece = " ".join(text[start:start + width].split())
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(text) else "")


def _filters(projection: str, session_id: str | None, role: str | None, source: str | None,
             since: float | None, until: float | None) -> tuple[str, list[Any]]:
    sts = projections.states(projection)
    conds, args = [f"m.state IN ({', '.join('?' for _ in sts)})"], list(sts)
    for cond, value in (("m.session_id = ?", session_id), ("m.role = ?", role), ("s.source = ?", source),
                        ("m.ts >= ?", since), ("m.ts <= ?", until)):
        if value is not None:
            conds.append(cond)
            args.append(value)
    return " AND ".join(conds), args


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _tail(conn: apsw.Connection, plan: query.Plan, upto: int, cond: str, args: list[Any]) -> list[tuple]:
    # Bounded newest-first: after an index rebuild the unindexed tail can be the whole store.
    rows = conn.execute(f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                        f"WHERE m.id > ? AND {cond} ORDER BY m.id DESC LIMIT ?", (upto, *args, SCAN_MAX_ROWS)).fetchall()
    if plan.kind == "trigram":
        return [r for r in rows if r[2] in TRIGRAM_ROLES and r[3] and query.matches(plan, r[3][:TRIGRAM_PREFIX_CHARS])]
    return [r for r in rows if query.matches(plan, (r[3] or "") + " " + (r[4] or ""))]


def _indexed(conn: apsw.Connection, plan: query.Plan, upto: int, cond: str, args: list[Any],
             below: int, limit: int) -> list[tuple]:
    if plan.kind == "scan":
        # Every OR-group, each an AND of LIKE / NOT LIKE terms: the same logic as query.matches.
        likes, like_args = [], []
        for group in plan.groups:
            conds = []
            for t in group:
                conds.append(("NOT " if t.negated else "") + "lower(m.content) LIKE ? ESCAPE '\\'")
                like_args.append("%" + _escape_like(t.text.lower()) + "%")
            likes.append("(" + " AND ".join(conds) + ")")
        return conn.execute(
            f"SELECT {_COLS} FROM (SELECT id FROM messages WHERE id < ? ORDER BY id DESC LIMIT ?) AS w "
            f"JOIN messages m ON m.id = w.id JOIN sessions s ON s.id = m.session_id "
            f"WHERE ({' OR '.join(likes)}) AND {cond} ORDER BY m.id DESC LIMIT ?",
            (below, SCAN_MAX_ROWS, *like_args, *args, limit)).fetchall()
    table = "messages_trigram" if plan.kind == "trigram" else "messages_fts"
    return conn.execute(
        f"SELECT {_COLS} FROM {table} f JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.id = m.session_id "
        f"WHERE {table} MATCH ? AND f.rowid <= ? AND f.rowid < ? AND {cond} ORDER BY f.rowid DESC LIMIT ?",
        (plan.match, upto, below, *args, limit)).fetchall()


def search(conn: apsw.Connection, text: str, *, limit: int = 20, session_id: str | None = None,
           role: str | None = None, source: str | None = None, projection: str = "display",
           since: float | None = None, until: float | None = None, substring: bool = False,
           context: bool = True) -> list[dict[str, Any]]:
    """Messages matching ``text``, newest first, at most ``limit``.

    Hits are dicts: ``session_id``, ``message_id``, ``role``, ``state``, ``snippet``, ``ts``,
    ``title`` and, with ``context``, ``before``/``after``: the neighbouring messages in the
    projection's order (display dicts as ``projections.read`` returns them, or None at an end).
    ``since``/``until`` bound the message timestamp (epoch seconds). ``substring=True``
    searches substrings (trigram scope) instead of words. Raises ``ValueError`` for an unknown
    projection; any query string is accepted.
    """
    plan = query.plan(text, substring=substring)
    if plan.kind == "none" or limit <= 0:
        return []
    cond, args = _filters(projection, session_id, role, source, since, until)
    # Detached (damaged) indexes are not read: everything counts as the unindexed tail.
    usable = fts_state(conn) == "ok"
    upto = indexed_upto(conn) if usable else 0
    found: list[tuple] = [] if plan.kind == "scan" else _tail(conn, plan, upto, cond, args)
    below = 2 ** 62
    hits: list[tuple] = []
    seen: set[int] = set()
    batch = max(limit * 2, 20)
    while True:
        for row in found:
            mid = projections.representative(conn, row[0]) if projection == "display" else row[0]
            if mid in seen:
                continue
            seen.add(mid)
            if mid != row[0]:
                rep = conn.execute(f"SELECT {_COLS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                                   "WHERE m.id = ?", (mid,)).fetchone()
                row = rep or row
            hits.append(row)
            if len(hits) >= limit:
                break
        if len(hits) >= limit:
            break
        if not usable and plan.kind != "scan":
            break
        try:
            found = _indexed(conn, plan, upto, cond, args, below, batch)
        except (apsw.CorruptError, apsw.NotADBError):
            found = []  # damaged index met by a reader: the tail scan is all we can offer
        if not found:
            break
        below = found[-1][0]
    out = []
    for r in hits:
        hit = {"session_id": r[1], "message_id": r[0], "role": r[2], "state": r[7], "ts": r[5], "title": r[6],
               "snippet": snippet(r[3] or r[4] or "", plan.terms)}
        if context:
            hit["before"], hit["after"] = projections.neighbors(conn, r[1], projection, r[0])
        out.append(hit)
    return out
