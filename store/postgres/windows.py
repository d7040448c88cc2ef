"""Index matches newest first on PostgreSQL with a cost that does not hang on the planner's
row estimate of the whole match condition.

A GIN index (word or trigram) returns its matches unordered; newest-first needs either the
primary key walked backwards with the match tested on each row (good when matches are
dense), or every match fetched and, for a phrase, weights or any trigram query, re-checked on
its heap row before the newest are kept (good when matches are few). The planner picks
between them from its estimate of the condition, and that estimate is wrong by orders of
magnitude exactly where it matters: words that occur together (a phrase, ``a & b``) are
estimated as if independent (25 rows for ``'connection' <-> 'refused'`` at 1M where 10,310
match) and a trigram ``ILIKE`` by pattern length (13 rows where 520 match). Every match
fetched and re-checked was then a heap row each (0.27 s for the phrase at 1M).

Here the rows are read in id windows, newest first (``newest``): each query asks for the
matches with ``lo <= id < below``, by a generic plan (made once per session, without the
values): the planner then takes its default selectivity for the match condition and for a
key range of unknown bounds, which makes ANDing the GIN bitmap with the primary key's range
bitmap the cheap plan: only the index matches inside the window reach the heap. A window
holds about ``WINDOW_MATCHES`` pages of matches when the density bound (``bound``) holds and
grows ``GROWTH``-fold while it comes back short, so any query costs at most a few index
scans plus the heap rows of matches it returns (and, in the last, widest window, the rest of
the matches). The density bound is the planner's estimate of each word alone (statistics it
has per lexeme), the rarest word of each AND group bounding the group: an upper bound that
holds for correlated words. Words that fill the page within a few rows
(``WALK_MIN_DENSITY``) keep the backwards primary-key walk, inside a window too; words the
bound puts at a few thousand rows or fewer, and words the statistics do not list (counted:
``_bounds``), are fetched index-first (their heap rows are the matches).

Round trips: the per-word estimates are kept per connection for ``ESTIMATE_TTL_S`` (they are
the planner's statistics, which change only when ``ANALYZE`` runs, and they size windows,
never decide a hit), so a repeated word costs no EXPLAIN; the newest id is read by the first
window's own statement; and the caller runs the first statement itself (``fetch``), to
read the page's hits and context with it (``store.postgres.hits``): a page its first
statement fills costs one round trip, whatever the route.
"""

from __future__ import annotations

import json
import math
import re
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from quill.store.postgres.connection import PgConnection
from quill.store.search import plan as query

#: An fts condition whose density bound is at most this many rows is read index-first
#: (GIN bitmap, then the newest of the matches): every heap row read is a match's.
INDEX_FIRST_MAX_ROWS = 500
#: A window is sized to hold this many batches of matches at the bounded density.
WINDOW_MATCHES = 2
#: A window that came back short is followed by one this many times wider.
GROWTH = 8
#: At this density or more the primary key is walked backwards (a page in a few dozen rows):
#: the GIN bitmap of so common a word costs more than the rows walked.
WALK_MIN_DENSITY = 0.05
#: The density a trigram window is first sized for (PostgreSQL keeps no per-trigram
#: statistics a bound could come from).
TRIGRAM_DENSITY = 0.01
#: A lexeme the planner estimates at this many rows or fewer is counted (``_bounds``).
COUNT_ROWS = INDEX_FIRST_MAX_ROWS + 1
#: The planner's selectivity of a lexeme its statistics do not list, at most
#: (``DEFAULT_TS_MATCH_SEL`` in PostgreSQL's ``tsquery`` selectivity code: it takes the
#: smaller of this and half the least frequency listed).
UNLISTED_FRACTION = 0.005
#: The least frequency among the ``words`` column's most common elements (the statistics'
#: ``most_common_elem_freqs`` lists them, then their minimum): NULL with no statistics.
_LEAST_KEPT_SQL = (
    "SELECT s.most_common_elem_freqs[array_length(s.most_common_elems, 1) + 1] "
    "FROM pg_stats s JOIN pg_class c ON c.oid = 'messages'::regclass "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'words'"
)
#: Seconds a word's row estimate (and the table's) is reused on one connection before it is
#: asked again: the staleness a window's size may have (never a hit's).
ESTIMATE_TTL_S = 60.0
_WORD = re.compile(r"[^\W_]+")
TOP_SQL = "SELECT coalesce(max(id), 0) FROM messages"
#: The upper bound of a first window over the bitmaps, which is open above (ids are
#: ``bigint``; no id reaches it).
OPEN_ABOVE = 2**62
_TABLE = ""  # the cache's key of the whole table's row estimate
_TOP = "top"  # the cache's key of the newest id last seen (no lexeme: those are quoted)
#: Per connection: ``{lexeme, _TABLE or _TOP: (rows estimated or id, monotonic time)}``.
_ESTIMATES: weakref.WeakKeyDictionary[PgConnection, dict[str, tuple[float, float]]] = (
    weakref.WeakKeyDictionary()
)
#: The first statement of a read: ``fetch(sql, args, generic) -> rows`` (see ``newest``;
#: ``generic`` as ``PgConnection.execute``'s).
Fetch = Callable[[str, Sequence[Any], bool], list[tuple]]


