"""A tool's name finds its calls and its results, on both backends and every search route.

A tool result stores the tool's name apart from its text (``tool_name``); the word and
substring texts held only the calls' names, so searching ``Bash`` or ``read_file`` missed every
result (the reference system finds a token that is only in ``tool_name``)."""

from __future__ import annotations

import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.store.postgres import windows

ROUTES = {  # PostgreSQL's index routes (store/postgres/windows.py); SQLite ignores them
    "as configured": {},
    "index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
}
QUERIES = [  # (search arguments, the roles of the hits)
    (dict(text="Bash"), ["assistant", "tool"]),
    (dict(text="bash", kinds=["tool"]), ["assistant", "tool"]),
    (dict(text="read_file"), ["assistant", "tool"]),
    (dict(text="read_fi*"), ["assistant", "tool"]),
    (dict(text="ad_fil", substring=True), ["assistant", "tool"]),
    (dict(text="Ba", substring=True), ["assistant", "tool"]),  # the short scan
    (dict(text="Bash", kinds=["text"]), []),  # a name is tool text, not message text
    (dict(text="Alice"), []),  # a participant's name is not a tool's
]


def _fill(store) -> None:
    msgs = [
        user("list the files please", name="Alice"),
        assistant(None, tool_calls=[call("c1", "Bash", '{"command": "ls -la"}')]),
        tool("c1", "total 0", name="Bash"),
        assistant(None, tool_calls=[call("c2", "read_file", '{"path": "notes.txt"}')]),
        tool("c2", "hello", name="read_file"),
        assistant("done"),
    ]
    assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []


def _found(store, route: dict, monkeypatch) -> dict[str, list[tuple]]:
    for name, value in route.items():
        monkeypatch.setattr(windows, name, value)
    out = {}
    with store.reader() as r:
        for kw, _ in QUERIES:
            hits = r.search(limit=20, **kw)
            out[repr(kw)] = sorted((h["role"], h["matched_in"], h["snippet"]) for h in hits)
    return out


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_tools_name_finds_its_calls_and_results(tmp_path, backend, route, monkeypatch):
    store = Store(tmp_path, backend)
    try:
        _fill(store)
        unindexed = _found(store, ROUTES[route], monkeypatch)  # SQLite: the tail scan
        store.index()
        indexed = _found(store, ROUTES[route], monkeypatch)
    finally:
        store.close()
    assert unindexed == indexed
    for kw, roles in QUERIES:
        hits = indexed[repr(kw)]
        assert sorted(h[0] for h in hits) == roles, (kw, hits)
        assert all(h[1] == "tool" for h in hits), (kw, hits)
    result_snippets = [h[2] for h in indexed[repr(dict(text="read_file"))] if h[0] == "tool"]
    assert "read" in result_snippets[0] and "file" in result_snippets[0]


def test_both_backends_give_the_same_hits(tmp_path, pg_store_url, monkeypatch):
    found = []
    for url in (None, pg_store_url):
        store = Store(tmp_path / str(bool(url)), url)
        try:
            _fill(store)
            store.index()
            found.append(_found(store, {}, monkeypatch))
        finally:
            store.close()
    assert found[0] == found[1]


def test_a_store_indexed_before_tool_names_is_reindexed_on_open(tmp_path, backend):
    """The index layout changed (SQLite ``FTS_LAYOUT`` 4, PostgreSQL ``PG_LAYOUT`` 6): a store
    indexed with the previous layout is re-indexed when the writer opens it, and its existing
    tool results are then found by the tool's name."""
    import psycopg

    store = Store(tmp_path, backend)
    _fill(store)
    store.index()
    if backend is None:  # the previous layout's index held no tool_name: empty it
        store.conn.execute(
            "DELETE FROM messages_fts; UPDATE state_meta SET value = '3' WHERE key = 'fts_layout'"
        )
    store.close()
    if backend is not None:  # a words column without tool names, as layout 4 left it
        with psycopg.connect(backend, autocommit=True) as conn:
            conn.execute("ALTER TABLE messages DROP COLUMN words")
            conn.execute(
                "ALTER TABLE messages ADD COLUMN words tsvector GENERATED ALWAYS AS "
                "(to_tsvector('simple', coalesce(content, ''))) STORED"
            )
            conn.execute("UPDATE state_meta SET value = '4' WHERE key = 'pg_layout'")
    store = Store(tmp_path, backend)  # the writer's open re-creates the index
    try:
        store.index()
        with store.reader() as r:
            assert sorted(h["role"] for h in r.search("Bash")) == ["assistant", "tool"]
    finally:
        store.close()
