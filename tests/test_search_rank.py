"""Bounded ranked search (store/search/rank.py) against FTS5's own bm25() on the same candidates.

SQLite only: the word index and FTS5's bm25() it is compared with exist only there."""

from __future__ import annotations

import random

import pytest
from semantics_helpers import Store, user

from quill.store.search import rank

FTS5_BOUNDED = (
    "SELECT id, r FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
    "WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) ORDER BY r, id DESC LIMIT ?"
)
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "common"]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    rng = random.Random(11)
    for k in range(6):  # 300 messages of varied length and word frequencies
        msgs = [
            user(
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
                + " common"
                + (" seldom" if rng.random() < 0.15 else "")
            )
            for _ in range(50)
        ]
        assert s.apply("messages.append", {"session_id": f"s{k}", "messages": msgs}) == []
    s.index()
    yield s
    s.close()


@pytest.mark.parametrize(
    "text, match",
    [
        ("alpha", '"alpha"'),
        ("seldom alpha", '"seldom" "alpha"'),
        ("alpha beta", '"alpha" "beta"'),
        ("alpha OR omega", '"alpha" OR "omega"'),
        ('"alpha beta"', '"alpha beta"'),
        ("kap*", '"kap"*'),
        ("sigma NOT delta", '"sigma" NOT "delta"'),
    ],
)
def test_scores_are_fts5_bm25_when_every_phrase_is_counted(store, text, match):
    """Every phrase in fewer rows than the sample: document counts are exact, so the scores
    (and the order) are FTS5's bm25() over the same newest candidates."""
    from quill.store.search import plan as query

    with store.reader() as r:
        counts = [rank.doc_count(r.conn, p) for p in query.phrases(text)]
        for candidates in (20, 1000):
            want = r.conn.execute(FTS5_BOUNDED, (match, candidates, 50)).fetchall()
            for got in (
                rank.bm25_bounded(r.conn, text, limit=50, candidates=candidates),
                rank.ranked_with_counts(r.conn, match, counts, limit=50, candidates=candidates),
            ):
                assert [i for i, _ in got] == [i for i, _ in want]
                assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_one_phrase_order_is_fts5_order_when_the_count_is_estimated(store):
    """A sample smaller than the phrase's rows: its count is estimated, and a one-phrase
    query's order is still FTS5's (the idf is one factor common to every row)."""
    with store.reader() as r:
        n = r.conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'seldom'"
        ).fetchone()[0]
        assert rank.doc_count(r.conn, '"seldom"', sample=10) != n  # estimated, not counted
        got = rank.bm25_bounded(r.conn, "seldom", limit=100, candidates=200, sample=10)
        want = r.conn.execute(FTS5_BOUNDED, ('"seldom"', 200, 100)).fetchall()
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] != pytest.approx(
            [s for _, s in want], rel=1e-9
        )  # other idf, same order


def test_doc_count_is_exact_below_the_sample_and_near_above(store):
    with store.reader() as r:
        for word in WORDS + ["seldom"]:
            exact = r.conn.execute(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,)
            ).fetchone()[0]
            assert rank.doc_count(r.conn, f'"{word}"') == exact
            assert rank.doc_count(r.conn, f'"{word}"', sample=40) == pytest.approx(exact, rel=0.5)


def test_only_word_queries_are_ranked(store):
    with store.reader() as r:
        assert rank.bm25_bounded(r.conn, "   ") == []
        with pytest.raises(ValueError):
            rank.bm25_bounded(r.conn, "数据库连接")


# -- the product's ranked search: Reader.search(order="relevance") ------------------------------

FTS5_BOUNDED_IN_SESSION = (
    "SELECT id, r FROM (SELECT f.rowid AS id, bm25(messages_fts) AS r FROM messages_fts f "
    "JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ? AND m.session_id = ? "
    "ORDER BY f.rowid DESC LIMIT ?) ORDER BY r, id DESC LIMIT ?"
)


