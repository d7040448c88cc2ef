"""What a PostgreSQL search asks the server to compute per row, counted by the server
(``track_functions``), never timed.

A search builds a hit's tool text (``quill_tool_text``: plpgsql, each call's JSON
decoded in a subtransaction) only for a hit whose snippet needs it, as SQLite builds its
``tools`` text only then (``store.search.page._snippet``): a hit matched in its own text never
runs it, whatever tool calls the row holds, and the hits matched in their tool calls run it
once each, in one more statement. The server's own count of the function's calls
(``track_functions``) is the figure, never a time; SQLite's hits are the reference.

A word search's tsquery (``to_tsquery('simple', unaccent(…))``) is built once per
statement, not once per row the statement tests (the backwards key walk tests each row it
walks; a phrase or weighted query re-checks each row of the bitmap), by the extension's
function itself, not through the SQL function ``quill_unaccent``."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.store.postgres import windows, wire


@pytest.fixture(scope="module")
def pg_store_url(request):
    from run_resources import require

    pg_url = require(request, "postgres")["url"]
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in pg_url else "?"
    yield f"{pg_url}{sep}options=-csearch_path%3D{name},public"
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _messages() -> list[dict]:
    """Every assistant row calls a tool: 'marmot' is in the text of 10 of them, 'walrus' only
    in the arguments of 6 calls (and in one tool result's text), 'ocelot' is a tool's name."""
    out = []
    for i in range(30):
        text = f"checking marmot burrow {i}" if i % 3 == 0 else f"plain step {i}"
        args = f'{{"cmd": "grep walrus log{i}.txt"}}' if i % 5 == 0 else f'{{"cmd": "ls {i}"}}'
        out.append(assistant(text, tool_calls=[call(f"c{i}", "bash", args)]))
        out.append(tool(f"c{i}", f"output {i}", name="ocelot" if i == 7 else "bash"))
    out.append(user("the walrus said hello"))
    return out


#: Texts with diacritics, in a session of their own: a query is folded as the texts are.
_ACCENTED = [
    user("the café opens at noon"),
    assistant("crème brûlée for dessert at the cafe"),
    user("Café Crème is closed, creme brulee sold out"),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, pg_store_url):
    root = tmp_path_factory.mktemp("tooltext")
    lite, pg = Store(root / "sqlite"), Store(root / "pg", pg_store_url)
    for s in (lite, pg):
        assert s.apply("messages.append", {"session_id": "s1", "messages": _messages()}) == []
        assert s.apply("messages.append", {"session_id": "s2", "messages": _ACCENTED}) == []
        s.index()
    pg.conn.execute("ANALYZE")
    yield lite, pg
    lite.close()
    pg.close()


def _shown(hits: list[dict]) -> list[dict]:
    """The hits and their neighbours without arrival times (each store stamps its own)."""

    def bare(d):
        return d if not isinstance(d, dict) else {k: bare(v) for k, v in d.items() if k != "ts"}

    return [bare(h) for h in hits]


def _calls(
    reader, function: str = "quill_tool_text(text, text, text)", **kw
) -> tuple[list[dict], int, wire.Wire]:
    """The hits of a warm search, the calls of ``function`` it made (the server's count for
    its transaction) and its wire counts."""
    reader.search(limit=20, **kw)  # warm: the words' bounds, PREPARE
    conn = reader.conn
    conn.raw.execute("SET track_functions = 'all'")
    conn.execute("BEGIN")
    with wire.traced(conn) as w:
        hits = reader.search(limit=20, **kw)
    n = conn.execute(
        "SELECT pg_stat_get_xact_function_calls(?::regprocedure)", (function,)
    ).fetchone()[0]
    conn.execute("COMMIT")
    return hits, n or 0, w


@pytest.mark.parametrize("context", [True, False])
def test_a_hit_matched_in_its_text_never_builds_its_tool_text(stores, context):
    lite, pg = stores
    with lite.reader() as r:
        want = r.search("marmot", limit=20, context=context)
    with pg.reader() as r:
        hits, calls, w = _calls(r, text="marmot", context=context)
    assert [h["matched_in"] for h in hits] == ["text"] * 10
    assert _shown(hits) == _shown(want)
    assert calls == 0
    assert w.statements == 1, w.sql  # the page, its hits (and context) in one statement


def test_hits_matched_in_tool_calls_build_each_tool_text_once_in_one_statement(stores):
    lite, pg = stores
    with lite.reader() as r:
        want = r.search("walrus", limit=20)
    with pg.reader() as r:
        hits, calls, w = _calls(r, text="walrus")
    assert sorted(h["matched_in"] for h in hits) == ["text"] + ["tool"] * 6
    assert _shown(hits) == _shown(want)
    assert calls == 6
    assert w.statements == 2, w.sql


def test_a_tool_results_tool_name_is_its_tool_text_without_the_function(stores):
    """A tool result has no calls: its tool text (its tool's name) comes with the hit row."""
    lite, pg = stores
    with lite.reader() as r:
        want = r.search("ocelot", limit=20, kinds=["tool"])
    with pg.reader() as r:
        hits, calls, w = _calls(r, text="ocelot", kinds=["tool"])
    assert [(h["role"], h["matched_in"], h["snippet"]) for h in hits] == [
        ("tool", "tool", "ocelot")
    ]
    assert _shown(hits) == _shown(want)
    assert calls == 0


ROUTES = {
    "as configured": {},
    "index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize(
    "kw", [dict(text="marmot"), dict(text='"marmot burrow"'), dict(text="plain", kinds=["text"])]
)
def test_the_tsquery_is_built_once_per_statement_not_per_row(stores, route, kw, monkeypatch):
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(windows, name, value)
    lite, pg = stores
    with lite.reader() as r:
        want = r.search(limit=20, **kw)
    with pg.reader() as r:
        ext = r.conn.execute(windows._UNACCENT_SCHEMA_SQL).fetchone()[0]
        hits, calls, w = _calls(r, f'"{ext}".unaccent(regdictionary, text)', **kw)
    assert _shown(hits) == _shown(want) and len(hits) >= 10
    assert 1 <= calls <= w.statements, (calls, w.sql)


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("kw", [dict(text="marmot"), dict(text='"marmot burrow"')])
def test_a_word_search_folds_its_query_without_the_sql_function(stores, route, kw, monkeypatch):
    """``quill_unaccent`` (an SQL function with a ``SET search_path`` clause: never inlined,
    its body parsed and planned again by every statement calling it) is not called by a
    search; the extension's function is, with the same dictionary (``windows.unaccent``), and
    the hits are SQLite's."""
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(windows, name, value)
    lite, pg = stores
    with lite.reader() as r:
        want = r.search(limit=20, **kw)
    with pg.reader() as r:
        hits, calls, w = _calls(r, "quill_unaccent(text)", **kw)
    assert _shown(hits) == _shown(want) and len(hits) >= 10
    assert calls == 0, w.sql


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize(
    "kw",
    [dict(text="café"), dict(text="CAFÉ crème"), dict(text='"crème brûlée"'), dict(text="brul*")],
)
def test_a_query_with_diacritics_finds_sqlites_hits_on_every_route(stores, route, kw, monkeypatch):
    """The query is folded by the extension's function (``windows.unaccent``) exactly as the
    texts were (``quill_unaccent``): the same hits as SQLite's ``remove_diacritics``."""
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(windows, name, value)
    lite, pg = stores
    with lite.reader() as r:
        want = r.search(limit=20, **kw)
    with pg.reader() as r:
        r.search(limit=20, **kw)  # cold: the words' bounds, PREPARE
        hits = r.search(limit=20, **kw)
    assert want and _shown(hits) == _shown(want)
