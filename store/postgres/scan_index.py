"""The substring index over the rows the trigram index does not wholly cover (PostgreSQL only).

A substring search merges two sources newest first (``store.search.fence``): the trigram
index ``messages_trigram`` for the rows it wholly covers (user/assistant text within its
prefix, nothing else searched) and a scan of every other row: tool results, text longer than
the prefix, reasoning, tool calls. Scanned by ``ILIKE``, each such row costs ``lower()`` of
its whole text and the decoding of its tool calls, on every search. ``SCAN`` (``messages_scan``)
is a ``pg_trgm`` GIN index over those rows' every searched text (``quill_scan_text``: text,
tool text and reasoning, one per line), so the scan reads only the rows holding every
trigram of a term; the scan's own per-text tests still decide each row, so the rows found
are the ones the full scan finds (same hits as SQLite), and the scan's bound is unchanged.

Its scope (``SCOPE_SQL``) is every row not covered for all search kinds. A scan for fewer
kinds looks at a subset of those rows (a row covered for all kinds is covered for fewer), or,
for kinds without ``text``, at every row; a row covered for all kinds then has no tool text
and no reasoning, so no positive term can match it, and every group of a plan holds a
positive term (``plan``). So the scan may always add ``SCOPE_SQL``, which lets the planner
use the partial index.

PostgreSQL's bytes are not SQLite's: this index is PostgreSQL's alone (SQLite keeps its
bounded trigram table and scans). A store with rows gets it built concurrently by a writer
(``order_index.Builder``); until it is valid the scan runs without it (``usable``).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from quill.store import packed
from quill.store.postgres import order_index
from quill.store.postgres.connection import PgConnection
from quill.store.search import plan as query
from quill.store.search.candidates import KINDS, _escape_like, trigram_covered_sql
from quill.store.search.columns import PREFIX_WHOLE_SQL

#: The rows the index holds (row aliased ``m``): those the trigram index does not wholly
#: cover for every search kind.
#: In PostgreSQL's text (``packed.for_postgres``): the index's DDL is not translated.
SCOPE_SQL = "NOT " + packed.for_postgres(trigram_covered_sql(KINDS, "false", PREFIX_WHOLE_SQL))
#: The indexed text of a row aliased ``m`` (``ddl``'s ``quill_scan_text``).
TEXT_SQL = "quill_scan_text(m.content, m.tool_calls, m.reasoning, m.role, m.tool_name)"
NAME = "messages_scan"
SCAN = order_index.Index(
    NAME,
    "USING gin ({s}.quill_scan_text(content, tool_calls, reasoning, role, tool_name) "
    "{trgm}.gin_trgm_ops) WHERE " + SCOPE_SQL.replace("m.", ""),
    "substring searches scan the rows the trigram index does not cover (slower)",
)
#: How long a reader trusts that the index is missing or being built before asking again (s).
RECHECK_S = 30.0

_known: weakref.WeakKeyDictionary[PgConnection, tuple[bool, float]] = weakref.WeakKeyDictionary()
_known_lock = threading.Lock()


def usable(conn: PgConnection) -> bool:
    """Whether the store's ``messages_scan`` is valid (the planner may use it). Asked once per
    connection, and again every ``RECHECK_S`` while it is not (a writer may be building it).
    Raises the store error tree."""
    now = time.monotonic()
    with _known_lock:
        got = _known.get(conn)
    if got is not None and (got[0] or now - got[1] < RECHECK_S):
        return got[0]
    valid = order_index.state(conn, SCAN) == "valid"
    with _known_lock:
        _known[conn] = (valid, now)
    return valid


def prefilter(plan: query.Plan, args: list[Any]) -> str:
    """SQL (row ``m``): the row is in the index's scope and its indexed text holds every
    positive term of some group of ``plan`` as ``ILIKE`` finds it (appends the arguments).
    A superset of the rows the scan's own tests match (module doc)."""
    groups = []
    for group in plan.groups:
        conds = []
        for t in group:
            if not t.negated:
                conds.append(f"{TEXT_SQL} ILIKE ? ESCAPE '\\'")
                args.append("%" + _escape_like(t.text) + "%")
        groups.append("(" + " AND ".join(conds) + ")")
    return f"{SCOPE_SQL} AND ({' OR '.join(groups)})"
