"""Lineage and listings on real SQLite files through the real spool: the compression-chain walk,
one listing row per chain, title and date filters."""

from __future__ import annotations

from semantics_helpers import Store, store, user  # noqa: F401 (store: fixture)


def _chain(store: Store) -> None:
    store.apply("session.create", {"session_id": "root", "source": "cli"})
    # before root is ended for compression (later appends to it are refused)
    store.apply("messages.append", {"session_id": "root", "messages": [user("hello from root")]})
    for parent, child, kind in (
        ("root", "c1", "compression"),
        ("c1", "c2", "compression"),
        ("c2", "c3", "compression"),
        ("c1", "branch", "branch"),
        ("c2", "reset", "reset"),
        ("c3", "sub", "delegate"),
    ):
        store.apply(
            "session.end",
            {"session_id": parent, "reason": "compression"}
            if kind == "compression"
            else {"session_id": "zz"},
        )
        store.apply(
            "session.create",
            {"session_id": child, "source": "cli", "parent_id": parent, "parent_kind": kind},
        )
        store.apply(
            "messages.append", {"session_id": child, "messages": [user(f"hello from {child}")]}
        )


def test_the_walk_returns_exactly_the_compression_chain_from_any_member(store):
    _chain(store)
    with store.reader() as r:
        for member in ("root", "c1", "c2", "c3"):
            assert r.compression_chain(member) == ["root", "c1", "c2", "c3"]
        assert r.compression_chain("branch") == ["branch"]
        assert r.compression_chain("reset") == ["reset"]
        assert r.compression_chain("sub") == ["sub"]
        assert r.compression_chain("nope") == []


def test_the_walk_is_bounded_and_survives_a_cycle(store):
    store.apply(
        "session.create", {"session_id": "x", "parent_id": "y", "parent_kind": "compression"}
    )
    store.apply(
        "session.create", {"session_id": "y", "parent_id": "x", "parent_kind": "compression"}
    )
    from quill.store.read.lineage import compression_chain

    assert sorted(compression_chain(store.conn, "x")) == ["x", "y"]
    assert len(compression_chain(store.conn, "x", max_len=1)) == 1


def test_listing_shows_one_row_per_chain_unless_asked(store):
    _chain(store)
    with store.reader() as r:
        tips = {s["id"]: s for s in r.list_sessions(limit=100)}
        assert set(tips) == {"c3", "branch", "reset", "zz"}  # "sub", a delegate run, left out
        assert (tips["c3"]["chain_root_id"], tips["c3"]["chain_length"]) == ("root", 4)
        assert {s["id"] for s in r.list_sessions(limit=100, lineage="all")} == {
            "root",
            "c1",
            "c2",
            "c3",
            "branch",
            "reset",
            "sub",
            "zz",
        }


def test_listing_filters_title_literally_and_hides_hidden_sessions_by_default(store):
    for sid, title in (
        ("s1", "user_auth refactor"),
        ("s2", "user-auth review"),
        ("s3", "userXauth notes"),
        ("s4", "100% done"),
    ):
        store.apply("session.create", {"session_id": sid, "title": title, "source": "cli"})
        store.apply(
            "messages.append",
            {"session_id": sid, "messages": [user(f"first of {sid}"), user("second")]},
        )
    store.apply("session.create", {"session_id": "other", "source": "codex"})
    store.apply("session.flags", {"session_id": "s2", "hidden": True})
    store.apply("session.flags", {"session_id": "s3", "archived": True, "pinned": True})
    with store.reader() as r:

        def ids(**kw):
            return sorted(s["id"] for s in r.list_sessions(**kw))

        assert ids(title_contains="user_auth") == ["s1"]
        assert ids(title_contains="0%") == ["s4"]
        assert ids(title_contains="USER") == ["s1", "s3"]  # s2 hidden
        assert ids(title_contains="user", include_hidden=True) == ["s1", "s2", "s3"]
        assert ids(hidden=True) == ["s2"]
        assert ids(archived=True) == ["s3"] and ids(pinned=True) == ["s3"]
        assert ids(archived=False, source="cli") == ["s1", "s4"]
        assert ids(source="codex") == ["other"]
        assert r.list_sessions(title_contains="user_auth")[0]["preview"] == "first of s1"


def test_listing_date_range_selects_sessions_active_in_it(store):
    store.apply("session.create", {"session_id": "old", "started_at": 1.5e9})
    store.apply("messages.append", {"session_id": "old", "messages": [user("x", timestamp=1.5e9)]})
    store.apply("session.create", {"session_id": "long", "started_at": 1.5e9})
    store.apply("messages.append", {"session_id": "long", "messages": [user("x", timestamp=1.7e9)]})
    store.apply("session.create", {"session_id": "new", "started_at": 1.8e9})
    store.apply("messages.append", {"session_id": "new", "messages": [user("x", timestamp=1.8e9)]})
    with store.reader() as r:
        got = [s["id"] for s in r.list_sessions(since=1.6e9, until=1.75e9)]
    assert got == ["long"]
