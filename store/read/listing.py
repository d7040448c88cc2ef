"""Session listings: filters, one row per compression chain, preview, unread, emptiness.

Rules:
* hidden sessions are excluded unless asked for; archived and pinned are filters;
* ``title_contains`` is a literal substring (``%`` and ``_`` mean themselves), ASCII
  case-insensitive;
* ``since`` and ``until`` are one rule, about activity: a session is listed when its *last
  activity* — its newest message's time, else its start (``coalesce(last_active,
  started_at)``, the value the listing orders by and pages on) — is at or after ``since``
  and at or before ``until`` (epoch seconds). A session with neither time matches no bound;
* by default a compression chain is one row, its tip, and delegate (subagent) sessions are
  left out (``lineage='tips'``); ``'all'`` lists every session;
* ``message_count`` counts display positions; ``preview`` is the first user message in display
  order that is not injected context (``extra.injected``, set by the importers for an
  AGENTS.md, an environment block, a slash command's wrapper … : matched in the compact
  JSON text, the same on both backends); ``unread`` counts display positions after the
  last-read watermark;
* ``usage`` = the session's token and cost totals (``usage_reads``); ``key`` its conversation
  key; ``placeholder`` = true while no ``session.create`` has arrived for it;
* ``empty`` is an EXISTS probe over rows in *any* state: a session whose rows are all rewound
  or compacted is not empty (its ``message_count`` may still be 0).
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store import packed, paging
from quill.store.errors import stored_json
from quill.store.read import usage as usage_reads
from quill.store.read.lineage import IS_TIP_SQL, root_of

SESSION_KEYS = (
    "id",
    "source",
    "title",
    "model",
    "cwd",
    "started_at",
    "ended_at",
    "end_reason",
    "parent_id",
    "parent_kind",
    "archived",
    "pinned",
    "hidden",
    "last_read_id",
    "message_count",
    "unread",
    "empty",
    "last_active",
    "preview",
    "meta",
    "key",
    "placeholder",
)
PREVIEW_CHARS = 120

#: A listing in two steps, so its cost does not depend on what the messages hold: ``page``
#: orders every matching session by its ordering key alone (``max(ts)`` comes from the
#: ``messages_session_ts`` index, never from the rows) and keeps ``LIMIT`` of them; only
#: those get the per-session aggregates, which read message rows.
_SELECT = f"""
WITH keyed AS (
  SELECT s.id AS id, s.started_at AS started_at,
         (SELECT max(m.ts) FROM messages m WHERE m.session_id = s.id) AS last_active
  FROM sessions s {{where}}
), page AS (
  SELECT id, last_active, coalesce(last_active, started_at, 0) AS active FROM keyed {{outer}}
  ORDER BY coalesce(last_active, started_at, 0) DESC, id DESC LIMIT ?
)
SELECT s.id, s.source, s.title, s.model, s.cwd, s.started_at, s.ended_at, s.end_reason,
       s.parent_id, s.parent_kind, s.archived, s.pinned, s.hidden, s.last_read_id,
       (SELECT count(DISTINCT m.pos) FROM messages m
          WHERE m.session_id = s.id
          AND m.state IN ('live', 'compacted')) AS message_count,
       (SELECT count(DISTINCT m.pos) FROM messages m
          WHERE m.session_id = s.id
          AND m.state IN ('live', 'compacted') AND m.seq > coalesce(
              (SELECT r.seq FROM messages r WHERE r.id = s.last_read_id), 0)) AS unread,
       NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) AS empty,
       page.last_active,
       (SELECT substr({packed.text_sql("m.content")}, 1, {PREVIEW_CHARS}) FROM messages m
          WHERE m.session_id = s.id
          AND m.role = 'user' AND m.state IN ('live', 'compacted')
          AND (m.extra IS NULL OR m.extra NOT LIKE '%"injected":true%')
          ORDER BY m.pos LIMIT 1) AS preview,
       s.meta, s.key, s.placeholder
