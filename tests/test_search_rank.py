"""Bounded ranked search (store/rank.py) against FTS5's own bm25() on the same candidates.

SQLite only: the word index and FTS5's bm25() it is compared with exist only there."""
from __future__ import annotations

import random

import pytest

from quill.store import rank

from semantics_helpers import Store, user

FTS5_BOUNDED = ("SELECT id, r FROM (SELECT rowid AS id, bm25(messages_fts) AS r FROM messages_fts "
                "WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) ORDER BY r, id DESC LIMIT ?")
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "common"]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    rng = random.Random(11)
    for k in range(6):  # 300 messages of varied length and word frequencies
        msgs = [user(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) + " common"
                     + (" seldom" if rng.random() < 0.15 else "")) for _ in range(50)]
        assert s.apply("messages.append", {"session_id": f"s{k}", "messages": msgs}) == []
    s.index()
    yield s
    s.close()


@pytest.mark.parametrize("text, match", [
    ("alpha", '"alpha"'), ("seldom alpha", '"seldom" "alpha"'), ("alpha beta", '"alpha" "beta"'), ("alpha OR omega", '"alpha" OR "omega"'),
    ('"alpha beta"', '"alpha beta"'), ("kap*", '"kap"*'), ("sigma NOT delta", '"sigma" NOT "delta"')])
def test_scores_are_fts5_bm25_when_every_phrase_is_counted(store, text, match):
    """Every phrase in fewer rows than the sample: document counts are exact, so the scores
    (and the order) are FTS5's bm25() over the same newest candidates."""
    from quill.store import query
    with store.reader() as r:
        counts = [rank.doc_count(r.conn, p) for p in query.phrases(text)]
        for candidates in (20, 1000):
            want = r.conn.execute(FTS5_BOUNDED, (match, candidates, 50)).fetchall()
            for got in (rank.bm25_bounded(r.conn, text, limit=50, candidates=candidates),
                        rank.ranked_with_counts(r.conn, match, counts, limit=50, candidates=candidates)):
                assert [i for i, _ in got] == [i for i, _ in want]
                assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_one_phrase_order_is_fts5_order_when_the_count_is_estimated(store):
    """A sample smaller than the phrase's rows: its count is estimated, and a one-phrase
    query's order is still FTS5's (the idf is one factor common to every row)."""
    with store.reader() as r:
        n = r.conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'seldom'").fetchone()[0]
        assert rank.doc_count(r.conn, '"seldom"', sample=10) != n  # estimated, not counted
        got = rank.bm25_bounded(r.conn, "seldom", limit=100, candidates=200, sample=10)
        want = r.conn.execute(FTS5_BOUNDED, ('"seldom"', 200, 100)).fetchall()
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] != pytest.approx([s for _, s in want], rel=1e-9)  # other idf, same order


def test_doc_count_is_exact_below_the_sample_and_near_above(store):
    with store.reader() as r:
        for word in WORDS + ["seldom"]:
            exact = r.conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                                   (word,)).fetchone()[0]
            assert rank.doc_count(r.conn, f'"{word}"') == exact
            assert rank.doc_count(r.conn, f'"{word}"', sample=40) == pytest.approx(exact, rel=0.5)


def test_only_word_queries_are_ranked(store):
    with store.reader() as r:
        assert rank.bm25_bounded(r.conn, "   ") == []
        with pytest.raises(ValueError):
            rank.bm25_bounded(r.conn, "数据库连接")
