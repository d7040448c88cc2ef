"""Search on real SQLite files through the real spool (lineage and listings:
tests/test_semantics_listing.py)."""

from __future__ import annotations

import string

import pytest
from semantics_helpers import (  # noqa: F401 (store: fixture)
    Store,
    assistant,
    call,
    store,
    tool,
    user,
)

from quill.store.search import plan as query

# -- queries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("indexed", [False, True])
def test_every_ascii_punctuation_character_between_two_words_is_a_valid_query(store, indexed):
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user(f"alpha{c}beta") for c in string.punctuation]},
    )
    if indexed:
        store.index()
    with store.reader() as r:
        for c in string.punctuation:
            hits = r.search(f"alpha{c}beta", limit=100)
            assert hits, c
            for dangling in (f"alpha {c}", f"{c} beta", c * 3):
                r.search(dangling)  # never raises


@pytest.mark.parametrize("indexed", [False, True])
def test_punctuated_user_strings_find_the_text_they_name(store, indexed):
    texts = [
        "see #123 now",
        "edit src/main.py today",
        "I don't know",
        "down 50% here",
        "mail a@b.com please",
        "is it ok? yes",
        "costs $5 only",
        "pair x,y fine",
        "run chat-send-message fast",
    ]
    store.apply("messages.append", {"session_id": "s", "messages": [user(t) for t in texts]})
    if indexed:
        store.index()
    with store.reader() as r:
        for q, text in zip(
            ["#123", "src/main.py", "don't", "50%", "a@b.com", "ok?", "$5", "x,y", "chat-send*"],
            texts,
        ):
            assert [h["snippet"] for h in r.search(q)] == [text], q
        assert len(r.search("see OR pair")) == 2
        assert r.search('"know I"') == []  # a quoted phrase keeps its order
        assert len(r.search("alpha AND")) == 0 and len(r.search("OR today")) == 1


def test_sanitizer_drops_dangling_operators_and_empty_phrases():
    assert query.sanitize("issue AND main") == '"issue" AND "main"'
    assert query.sanitize("AND issue OR") == '"issue"'
    assert query.sanitize('issue --- main ""') == '"issue" "main"'
    assert query.sanitize("chat-send*") == '"chat-send"*'
    assert query.sanitize('"don\'t stop"') == '"don\'t stop"'
    assert query.plan("!!! ***").kind == "none"


@pytest.mark.parametrize("indexed", [False, True])
def test_cjk_substrings_are_found_by_trigram_and_short_ones_by_scan(store, indexed):
    store.apply(
        "messages.append",
        {
            "session_id": "zh",
            "messages": [
                user("我们的数据库很快"),
                assistant("東京都に行きました"),
                user("plain english words"),
            ],
        },
    )
    if indexed:
        store.index()
    assert query.plan("数据库").kind == "trigram" and query.plan("数据").kind == "scan"
    with store.reader() as r:
        assert [h["snippet"] for h in r.search("数据库")] == ["我们的数据库很快"]
        assert [h["snippet"] for h in r.search("数据")] == ["我们的数据库很快"]
        assert [h["snippet"] for h in r.search("京都")] == ["東京都に行きました"]
        assert r.search("数据表") == []
        assert [h["snippet"] for h in r.search("glish wor", substring=True)] == [
            "plain english words"
        ]


def test_trigram_index_holds_only_its_documented_scope(store):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("数据库 one"),
                assistant("数据库 two"),
                tool("t", "数据库 three"),
                {"role": "system", "content": "数据库 four"},
            ],
        },
    )
    store.index()
    if store.kind == "postgres":  # the indexes are GIN indexes on messages: read them, not the heap
        from quill.store.postgres.schema import TRIGRAM_SCOPE

        store.conn.execute("SET enable_seqscan = off")
        n_fts = store.conn.execute(
            "SELECT count(*) FROM messages WHERE words "
            "@@ to_tsquery('simple', 'one | two | three | four')"
        ).fetchone()[0]
        n_tri = store.conn.execute(
            f"SELECT count(*) FROM messages WHERE {TRIGRAM_SCOPE} "
            "AND left(content, 2000) LIKE '%数据库%'"
        ).fetchone()[0]
        scope = store.conn.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid = 'messages_trigram'::regclass"
        ).fetchone()[0]
        assert "'user'" in scope and "'assistant'" in scope and "'tool'" not in scope
    else:
        n_fts = store.conn.execute(
            "SELECT count(*) FROM messages_fts "
            "WHERE messages_fts MATCH 'one OR two OR three OR four'"
        ).fetchone()[0]
        n_tri = store.conn.execute(
            "SELECT count(*) FROM messages_trigram WHERE messages_trigram MATCH '数据库'"
        ).fetchone()[0]
    assert (n_fts, n_tri) == (4, 2)


# -- visibility, filters, hit shape --------------------------------------------------------------


def test_rewound_and_superseded_rows_are_found_only_in_audit_mode(store):
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("keep wombat"), user("drop wombat")]},
    )
    store.apply("messages.rewind", {"session_id": "s", "user_turn": 2})
    store.index()
    with store.reader() as r:
        assert [h["snippet"] for h in r.search("wombat")] == ["keep wombat"]
        assert [(h["snippet"], h["state"]) for h in r.search("wombat", projection="audit")] == [
            ("drop wombat", "rewound"),
            ("keep wombat", "live"),
        ]