FROM page JOIN sessions s ON s.id = page.id
ORDER BY page.active DESC, page.id DESC"""


def cursor_of(row: dict[str, Any], scope: str = "") -> str:
    """The keyset cursor just after listed ``row`` (``store.paging``, listing ``sessions``,
    ``scope``: the listing's ``scope_of``): pass it as ``after`` for the next page. Stable
    under concurrent writes (a page continues strictly after this row's ordering key, so no
    session is repeated; one whose activity moves it ahead of the cursor meanwhile is, by
    definition, on an earlier page)."""
    active = row["last_active"] if row["last_active"] is not None else row["started_at"]
    return paging.encode("sessions", (active if active is not None else 0, row["id"]), scope)


def scope_of(
    *,
    source: str | None = None,
    include_hidden: bool = False,
    archived: bool | None = None,
    pinned: bool | None = None,
    hidden: bool | None = None,
    title_contains: str | None = None,
    since: float | None = None,
    until: float | None = None,
    lineage: str = "tips",
    session_id: str | None = None,
    **_paging: Any,
) -> str:
    """The scope of a sessions listing's cursors (``store.paging``): its filters, as
    ``list_sessions`` reads them (``limit`` and ``after`` aside), so a cursor of one listing
    is refused by another."""
    if hidden is None and not include_hidden:
        hidden = False
    return paging.scope_of(
        source, archived, pinned, hidden, title_contains, since, until, lineage, session_id
    )


def sessions_page(conn: apsw.Connection, *, limit: int = 50, **filters: Any) -> dict[str, Any]:
    """One page of ``list_sessions`` (same filters, ``after`` among them): ``{"sessions":
    rows, "next": the cursor of the next page, None on the last}``. Raises
    ``BadCursorError`` for an ``after`` that is not a cursor of this listing."""
    rows = list_sessions(conn, limit=limit + 1, **filters)
    more = len(rows) > limit
    del rows[limit:]
    return {"sessions": rows, "next": cursor_of(rows[-1], scope_of(**filters)) if more else None}


def _like_literal(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def list_sessions(
    conn: apsw.Connection,
    *,
    source: str | None = None,
    limit: int = 50,
    include_hidden: bool = False,
    archived: bool | None = None,
    pinned: bool | None = None,
    hidden: bool | None = None,
    title_contains: str | None = None,
    since: float | None = None,
    until: float | None = None,
    lineage: str = "tips",
    session_id: str | None = None,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """Sessions, most recently active first, as dicts with ``SESSION_KEYS`` plus
    ``chain_root_id`` and ``chain_length`` (1 for a session outside any chain).
    ``after``: a ``cursor_of`` a row of the previous page of the same listing (keyset
    pagination; ``BadCursorError`` for anything else). ``since`` /
    ``until``: epoch seconds bounding the session's last activity, both inclusive (module doc).

    ``archived``/``pinned``/``hidden``: None = either, True/False = only those. ``hidden=True``
    implies including hidden sessions. Raises ``ValueError`` for an unknown ``lineage``.
    """
    if lineage not in ("tips", "all"):
        raise ValueError("lineage must be 'tips' or 'all'")
    where, args = ["1=1"], []
    if session_id is not None:
        where.append("s.id = ?")
        args.append(session_id)
    if source:
        where.append("s.source = ?")
        args.append(source)
    if hidden is None and not include_hidden:
        hidden = False
    for flag, value in (("archived", archived), ("pinned", pinned), ("hidden", hidden)):
        if value is not None:
            where.append(f"s.{flag} = ?")  # flag comes from the fixed tuple above
            args.append(int(value))
    if title_contains:
        where.append("s.title LIKE ? ESCAPE '\\'")
        args.append(_like_literal(title_contains))
    if lineage == "tips" and session_id is None:
        # a subagent run is reached from its parent, as the reference's pickers do: one
        # agent's fan-out would otherwise fill the default list
        where.append(IS_TIP_SQL)
        where.append("(s.parent_kind IS NULL OR s.parent_kind != 'delegate')")
    outer, outer_args = ["1=1"], []
    # since and until bound the same value, the session's last activity (module doc)
    if since is not None:
        outer.append("coalesce(last_active, started_at) >= ?")
        outer_args.append(since)
    if until is not None:
        outer.append("coalesce(last_active, started_at) <= ?")
        outer_args.append(until)
    if after is not None:
        scope = scope_of(
            source=source,
            include_hidden=include_hidden,
            archived=archived,
            pinned=pinned,
            hidden=hidden,
            title_contains=title_contains,
            since=since,
            until=until,
            lineage=lineage,
            session_id=session_id,
        )
        active, last_id = paging.decode(after, "sessions", (float, str), scope)
        outer.append(
            "(coalesce(last_active, started_at, 0) < ? "
            "OR (coalesce(last_active, started_at, 0) = ? AND id < ?))"
        )
        outer_args += [active, active, last_id]
    sql = _SELECT.format(where="WHERE " + " AND ".join(where), outer="WHERE " + " AND ".join(outer))
    out = []
    for row in conn.execute(sql, (*args, *outer_args, limit)).fetchall():
        item = dict(zip(SESSION_KEYS, row))
        meta = item["meta"]
        item["meta"] = stored_json(meta, f"meta of session {item['id']}") if meta else {}
        for flag in ("archived", "pinned", "hidden", "empty", "placeholder"):
            item[flag] = bool(item[flag])
        chain = root_of(conn, item["id"])
        item["chain_root_id"], item["chain_length"] = (
            (chain[0] if chain else item["id"]),
            max(1, len(chain)),
        )
        out.append(item)
    _attach_usage(conn, out)
    return out


def _attach_usage(conn: apsw.Connection, items: list[dict[str, Any]]) -> None:
    """Give each listed session its usage totals (``usage_reads.TOTAL_KEYS``) under ``usage``."""
    for start in range(0, len(items), 500):
        part = items[start : start + 500]
        for item in part:
            item["usage"] = usage_reads.empty_totals()
        by_id = {item["id"]: item for item in part}
        for row in usage_reads.totals(conn, ("session",), session_ids=list(by_id)):
            sid = row.pop("session")
            by_id[sid]["usage"] = row
