"""Search while the word index is refilled (after ``fts_rebuild``): bounded, honest, and the
same answers as the index gives. Real SQLite stores through the real spool and writer apply."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from semantics_helpers import Store, user

from quill.store.search import candidates
from quill.store.sqlite import fts_repair


def _rebuild(store: Store) -> None:
    """What the ``fts_rebuild`` job does: empty indexes, watermark 0 (the writer refills)."""
    fts_repair.rebuild(store.conn)


def _rows_read(conn: apsw.Connection) -> list[int]:
    """A counter of rows any statement on ``conn`` returns (apsw's row tracer)."""
    seen = [0]

    def trace(_cursor, row):
        seen[0] += 1
        return row

    conn.row_trace = trace
    return seen


def test_a_search_after_a_rebuild_reads_a_bounded_tail_and_says_it_is_degraded(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(candidates, "TAIL_MAX_ROWS", 40)
    store = Store(tmp_path)
    try:
        texts = ["oldest needle"] + [f"filler message {i}" for i in range(200)] + ["newest pin"]
        store.apply("messages.append", {"session_id": "s", "messages": [user(t) for t in texts]})
        store.index()
        _rebuild(store)
        with store.reader() as r:
            health = r.search_health()
            assert health["degraded"] and health["fts_pending"] == len(texts)
            rows = _rows_read(r.conn)
            assert [h["snippet"] for h in r.search("pin")] == ["newest pin"]
            rows[0] = 0
            assert r.search("needle") == []  # beyond the bound, until the indexer reaches it
            # The whole store was read before (every unindexed row matched in Python); now the
            # tail is cut at the bound.
            assert rows[0] <= 40 + 5, rows[0]
        store.index()
        with store.reader() as r:
            assert not r.search_health()["degraded"]
            assert [h["snippet"] for h in r.search("needle")] == ["oldest needle"]
    finally:
        store.close()


# Words with case and diacritics, so the ASCII shortcut and the tokenizer path both decide.
WORDS = ["alpha", "Beta", "gamma", "café", "CAFE", "naïve", "naive", "x1", "data"]
texts_st = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1)


def _query(draw_words: list[str], kind: int) -> str:
    if kind == 0:
        return draw_words[0]
    if kind == 1:
        return '"' + " ".join(draw_words[:2]) + '"'
    if kind == 2:
        return draw_words[0][:3] + "*"
    if kind == 3:
        return f"{draw_words[0]} NOT {draw_words[-1]}"
    return f"{draw_words[0]} OR {draw_words[-1]}"


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=texts_st,
    queries=st.lists(
        st.tuples(st.lists(st.sampled_from(WORDS), min_size=2, max_size=2), st.integers(0, 4)),
        min_size=1,
        max_size=4,
    ),
)
def test_the_unindexed_tail_matches_exactly_what_the_word_index_matches(
    tmp_path_factory, texts, queries
):
    store = Store(tmp_path_factory.mktemp("tail"))
    try:
        store.apply(
            "messages.append",
            {"session_id": "s", "messages": [user(" ".join(t)) for t in texts]},
        )
        qs = [_query(words, kind) for words, kind in queries]
        with store.reader() as r:
            tail = {q: [h["message_id"] for h in r.search(q, limit=100)] for q in qs}
        store.index()
        with store.reader() as r:
            for q in qs:
                assert [h["message_id"] for h in r.search(q, limit=100)] == tail[q], q
    finally:
        store.close()


@pytest.mark.parametrize(
    ("text", "query", "found"),
    [
        ("Café au lait", "cafe", True),  # diacritics folded: not ASCII, tokenizer path
        ("CAFE AU LAIT", "café", True),
        ("concatenate", "cat", False),  # a substring, not a word
        ("concatenate", "conc*", True),
        ("one two three", '"two three"', True),
        ("one two three", '"one three"', False),
        ("two-three", '"two three"', True),
    ],
)
def test_tail_word_semantics(tmp_path, text, query, found):
    store = Store(tmp_path)
    try:
        store.apply("messages.append", {"session_id": "s", "messages": [user(text)]})
        for _ in range(2):  # unindexed tail, then the index: the same answer
            with store.reader() as r:
                assert bool(r.search(query)) is found
            store.index()
    finally:
        store.close()