@pytest.mark.parametrize(
    "text, match",
    [
        ("alpha", '"alpha"'),
        ("seldom alpha", '"seldom" "alpha"'),
        ("alpha OR omega", '"alpha" OR "omega"'),
        ('"alpha beta"', '"alpha beta"'),
        ("sigma NOT delta", '"sigma" NOT "delta"'),
    ],
)
def test_ranked_search_orders_as_fts5_bm25_when_counts_are_exact(store, text, match):
    """A store small enough that every phrase is counted exactly: the product's ranked order
    is FTS5's bm25() order over the newest candidates, with and without a filter, and the
    hits have the newest-first search's shape."""
    with store.reader() as r:
        want = [i for i, _ in r.conn.execute(FTS5_BOUNDED, (match, rank.CANDIDATES, 50)).fetchall()]
        hits = r.search(text, limit=50, order="relevance")
        assert [h["message_id"] for h in hits] == want
        assert len(want) > 10
        newest = r.search(text, limit=50)
        assert sorted(h["message_id"] for h in newest) != [
            h["message_id"] for h in hits
        ]  # really reordered
        assert [set(h) for h in hits] == [set(newest[0])] * len(hits)
        by_id = {h["message_id"]: h for h in newest}
        for h in hits:  # same hit as newest-first search shows for the same message
            if h["message_id"] in by_id:
                assert h == by_id[h["message_id"]]
        in_s2 = [
            i
            for i, _ in r.conn.execute(FTS5_BOUNDED_IN_SESSION, (match, "s2", rank.CANDIDATES, 50))
        ]
        assert [
            h["message_id"] for h in r.search(text, limit=50, order="relevance", session_id="s2")
        ] == in_s2


def test_ranked_search_with_sampled_counts_ranks_the_newest_candidates_by_the_bounded_score(
    store, monkeypatch
):
    """Sampling on (a sample smaller than the phrases' rows, candidates fewer than the
    matches, as at 1M with the real constants): the result is the newest ``CANDIDATES``
    matches, ordered by the bounded score with the estimated counts."""
    monkeypatch.setattr(rank, "DF_SAMPLE", 10)
    monkeypatch.setattr(rank, "CANDIDATES", 20)
    from quill.store.search import plan as query

    text, match = "seldom alpha", '"seldom" "alpha"'
    with store.reader() as r:
        counts = [rank.doc_count(r.conn, p, sample=10) for p in query.phrases(text)]
        exact = [
            r.conn.execute(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (p,)
            ).fetchone()[0]
            for p in query.phrases(text)
        ]
        assert counts != exact  # estimated, not counted
        newest = [
            i
            for (i,) in r.conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC",
                (match,),
            )
        ]
        assert len(newest) > 20
        hits = [
            h["message_id"] for h in r.search(text, limit=300, order="relevance", context=False)
        ]
        assert sorted(hits) == sorted(newest[:20])
        want = [
            i for i, _ in rank.ranked_with_counts(r.conn, match, counts, limit=300, candidates=20)
        ]
        assert hits == want
        assert hits[:5] == [h["message_id"] for h in r.search(text, limit=5, order="relevance")]


def test_ranked_search_keeps_visibility_rules(tmp_path):
    s = Store(tmp_path)
    try:
        s.apply(
            "messages.append",
            {"session_id": "s", "messages": [user("keep wombat"), user("drop wombat wombat")]},
        )
        s.apply("messages.rewind", {"session_id": "s", "user_turn": 2})
        s.index()
        with s.reader() as r:
            assert [h["snippet"] for h in r.search("wombat", order="relevance")] == ["keep wombat"]
            assert [
                h["state"] for h in r.search("wombat", order="relevance", projection="audit")
            ] == ["rewound", "live"]  # two instances rank first
    finally:
        s.close()


def test_ranked_search_needs_a_word_query_and_a_known_order(store):
    with store.reader() as r:
        assert r.search("   ", order="relevance") == []
        for text, kw in (("数据库连接", {}), ("alp", {"substring": True})):
            with pytest.raises(ValueError):
                r.search(text, order="relevance", **kw)
        with pytest.raises(ValueError):
            r.search("alpha", order="best")


def test_a_committed_message_not_yet_indexed_is_found_when_ranking(tmp_path):
    """Rows above the index watermark have no statistics to rank by; they follow the ranked
    hits, newest first, so ``order="relevance"`` never finds less than newest-first."""
    s = Store(tmp_path)
    try:
        s.apply("messages.append", {"session_id": "a", "messages": [user("wombat one")]})
        s.index()
        fresh = [
            user("wombat two"),
            {"role": "assistant", "content": "-", "reasoning": "a wombat thought"},
            {"role": "assistant", "content": "wombat " + "y" * 70_000},
        ]
        s.apply("messages.append", {"session_id": "a", "messages": fresh})
        with s.reader() as r:
            newest = r.search("wombat", limit=10)
            ranked = r.search("wombat", limit=10, order="relevance")
            page = r.search_page("wombat", order="relevance", per_session=None)
        assert len(newest) == 4
        assert sorted(h["message_id"] for h in ranked) == sorted(h["message_id"] for h in newest)
        assert ranked[0]["snippet"].startswith("wombat one")  # the indexed, ranked hit first
        assert page["total"] == 4 and page["total_exact"]
    finally:
        s.close()