def test_compacted_rows_stay_searchable_by_default(store):
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("old capybara talk"), assistant("ok")]},
    )
    store.apply("messages.compact", {"session_id": "s", "messages": [user("[summary]")]})
    store.index()
    with store.reader() as r:
        assert [h["state"] for h in r.search("capybara")] == ["compacted"]
        assert r.search("capybara", projection="model") == []


def test_hits_carry_ids_role_snippet_context_and_obey_filters(store):
    store.apply("session.create", {"session_id": "a", "source": "cli"})
    store.apply("session.create", {"session_id": "b", "source": "codex"})
    store.apply(
        "messages.append",
        {
            "session_id": "a",
            "messages": [
                user("first", timestamp=1.6e9),
                assistant("the heron flies", timestamp=1.6e9 + 10),
                user("last", timestamp=1.6e9 + 20),
            ],
        },
    )
    store.apply(
        "messages.append",
        {
            "session_id": "b",
            "messages": [
                user("a heron again", timestamp=1.7e9),
                assistant(None, tool_calls=[call("c", "heron_tool", "{}")]),
            ],
        },
    )
    store.index()
    with store.reader() as r:
        hit = r.search("flies")[0]
        assert {k: hit[k] for k in ("session_id", "role", "snippet")} == {
            "session_id": "a",
            "role": "assistant",
            "snippet": "the heron flies",
        }
        assert (hit["before"]["content"], hit["after"]["content"]) == ("first", "last")
        assert {h["session_id"] for h in r.search("heron")} == {"a", "b"}
        assert [h["session_id"] for h in r.search("heron", source="codex", role="user")] == ["b"]
        assert [h["session_id"] for h in r.search("heron", session_id="a")] == ["a"]
        assert [h["session_id"] for h in r.search("heron", until=1.65e9)] == ["a"]
        assert [h["session_id"] for h in r.search("heron", since=1.65e9, role="user")] == ["b"]
        assert [h["role"] for h in r.search("heron_tool")] == [
            "assistant"
        ]  # tool names are searchable
        assert r.search("heron")[0]["session_id"] == "b"  # newest first


def test_audit_hits_carry_audit_neighbours(store):
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("one"), user("two ibis"), user("three")]},
    )
    store.apply("messages.rewind", {"session_id": "s", "user_turn": 2})
    store.index()
    with store.reader() as r:
        hit = r.search("ibis", projection="audit")[0]
    assert (hit["state"], hit["before"]["content"], hit["after"]["content"]) == (
        "rewound",
        "one",
        "three",
    )
    assert hit["after"]["state"] == "rewound"


def test_short_cjk_scan_honours_or_and_not(tmp_path, backend):
    from semantics_helpers import Store

    store = Store(tmp_path, backend)
    store.apply(
        "messages.append",
        {
            "session_id": "cjk",
            "messages": [
                {"role": "user", "content": "数据库 连接 失败"},
                {"role": "user", "content": "東京 は 首都"},
            ],
        },
    )
    store.index()
    with store.reader() as r:

        def ids(q):
            return [h["message_id"] for h in r.search(q)]

        first, second = ids("数据库")[0], ids("東京")[0]
        assert ids("数据库 OR 東京") == [second, first]
        assert ids("東京 OR 数据库") == [second, first]
        assert ids("数据库 NOT 失败") == []
        assert ids("数据库 NOT 東京") == [first]
    store.close()


def test_relevance_order_ranks_on_both_backends(store):
    """Ranked search: SQLite's bounded BM25 (store/search/rank.py; tests/test_search_rank.py),
    PostgreSQL's ts_rank over the same bounded candidates (store/postgres/search.py). Both put
    a dense short message above a long one mentioning the word once, keep the display rules
    (one hit per display position, rewound rows hidden) and refuse a query with no words."""
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("wombat wombat wombat burrow"),
                user("one wombat among many other words here today"),
            ],
        },
    )
    store.apply(
        "messages.append", {"session_id": "t", "messages": [user("a wombat note"), user("plain")]}
    )
    store.apply("messages.rewind", {"session_id": "t", "message_id": 3})
    store.index()
    with store.reader() as r:
        assert [h["snippet"] for h in r.search("wombat")][0].startswith("one wombat")
        ranked = r.search("wombat", order="relevance")
        assert ranked[0]["snippet"].startswith("wombat wombat")
        assert sorted(h["message_id"] for h in ranked) == sorted(
            h["message_id"] for h in r.search("wombat")
        )
        assert len({h["message_id"] for h in ranked}) == len(ranked) == 2
        assert [h["snippet"] for h in r.search("burrow OR today", order="relevance", limit=1)] != []
        assert r.search("zzzz", order="relevance") == []
        with pytest.raises(ValueError):
            r.search("omba", substring=True, order="relevance")
        with pytest.raises(ValueError):
            r.search("wombat", order="oldest")