#: Per connection: ``unaccent``'s SQL (read once: an extension's schema moves only by
#: ``ALTER EXTENSION … SET SCHEMA``, which breaks ``quill_unaccent``'s own body too).
_UNACCENT: weakref.WeakKeyDictionary[PgConnection, str] = weakref.WeakKeyDictionary()
_UNACCENT_SCHEMA_SQL = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'unaccent'"
)


def unaccent(conn: PgConnection) -> str:
    """SQL of a text parameter folded as ``quill_unaccent(?)`` folds it (the store's words
    document folds its texts so), by a direct call of the ``unaccent`` extension's function
    with that function's own dictionary, both named by schema as ``quill_unaccent``'s body
    names them. ``quill_unaccent`` is an SQL function with a ``SET search_path`` clause, which
    PostgreSQL never inlines: every statement calling it parses and plans its body again and
    saves and restores the setting around it, a fifth of a rare word's server time at 100k
    (bench/RESULTS.md). The extension's schema is read on this connection's first call (one
    statement); a database without the extension keeps ``quill_unaccent(?)``. Raises the
    store error tree."""
    sql = _UNACCENT.get(conn)
    if sql is None:
        row = conn.execute(_UNACCENT_SCHEMA_SQL).fetchone()
        # A name holding a placeholder or quote character keeps the function: the statement
        # text is translated (``?``, ``%``) and the dictionary's name is a string literal.
        if row is None or any(c in row[0] for c in "?%'\""):
            sql = "quill_unaccent(?)"
        else:
            sql = f'"{row[0]}".unaccent(\'"{row[0]}".unaccent\'::regdictionary, ?)'
        _UNACCENT[conn] = sql
    return sql


def _rows(plan_json: Any) -> list[float]:
    """Plan Rows of each branch of an EXPLAIN (FORMAT JSON) of a UNION ALL."""
    if isinstance(plan_json, str):
        plan_json = json.loads(plan_json)
    top = plan_json[0]["Plan"]
    branches = top.get("Plans", [top]) if top["Node Type"] == "Append" else [top]
    return [float(b["Plan Rows"]) for b in branches]


