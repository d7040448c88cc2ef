"""A PostgreSQL word search reads its page's hit rows (and their context) in the statement that
finds the candidates (``store.postgres.hits.Prefetch``): each hit row goes with the newest
candidate of its display id. Where several candidates share a display id (a compacted row and
its live copy share a position), where a per-session cap skips candidates, and where a later
statement reads the rest of the page, the hits, their order and every field shown equal
SQLite's, on every index route, in every projection, with and without context."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from semantics_helpers import Store, assistant, user

from quill.store.postgres import windows

ROUTES = {
    "as configured": {},
    "index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
}


def _fill(store: Store) -> None:
    """Session ``b`` is rewound and compacted (its summary and live copy share positions with
    compacted rows, all holding "word"); ``a`` and ``c`` interleave plain hits."""
    store.apply(
        "messages.append", {"session_id": "a", "messages": [user(f"a{i} word") for i in range(6)]}
    )
    b = [user("b0 word"), assistant("b1 word"), user("b2 word"), assistant("b3 word")]
    assert store.apply("messages.append", {"session_id": "b", "messages": b}) == []
    assert store.apply("messages.rewind", {"session_id": "b", "user_turn": 2}) == []
    b = [user("b4 word"), assistant("b5 word")]
    assert store.apply("messages.append", {"session_id": "b", "messages": b}) == []
    wm = store.conn.execute("SELECT max(id) FROM messages WHERE session_id = 'b'").fetchone()[0]
    compact = {
        "session_id": "b",
        "watermark": wm,
        "tail_count": 1,
        "messages": [user("[summary] word"), assistant("b5 word")],
    }
    assert store.apply("messages.compact", compact) == []
    for i in range(4):
        store.apply("messages.append", {"session_id": "c", "messages": [user(f"c{i} word")]})
        store.apply("messages.append", {"session_id": "b", "messages": [user(f"b{6 + i} word")]})
    store.index()


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


@pytest.fixture(scope="module")
def stores(tmp_path_factory, pg_store_url):
    url = pg_store_url
    root = tmp_path_factory.mktemp("prefetch")
    lite, pg = Store(root / "sqlite"), Store(root / "pg", url)
    for s in (lite, pg):
        _fill(s)
    pg.conn.execute("ANALYZE")
    yield lite, pg
    lite.close()
    pg.close()


def _shown(hits: list[dict]) -> list[dict]:
    """What each hit shows but arrival times (each store stamps its own)."""

    def bare(d):
        return d if not isinstance(d, dict) else {k: bare(v) for k, v in d.items() if k != "ts"}

    return [bare(h) for h in hits]


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("projection", ["display", "model", "audit"])
@pytest.mark.parametrize("context", [True, False])
@pytest.mark.parametrize("page", [dict(limit=3), dict(limit=7, per_session=2), dict(limit=50)])
def test_the_prefetched_hits_equal_sqlites(stores, route, projection, context, page, monkeypatch):
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(windows, name, value)
    lite, pg = stores
    kw = dict(text="word", projection=projection, context=context, **page)
    with lite.reader() as r:
        want = r.search(**kw)
    with pg.reader() as r:
        r.search(**kw)  # cold: the word's bound, PREPARE
        got = r.search(**kw)
    assert len(want) >= min(page["limit"], 3)
    assert _shown(got) == _shown(want)


def test_live_first_orders_the_display_states_as_the_rule_does():
    """``hits.LIVE_FIRST``: among the display states ``state DESC`` puts ``live`` first, as
    ``state = 'live' DESC`` (the rule of ``projections.REPRESENTATIVE_SQL``) does."""
    from quill.store.postgres import hits
    from quill.store.read import projections

    for projection in hits.LIVE_FIRST:
        states = projections.states(projection)
        assert sorted(states, reverse=True) == sorted(states, key=lambda s: s != "live")
        assert max(states) == "live"
    assert "r.state = 'live' DESC" in projections.REPRESENTATIVE_SQL
    assert hits.REPRESENTATIVE_SQL == projections.REPRESENTATIVE_SQL.replace(
        "r.state = 'live' DESC", "r.state DESC"
    )
