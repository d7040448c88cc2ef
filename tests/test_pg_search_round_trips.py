"""A PostgreSQL word search costs one round trip: its read snapshot's ``BEGIN`` goes in one
query with the statement that finds the page's candidates and reads their hits and context,
then the ``COMMIT`` is sent without waiting for its answer (a read-only session's,
``PgConnection(read_only=True)``), whichever route finds the page (index-first, the key
walk, id windows over the bitmaps).
Round trips and statements are counted from libpq's own protocol trace
(``store.postgres.wire``), never timed. Before, a search with context was six round trips
and seven statements (BEGIN; EXPLAIN of the words with max(id); candidates; hits; neighbours;
COMMIT), each statement planned by the server and each round trip a wait for a core."""

from __future__ import annotations

import re

import psycopg
import pytest
from semantics_helpers import Store

from quill.store.postgres import windows, wire


@pytest.fixture(scope="module")
def pg_store_url(request):
    """One schema for the module's store (dropped afterwards)."""
    import uuid

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
def store(tmp_path_factory, pg_store_url):
    """Six sessions of 50 messages; the snapshot test adds one row at the end."""
    s = Store(tmp_path_factory.mktemp("trips"), pg_store_url)
    msgs = []
    for i in range(300):
        text = f"routine status line {i} all good"
        if i % 3 == 0:
            text = f"deploy step {i} failed: connection refused by host"
        if i == 150:
            text = "a quasar appeared in the logs"
        msgs.append({"role": "user" if i % 2 else "assistant", "content": text})
    for at in range(0, 300, 50):  # six sessions of 50
        sid = f"s{at // 50}"
        assert s.apply("messages.append", {"session_id": sid, "messages": msgs[at : at + 50]}) == []
    s.conn.execute("ANALYZE")
    yield s
    s.close()


ROUTES = {
    "as configured": {},
    "index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
}
QUERIES = {
    "rare word": dict(text="quasar"),
    "common word": dict(text="status"),
    "common word, no context": dict(text="status", context=False),
    "phrase": dict(text='"connection refused"'),
    "display projection, capped per session": dict(text="deploy", per_session=100),
}


def _prepared(conn) -> dict[str, tuple[int, int]]:
    """This session's named prepared statements: ``{text: (generic plans, custom plans)}``
    (the server's own counts of the plans each execution used)."""
    rows = conn.execute(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("query", list(QUERIES))
def test_a_warm_word_search_is_one_round_trip_whatever_its_route(store, route, query, monkeypatch):
    """The statement finding the page and reading its hits is a named prepared statement run
    with its generic plan, on every route (index-first, the key walk, and windows over the
    bitmaps, bounded on both sides so that their generic plan ANDs the bitmaps): a warm
    search sends its arguments (``EXECUTE``), and the server plans nothing worth the name
    (before, the whole statement was planned on every search, about 1 ms of the ~1.6 ms
    the server spent on a rare word). Before, a window over the bitmaps was planned with
    its bounds and the page's hits read after it: two round trips (the phrase at 1M)."""
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(windows, name, value)
    kw = QUERIES[query]
    with store.reader() as r:
        first = r.search(limit=20, **kw)  # cold: the words' bounds and PREPARE, once
        before = _prepared(r.conn)
        with wire.traced(r.conn) as w:
            hits = r.search(limit=20, **kw)
        after = _prepared(r.conn)
    assert hits == first and hits
    if "context" not in kw:
        assert all("before" in h and "after" in h for h in hits)
    assert w.round_trips == 1, w.sql
    assert len(w.sql) == 2 and w.sql[1] == '"COMMIT"', w.sql
    one = w.sql[0]
    # The snapshot's BEGIN with the prepared statement's EXECUTE, between a SET of the plan
    # cache mode and its RESET, then COMMIT (not waited for): nothing prepared anew.
    assert re.fullmatch(
        r'"BEGIN ISOLATION LEVEL REPEATABLE READ; SET plan_cache_mode = '
        r"force_generic_plan; EXECUTE quill_g\d+\(.*\); RESET plan_cache_mode\"",
        one,
        re.S,
    ), one
    ran = [t for t in after if after[t] != before.get(t, (0, 0))]
    assert len(ran) == 1, (before, after)
    text = ran[0]
    assert "words @@" in text and "s.title" in text and "quill_tool_text" not in text
    assert ("LATERAL" in text) == (kw.get("context", True)), text
    # One more execution, with the generic plan; never a custom plan.
    assert after[text][0] == before.get(text, (0, 0))[0] + 1 and after[text][1] == 0


def test_a_page_the_first_statement_does_not_fill_reads_the_rest_once(store):
    """A per-session cap keeps 2 of each session's hits: the page's ids are not the first
    ``limit`` candidates the first statement read hits for, so the missing ones are read in
    one more statement (not one per hit), and the hits are still right."""
    with store.reader() as r:
        r.search(limit=10, text="deploy")
        with wire.traced(r.conn) as w:
            page = r.search_page("deploy", limit=10, per_session=2)
    hits = page["hits"]
    assert [h["session_id"] for h in hits] == [f"s{5 - i // 2}" for i in range(10)]
    for h in hits:  # "deploy step N": its neighbours are lines N-1 and N+1 of its session
        n = int(h["snippet"].split()[2])
        assert h["before"]["content"] == f"routine status line {n - 1} all good"
        last = n % 50 == 49
        assert (h["after"] is None) if last else (h["after"]["content"].split()[3] == str(n + 1))
    assert sum("= ANY(" in s for s in w.sql) == 1, w.sql  # the hits the first did not read
    assert page["total"] == 99  # every third of 300, but the one about a quasar


def test_the_word_estimates_are_asked_again_once_stale(store, monkeypatch):
    """The per-word estimates size the windows and are reused for ``ESTIMATE_TTL_S``: a
    bounded staleness (at 0 s every search plans its EXPLAIN again)."""
    with store.reader() as r:
        r.search(text="status")
        with wire.traced(r.conn) as warm:
            r.search(text="status")
        monkeypatch.setattr(windows, "ESTIMATE_TTL_S", 0.0)
        with wire.traced(r.conn) as stale:
            r.search(text="status")
    assert not any("EXPLAIN" in s for s in warm.sql)
    assert any("EXPLAIN" in s for s in stale.sql)


def test_a_deferred_begin_still_gives_one_snapshot(store, pg_store_url):
    """The snapshot's BEGIN travels with its first statement: what that statement saw is what
    every later one sees, whatever commits in between; a snapshot that ran nothing costs no
    round trip."""
    with store.reader() as r:
        with wire.traced(r.conn) as idle:
            with r.snapshot():
                pass
        assert idle.round_trips == 0
        with r.snapshot() as c:
            before = c.execute("SELECT count(*) FROM messages").fetchone()[0]
            with psycopg.connect(pg_store_url, autocommit=True) as other:
                other.execute("INSERT INTO batches (batch_id) VALUES ('x')")
                other.execute(
                    "INSERT INTO messages (session_id, role, content, ts, arrived_at, state, "
                    "batch, pos, seq) VALUES ('s0', 'user', 'late', 1, 1, 'live', "
                    "(SELECT id FROM batches WHERE batch_id = 'x'), 1000, 1000)"
                )
            assert c.execute("SELECT count(*) FROM messages").fetchone()[0] == before
        assert r.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == before + 1
