"""Transcript semantics of reads: projections and their paging invariant, emptiness, titles,
end reasons, flags, read marks. Real SQLite files, driven through the real spool and
``apply_chunk``."""

from __future__ import annotations

import json

import pytest
from semantics_helpers import Store, assistant, call, tool, user
from transcript_helpers import _turns

from quill.store.read.projections import read


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


# -- projections: one display transcript ----------------------------------------------------------


def _busy_session(store: Store) -> None:
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                {"role": "system", "content": "be brief"},
                *_turns(3),
                assistant(None, tool_calls=[call("t1")]),
                tool("t1", "same output"),
                assistant(None, tool_calls=[call("t2")]),
                tool("t2", "same output"),
            ],
        },
    )
    store.apply(
        "messages.compact",
        {
            "session_id": "s",
            "tail_count": 3,
            "messages": [
                {"role": "system", "content": "be brief"},
                user("[summary]"),
                tool("t1", "same output"),
                assistant(None, tool_calls=[call("t2")]),
                tool("t2", "same output"),
            ],
        },
    )
    store.apply("messages.append", {"session_id": "s", "messages": _turns(2, "after")})


def test_display_paging_offset_latest_and_after_id_are_slices_of_the_full_display_read(store):
    _busy_session(store)
    assert store.last_rejects == []
    with store.reader() as r:
        full = r.get_messages("s")
        keys = [m["message_id"] for m in full]
        assert (
            len(keys) == len(set(keys)) == 16
        )  # 11 originals (copies share their place) + summary + 4 new
        for limit in (1, 3, 5, 20):
            for offset in range(0, len(full) + 1, 2):
                assert (
                    r.get_messages("s", limit=limit, offset=offset) == full[offset : offset + limit]
                )
            assert r.get_messages("s", limit=limit, latest=True) == full[-limit:]
        for i, m in enumerate(full):
            assert r.get_messages("s", after_id=m["message_id"]) == full[i + 1 :]
        assert r.export("s")["messages"] == full


def test_display_dedupes_tool_rows_by_tool_call_id_not_only_by_content(store):
    _busy_session(store)
    with store.reader() as r:
        tools = [m for m in r.get_messages("s") if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == [
        "t1",
        "t2",
    ]  # same content, different calls: both shown


def test_search_context_is_the_display_neighbours_of_the_hit(store):
    _busy_session(store)
    store.index()
    with store.reader() as r:
        full = r.get_messages("s")
        hits = r.search("question") + r.search("summary") + r.search("output")
    assert hits
    for h in hits:
        i = [m["message_id"] for m in full].index(h["message_id"])
        assert h["before"] == (full[i - 1] if i > 0 else None)
        assert h["after"] == (full[i + 1] if i + 1 < len(full) else None)


def test_projection_reads_reject_unknown_names_and_negative_pages(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(1)})
    with pytest.raises(ValueError):
        read(store.conn, "s", "everything")
    with pytest.raises(ValueError):
        read(store.conn, "s", limit=-1)


# -- sessions: emptiness, titles, end reasons, flags, read marks --------------------------------


def test_a_session_whose_rows_are_all_rewound_or_compacted_is_not_empty(store):
    store.apply("messages.append", {"session_id": "rewound", "messages": _turns(1)})
    store.apply("messages.rewind", {"session_id": "rewound", "user_turn": 1})
    store.apply("messages.append", {"session_id": "mixed", "messages": _turns(1)})
    store.apply("messages.compact", {"session_id": "mixed", "messages": [user("[summary]")]})
    store.apply("messages.rewind", {"session_id": "mixed", "user_turn": 1})
    store.apply("session.create", {"session_id": "bare"})
    assert store.last_rejects == []
    with store.reader() as r:
        for sid in ("rewound", "mixed"):
            assert r.get_messages(sid, "model") == []
            assert r.is_empty(sid) is False and r.get_session(sid)["empty"] is False
        assert r.get_session("rewound")["message_count"] == 0
        assert r.is_empty("bare") is True and r.get_session("bare")["empty"] is True


