"""A word-search term with no word token (``_``, ``__``: word characters the word index never
holds as a token) is no term of the query: every route gives the hits of the query without
it. Before, SQLite's FTS5 ignored ``"_"`` beside an implicit AND but matched nothing with an
explicit ``AND``, the scan of rows the index does not cover matched nothing either way, and
PostgreSQL matched as if the term were absent."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

from quill.store.search import plan as query

TEXTS = ["plain words here", "alpha beta", "a_b x"]
#: query -> the texts a word search finds (newest first), on every route
WANT = {
    "_ AND plain": ["plain words here"],
    "plain AND _": ["plain words here"],
    "_ plain": ["plain words here"],
    "__ alpha": ["alpha beta"],
    '"_" alpha': ["alpha beta"],
    "alpha OR _": ["alpha beta"],
    "_": [],
}


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "not indexed yet"])
def test_a_term_without_a_word_token_is_dropped_on_every_route(tmp_path, backend, indexed):
    store = Store(tmp_path, backend)
    msgs = [{"role": "user", "content": t} for t in TEXTS]
    store.apply("messages.append", {"session_id": "s", "messages": msgs})
    if indexed:
        store.index()
    try:
        with store.reader() as r:
            got = {q: [h["snippet"] for h in r.search(q, limit=10)] for q in WANT}
            # as a term of symbols alone (``%``): dropped with the operator it leaves dangling
            got_not = [r.search(q, limit=10) for q in ("_ NOT alpha", "% NOT alpha")]
    finally:
        store.backend.close()
    assert got == WANT
    assert got_not[0] == got_not[1]


def test_a_substring_search_still_finds_an_underscore():
    assert query.plan("_", substring=True).kind == "scan"
    assert query.plan("_ AND plain").match == '"plain"'
    assert query.plan("_").kind == "none"
