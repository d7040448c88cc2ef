"""The trigram index keeps no positions (``detail=none``): it finds rows that hold a term's
trigrams anywhere, and search keeps only the rows whose indexed text holds the term itself.
These rows hold every trigram of the query in the wrong order or apart, in other cases, with
the term negated or too long for the index to be asked for all its trigrams; the answer must
be exactly the rows holding the query (as FTS5 phrases answered with positions). SQLite
only: the PostgreSQL substring route does not use this index."""

from __future__ import annotations

import apsw
import pytest
from semantics_helpers import Store, assistant, user

from quill.store import open_writer
from quill.store.search import candidates, textfold
from quill.store.search import plan as query

LONG = "abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJ"  # 45 trigrams > TRIGRAMS_PER_TERM

TEXTS = [
    "the parsedconf value",  # 0: holds it
    "parsed conf",  # 1: both halves, not together
    "confparsed",  # 2: halves swapped
    "arsedco rsedcon sedconf parse",  # 3: every trigram of parsedconf, never contiguous
    "REPARSEDCONFIG",  # 4: holds it in capitals
    "parsedconf zzzq",  # 5: holds it and the negated term
    "数据库连接失败了",  # 6: CJK term
    "数据库 连接失败",  # 7: CJK halves apart
    "x " + LONG + " y",  # 8: the long term
    # 9: every trigram of the long term and of its every 3rd window, never the whole term
    " ".join(LONG[i : i + 4] for i in range(0, len(LONG) - 3, 2)),
    "Éclair PARSÉDCONF",  # 10: non-ASCII next to it, É folds to é, not e
    "éclair parsédconf",  # 11
]

QUERIES = [
    "parsedconf",
    "parsedconf NOT zzzq",
    "sedconf OR 连接失败",
    "数据库连接失败",
    "parsédconf",
    LONG,
    LONG.lower(),
    '"arsedco rsedcon"',
]


def _oracle(q: str) -> set[int]:
    return {i for i, t in enumerate(TEXTS) if query.matches(query.plan(q, substring=True), t) if t}


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    msgs = [user(t) if i % 2 else assistant(t) for i, t in enumerate(TEXTS)]
    assert s.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
    s.index()
    yield s
    s.close()


def test_the_trigram_index_keeps_no_positions(store):
    sql = store.conn.execute(
        "SELECT sql FROM sqlite_schema WHERE name = 'messages_trigram'"
    ).fetchone()[0]
    assert "detail=none" in sql.replace(" ", "")


@pytest.mark.parametrize("q", QUERIES)
def test_trigram_hits_are_exactly_the_rows_holding_the_query(store, q):
    assert query.plan(q, substring=True).kind == "trigram"
    ids = store.ids("s")
    want = {ids[i] for i in _oracle(q)}
    with store.reader() as r:
        got = {h["message_id"] for h in r.search(q, substring=True, limit=100, context=False)}
    assert got == want, (q, sorted(ids.index(i) for i in got), sorted(_oracle(q)))
    assert want, q  # every query here holds in at least one row


def test_the_index_alone_answers_a_superset(store):
    """The rows the index matches before the substring test include the decoys (3, 9): the
    test above is what tells them apart, so it checks something the index cannot."""
    ids = store.ids("s")
    for q, decoy in (("parsedconf", 3), (LONG, 9)):
        match = candidates.trigram_match(query.plan(q, substring=True))
        rows = {
            r[0]
            for r in store.conn.execute(
                "SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH ?", (match,)
            )
        }
        assert ids[decoy] in rows, q
    assert textfold.fold(LONG) not in textfold.fold(TEXTS[9])


def test_a_store_indexed_with_positions_is_reindexed_without(tmp_path):
    """A store whose trigram index was built with positions (layout 2) gets the new index
    when the writer opens it, and finds the same rows once re-indexed."""
    s = Store(tmp_path)
    assert s.apply("messages.append", {"session_id": "s", "messages": [user(TEXTS[0])]}) == []
    s.index()
    s.conn.execute(
        "DROP TABLE messages_trigram; CREATE VIRTUAL TABLE messages_trigram USING fts5(text, "
        "content='', contentless_delete=1, tokenize='trigram case_sensitive 0'); "
        "UPDATE state_meta SET value = '2' WHERE key = 'fts_layout'"
    )
    s.close()
    conn = open_writer(tmp_path / "state.db")
    try:
        sql = conn.execute(
            "SELECT sql FROM sqlite_schema WHERE name = 'messages_trigram'"
        ).fetchone()[0]
        assert "detail=none" in sql.replace(" ", "")
        upto = conn.execute(
            "SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'"
        ).fetchone()[0]
        assert upto == "0"  # re-filled by the indexer from messages
    finally:
        conn.close()
    s = Store(tmp_path)
    try:
        s.index()
        with s.reader() as r:
            assert len(r.search("parsedconf", substring=True, context=False)) == 1
    finally:
        s.close()
    with pytest.raises(apsw.SQLError):  # the old index's phrase query no longer exists
        c = apsw.Connection(str(tmp_path / "state.db"))
        try:
            c.execute("SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH '\"abcd\"'")
        finally:
            c.close()