def test_titles_are_unique_sanitized_limited_and_clearable(store):
    assert (
        store.apply("session.title", {"session_id": "a", "title": "  my\x00 pro\x07ject\n\u200b "})
        == []
    )
    assert store.apply("session.title", {"session_id": "b", "title": "my pro ject"}) == [
        "duplicate-title"
    ]
    assert "session a" in store.last_rejects[0][1]
    assert store.apply("session.title", {"session_id": "b", "title": "x" * 201}) == [
        "title-too-long"
    ]
    store.apply(
        "session.create", {"session_id": "c", "title": "my pro ject"}
    )  # an import: kept, title dropped
    assert (
        store.apply("session.title", {"session_id": "d", "title": "\x01\x02"}) == []
    )  # only control chars: cleared
    with store.reader() as r:
        assert r.get_session("a")["title"] == "my pro ject"
        assert r.get_session("b") is None  # both refused ops changed nothing, not even a bare row
        assert r.get_session("c")["title"] is None
        assert r.get_session("d")["title"] is None  # several untitled sessions are fine
    assert json.loads(
        store.conn.execute("SELECT meta FROM sessions WHERE id = 'c'").fetchone()[0]
    ) == {"requested_title": "my pro ject"}
    assert store.apply("session.title", {"session_id": "a", "title": ""}) == []  # empty clears
    assert (
        store.apply("session.title", {"session_id": "b", "title": "my pro\tject"}) == []
    )  # now free
    with store.reader() as r:
        assert (r.get_session("a")["title"], r.get_session("b")["title"]) == (None, "my pro ject")


def test_a_continuation_renamed_to_its_roots_title_takes_it_over(store):
    """The reference: root "X", continuation renamed "X" — accepted, the root left untitled.
    Quill refused it as ``duplicate-title``. A session outside the chain still may not."""
    store.apply("session.create", {"session_id": "root", "title": "X"})
    store.apply("session.end", {"session_id": "root", "reason": "compression"})
    for sid, parent in (("mid", "root"), ("tip", "mid")):
        store.apply(
            "session.create",
            {"session_id": sid, "parent_id": parent, "parent_kind": "compression"},
        )
    store.apply("session.create", {"session_id": "stranger"})
    store.apply(
        "session.create", {"session_id": "fork", "parent_id": "root", "parent_kind": "branch"}
    )
    assert store.apply("session.title", {"session_id": "tip", "title": "X"}) == []
    for sid in ("stranger", "fork"):  # not a continuation of "tip"'s chain
        assert store.apply("session.title", {"session_id": sid, "title": "X"}) == [
            "duplicate-title"
        ]
    assert store.apply("session.title", {"session_id": "mid", "title": "X"}) == []  # and back
    with store.reader() as r:
        titles = {s: r.get_session(s)["title"] for s in ("root", "mid", "tip", "stranger")}
    assert titles == {"root": None, "mid": "X", "tip": None, "stranger": None}


def test_first_end_reason_wins_and_only_automatic_ends_are_cleared_by_a_live_writer(store):
    store.apply("session.end", {"session_id": "auto", "reason": "ws_disconnect"})
    store.apply("session.end", {"session_id": "auto", "reason": "user_exit"})
    store.apply("session.end", {"session_id": "deliberate", "reason": "session_reset"})
    with store.reader() as r:
        assert r.get_session("auto")["end_reason"] == "ws_disconnect"
    for sid in ("auto", "deliberate"):
        store.apply("messages.append", {"session_id": sid, "messages": [user("still here")]})
    with store.reader() as r:
        assert (r.get_session("auto")["ended_at"], r.get_session("auto")["end_reason"]) == (
            None,
            None,
        )
        assert r.get_session("deliberate")["end_reason"] == "session_reset"
        assert len(r.get_messages("deliberate")) == 1  # the rows still land


def test_read_watermark_drives_unread_and_never_moves_back(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(2)})
    second = store.ids("s")[1]
    store.apply("session.read", {"session_id": "s", "message_id": second})
    with store.reader() as r:
        assert r.get_session("s")["unread"] == 2
    store.apply("session.read", {"session_id": "s"})
    store.apply("session.read", {"session_id": "s", "message_id": second})  # older: ignored
    with store.reader() as r:
        assert r.get_session("s")["unread"] == 0
    assert store.apply("session.read", {"session_id": "s", "message_id": 10**9}) == [
        "unknown-message"
    ]


def test_flags_need_booleans_and_edges_need_a_known_kind(store):
    assert store.apply("session.flags", {"session_id": "s", "pinned": 1}) == ["invalid-field"]
    assert store.apply("session.flags", {"session_id": "s"}) == ["invalid-field"]
    assert store.apply(
        "session.create", {"session_id": "c", "parent_id": "p", "parent_kind": "fork"}
    ) == ["invalid-field"]
    assert store.apply(
        "session.create", {"session_id": "c", "parent_id": "c", "parent_kind": "branch"}
    ) == ["self-parent"]
    assert store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_a_backfilled_session_starts_when_its_messages_say_and_date_filters_find_it(store):
    old = 1735689600.0  # 2025-01-01: months before the batch arrives
    batch = {
        "session_id": "back",
        "messages": [user("then", timestamp=old), assistant("reply", timestamp=old + 60)],
    }
    assert store.apply("messages.append", batch) == []
    with store.reader() as r:
        assert r.get_session("back")["started_at"] == old
        found = r.list_sessions(since=old - 1, until=old + 3600)
        assert [s["id"] for s in found] == ["back"]
        assert r.list_sessions(until=old - 1) == []