def _estimates(conn: PgConnection, lexemes: list[str]) -> tuple[list[float], float]:
    """An upper bound on the rows each of ``lexemes`` matches alone, and the whole table's
    row estimate, from this connection's cache when younger than ``ESTIMATE_TTL_S``, else
    read (``_bounds``). Raises the store error tree."""
    cache = _ESTIMATES.setdefault(conn, {})
    now = time.monotonic()
    wanted = list(dict.fromkeys([*lexemes, _TABLE]))
    stale = [k for k in wanted if k not in cache or now - cache[k][1] > ESTIMATE_TTL_S]
    if stale:
        words = [k for k in stale if k != _TABLE]
        for k, rows in zip([*words, _TABLE], _bounds(conn, words)):
            cache[k] = (rows, now)
    return [cache[k][0] for k in lexemes], max(cache[_TABLE][0], 1.0)


def _bounds(conn: PgConnection, words: list[str]) -> list[float]:
    """An upper bound on the rows each of ``words`` matches, then the table's row estimate.

    The planner's estimate of a lexeme is its frequency in the column's statistics when the
    lexeme is among the most common elements ANALYZE kept; any other lexeme is estimated
    at ``min(0.5 %, half the least frequency kept)`` of the rows — not a bound: such a
    lexeme can match up to about that least frequency (ten times the estimate at 1M rows
    for a word in 1 % of them), and any lexeme can, with no statistics yet (a new store
    before its first ANALYZE). So a lexeme estimated at ``COUNT_ROWS`` or fewer is counted,
    up to ``COUNT_ROWS`` matches (one GIN bitmap each, one statement for all): below that
    the count is exact; at it, the bound is the larger of the count and the least frequency
    kept. A lexeme at the planner's default for unlisted lexemes (``UNLISTED_FRACTION`` of
    the table) or below is counted the same way, whatever the table's size. One EXPLAIN
    (planning only), then at most one counting statement. Raises the store error tree."""
    fold = unaccent(conn)
    one = f"SELECT 1 FROM messages m WHERE m.words @@ to_tsquery('simple', {fold})"
    sql = " UNION ALL ".join([one] * len(words) + ["SELECT 1 FROM messages m"])
    est = _rows(conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", words).fetchone()[0])
    # A lexeme the statistics do not list is estimated at most at ``UNLISTED_FRACTION`` of
    # the table: at 1M rows that is 5,000 for a word in 50 rows (the bench's rare word),
    # which would send it through id windows (two statements or three) where index-first
    # reads its few matches in one. So every lexeme estimated at or below that default is
    # counted too (capped at ``COUNT_ROWS``: about a page of heap rows, once per
    # ``ESTIMATE_TTL_S``).
    unlisted = UNLISTED_FRACTION * est[-1] * (1 + 1e-9) + 1
    low = [w for w, e in zip(words, est) if e <= max(COUNT_ROWS, unlisted)]
    if not low:
        return est
    count = (
        "(SELECT count(*) FROM (SELECT FROM messages m WHERE m.words @@ "
        f"to_tsquery('simple', {fold}) LIMIT ?) AS x)"
    )
    row = conn.execute(
        f"SELECT {', '.join([count] * len(low))}, ({_LEAST_KEPT_SQL})",
        [a for w in low for a in (w, COUNT_ROWS)],
    ).fetchone()
    counted, least = dict(zip(low, row[:-1])), (row[-1] or 0.0) * est[-1]
    return [
        (c if c < COUNT_ROWS else max(e, c, least)) if (c := counted.get(w)) is not None else e
        for w, e in zip(words, est[:-1])
    ] + [est[-1]]


def _top(conn: PgConnection) -> int:
    """The newest id this connection saw within ``ESTIMATE_TTL_S`` (``newest`` keeps it), or
    read now. Raises the store error tree."""
    seen = _ESTIMATES.setdefault(conn, {}).get(_TOP)
    if seen is None or time.monotonic() - seen[1] > ESTIMATE_TTL_S:
        seen = (conn.execute(TOP_SQL).fetchone()[0], time.monotonic())
        _ESTIMATES[conn][_TOP] = seen
    return int(seen[0])


def bound(conn: PgConnection, plan: query.Plan, weights: str) -> tuple[float, float]:
    """``(rows, table_rows)``: an upper bound on the rows an ``fts`` plan matches and the
    table's row estimate (the planner's, through ``_estimates``). Each word of a term is
    estimated alone (``'word':W``, ``'prefix':*W`` for a trailing prefix; ``weights`` as in
    ``search.tsquery``); a term matches no more rows than its rarest word, an AND group no
    more than its rarest positive term, the query no more than the sum of its groups.
    Raises the store error tree."""
    lexemes: list[str] = []
    groups: list[list[list[int]]] = []
    for group in plan.groups:
        terms = []
        for term in group:
            words = [w.lower() for w in _WORD.findall(term.text)]
            if term.negated or not words:
                continue
            idx = []
            for i, w in enumerate(words):
                star = ":*" if term.prefix and i == len(words) - 1 else (":" if weights else "")
                lexemes.append(f"'{w}'{star}{weights}")
                idx.append(len(lexemes) - 1)
            terms.append(idx)
        if terms:
            groups.append(terms)
    est, table = _estimates(conn, lexemes)
    upper = sum(min(min(est[i] for i in term) for term in terms) for terms in groups)
    return min(upper, table), table


def _hidden(match: str) -> str:
    """``match`` with each ``?`` behind a sub-select: same rows, but the planner cannot read
    the constants and so uses its default selectivity (see module doc)."""
    return match.replace("?", "(SELECT ?)")


def newest(
    conn: PgConnection,
    match: str,
    match_args: list[Any],
    cond: str,
    args: list[Any],
    rep: str,
    first: int,
    *,
    density: float | None,
    table_rows: float,
    top: int | None = None,
    fetch: Fetch | None = None,
) -> Iterator[tuple]:
    """``(id, display id, session id)`` of the rows matching ``match`` and ``cond``, newest
    first, read a batch at a time as consumed (batches of ``first``, doubling up to 1000).
    ``density``: an upper bound on the fraction of rows matching (None: unknown, windows
    start at ``TRIGRAM_DENSITY``); ``table_rows``: the table's row estimate. ``rep`` is the
    SQL of the display id; ``top``: the newest id when already read. ``fetch`` runs the
    first statement of a word query (a generic plan; a trigram query's, and by default,
    ``conn`` runs): its SELECT names the columns ``id``, ``d`` (display id),
    ``sid`` and maybe more (``top``, the newest id) after them; ``fetch`` returns rows
    holding at least those columns, in the statement's order. Raises the store error tree."""

    def plain(sql: str, a: Sequence[Any], generic: bool) -> list[tuple]:
        return conn.execute(sql, a, generic=generic).fetchall()

    run = fetch or plain
    join = "JOIN sessions s ON s.id = m.session_id " if "s." in cond else ""
    cols = f"SELECT m.id AS id, {rep} AS d, m.session_id AS sid"
    select = f"{cols} FROM messages m {join}WHERE "
    if density is not None and density * table_rows <= INDEX_FIRST_MAX_ROWS:
        yield from _index_first(conn, select, match, match_args, cond, args, None, first, run)
        return
    walk = density is not None and density >= WALK_MIN_DENSITY
    d = density if density else TRIGRAM_DENSITY
    # A word query's windows run with their generic plan (``PgConnection.execute``'s
    # ``generic``: planned once per session, and the first window with the page's hits
    # joined on in one statement, ``fetch``). A walk tests the match on each row (``IS
    # TRUE`` is no index condition: the key is walked backwards, as a common word wants), a
    # plan its text fixes. Otherwise the ids come in arbitrary order (+ 0) and the window
    # is bounded on both sides, the first one too (``OPEN_ABOVE``): a generic plan then
    # estimates the key range at PostgreSQL's default for a range of unknown bounds (0.5 %
    # of the rows) and the match at its default selectivity, and ANDs the two bitmaps, so
    # only the index matches inside the window reach the heap (bounded on one side only,
    # the range was estimated at a third of the table, and a generic plan read every index
    # match instead: a phrase's 1,000 heap rows where a page needs about 40). A trigram
    # query's windows (no density bound) are planned with their bounds, the constants
    # hidden (``_hidden``), and their first statement is never ``fetch``'s.
    generic = walk or density is not None
    order = f" ORDER BY {'m.id' if walk else 'm.id + 0'} DESC LIMIT ?"
    where = f"{f'({match}) IS TRUE' if walk else _hidden(match)} AND {cond}"
    sql = f"{select}{where} AND m.id >= ? AND m.id < ?{order}"
    above, above_args = (" AND m.id < ?", (OPEN_ABOVE,)) if generic and not walk else ("", ())
    if not generic:
        run = plain
    width = max(math.ceil(WINDOW_MATCHES * first / max(d, 1e-9)), 4 * first)
    # The first window is open above: it starts ``width`` below the newest id this
    # connection last saw (``_top``), so rows added since are in it too (the window is
    # only wider); its statement returns the newest id now (an InitPlan, run once).
    hint = _top(conn) if top is None else top
    lo = max(hint + 1 - width, 0)
    rows = run(
        f"{cols}, ({TOP_SQL}) AS top FROM messages m {join}WHERE {where} AND m.id >= ?"
        f"{above}{order}",
        (*match_args, *args, lo, *above_args, first),
        generic,
    )
    top = rows[0][3] if rows else hint
    _ESTIMATES.setdefault(conn, {})[_TOP] = (top, time.monotonic())
    rows = [r[:3] for r in rows]
    below, batch = top + 1, first
    scanned = found = 0  # ids the finished windows covered, and the matches they held
    while True:
        yield from rows
        found += len(rows)
        if len(rows) == batch:  # the window may hold more: go on below the last row
            scanned += below - rows[-1][0]
            below, batch = rows[-1][0], min(batch * 2, 1000)
        else:
            scanned += below - lo
            below, width = lo, width * GROWTH
            # Sparser than the bound said: when the density seen so far puts the rows left
            # below at few matches, read them index-first (each heap row a match) rather
            # than through ever wider windows (a wide key range costs its own bitmap).
            if below > 0 and (found + 1) / scanned * below <= INDEX_FIRST_MAX_ROWS:
                yield from _index_first(conn, select, match, match_args, cond, args, below, batch)
                return
        if below <= 0:
            return
        lo = max(below - width, 0)
        rows = conn.execute(sql, (*match_args, *args, lo, below, batch), generic=generic).fetchall()


def _index_first(
    conn: PgConnection,
    select: str,
    match: str,
    match_args: list[Any],
    cond: str,
    args: list[Any],
    below: int | None,
    batch: int,
    run: Fetch | None = None,
) -> Iterator[tuple]:
    """The matches below ``below`` (None: all), newest first in batches from ``batch``: the
    GIN bitmap, then the newest of the matches (``ORDER BY m.id + 0``: an order the key
    cannot give). ``run``: how the first statement is run (``newest``'s ``fetch``).

    The first statement, with no bound on the id, runs with its generic plan (the GIN
    bitmap is its only index path); a later one, ``m.id < below``, is planned with its
    values: a generic plan would take ``below`` for a third of the table and AND the
    primary key's bitmap of it, which is the whole table when ``below`` is near the top."""
    order = " ORDER BY m.id + 0 DESC LIMIT ?"
    while True:
        if below is None:
            sql, a, generic = f"{select}{match} AND {cond}{order}", (*match_args, *args), True
        else:
            sql, a, generic = (
                f"{select}{match} AND {cond} AND m.id < ?{order}",
                (*match_args, *args, below),
                False,
            )
        a = (*a, batch)
        rows = run(sql, a, generic) if run else conn.execute(sql, a, generic=generic).fetchall()
        run = None
        yield from rows
        if len(rows) < batch:
            return
        below, batch = rows[-1][0], min(batch * 2, 1000)
