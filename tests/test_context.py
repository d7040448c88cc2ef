"""System prompts and tool arrays stored once, referenced by sessions."""

from __future__ import annotations

import pytest
from semantics_helpers import Store, user

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "d" * 300,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for i in range(80)
]


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _count(store, sql, *args):
    return store.conn.execute(sql, args).fetchone()[0]


def test_shared_prompt_and_tools_are_stored_once_and_changes_are_tracked(store):
    for sid in ("a", "b", "c"):
        assert (
            store.apply(
                "session.create",
                {"session_id": sid, "system_prompt": "You are Quill's agent.", "tools": TOOLS},
            )
            == []
        )
    assert _count(store, "SELECT count(*) FROM blobs") == 2
    assert _count(store, "SELECT count(*) FROM session_context") == 6
    store.apply("messages.append", {"session_id": "a", "messages": [user("hi")]})
    # re-sending the same values changes nothing; a tool reload is a new reference
    store.apply("session.create", {"session_id": "a", "tools": TOOLS})
    reloaded = TOOLS[:10]
    store.apply("session.create", {"session_id": "a", "tools": reloaded})
    with store.reader() as r:
        ctx = r.context("a")
        assert ctx["system_prompt"] == "You are Quill's agent." and ctx["tools"] == reloaded
        assert [(h["kind"], h["after_message_id"] is not None) for h in ctx["history"]] == [
            ("system_prompt", False),
            ("tools", False),
            ("tools", True),
        ]
        assert r.context("b")["tools"] == TOOLS
        assert r.context("zzz") == {"system_prompt": None, "tools": None, "history": []}
    assert _count(store, "SELECT count(*) FROM blobs") == 3
    assert store.apply("session.create", {"session_id": "d", "tools": {"not": "a list"}}) == [
        "invalid-field"
    ]


def test_delete_keeps_shared_definitions_and_drops_the_last_reference(store):
    store.apply("session.create", {"session_id": "a", "system_prompt": "p", "tools": TOOLS})
    store.apply("session.create", {"session_id": "b", "tools": TOOLS})
    store.apply("sessions.delete", {"session_ids": ["a"]})
    assert _count(store, "SELECT count(*) FROM blobs") == 1  # the prompt only "a" used is gone
    with store.reader() as r:
        assert r.context("b")["tools"] == TOOLS
    store.apply("sessions.delete", {"session_ids": ["b"]})
    assert _count(store, "SELECT count(*) FROM blobs") == 0
    assert _count(store, "SELECT count(*) FROM session_context") == 0


def test_a_context_blob_is_stamped_with_the_ops_arrival_time_not_the_apply_time(store):
    """``created_at`` of a system-prompt / tools blob is the op's spool ``ts``, so a
    store rebuilt later from the spool writes the same row (not ``time.time()`` at apply)."""
    import time

    store.spool.append(
        "session.create",
        {"session_id": "a", "system_prompt": "You are Quill's agent.", "tools": TOOLS},
    )
    time.sleep(0.3)  # the apply happens measurably later than the append
    assert store.drain() == []
    ts = store.last_entries[0].record["ts"]
    stamps = [r[0] for r in store.conn.execute("SELECT created_at FROM blobs")]
    assert len(stamps) == 2 and all(s == ts for s in stamps), (stamps, ts)


def test_context_from_start_puts_a_first_value_before_messages_that_arrived_first(store):
    """A producer whose pieces arrive in any order (the OTLP endpoint: a tool span's result
    before the chat span carrying the instructions) asks for a session's first prompt and
    tools to hold from its start; a later change is still placed after the newest message,
    and without the flag a first value is placed after the newest message too."""
    for sid in ("a", "b"):
        assert store.apply("messages.append", {"session_id": sid, "messages": [user("hi")]}) == []
    flag = {"context_from_start": True}
    assert store.apply("session.create", {"session_id": "a", "system_prompt": "p", **flag}) == []
    assert store.apply("session.create", {"session_id": "b", "system_prompt": "p"}) == []
    assert store.apply("session.create", {"session_id": "a", "tools": TOOLS, **flag}) == []
    assert store.apply("session.create", {"session_id": "a", "system_prompt": "q", **flag}) == []
    with store.reader() as r:
        history = [(h["kind"], h["after_message_id"] is None) for h in r.context("a")["history"]]
        assert history == [("system_prompt", True), ("tools", True), ("system_prompt", False)]
        assert [h["after_message_id"] is None for h in r.context("b")["history"]] == [False]
    bad = {"session_id": "c", "system_prompt": "p", "context_from_start": "yes"}
    assert store.apply("session.create", bad) == ["invalid-field"]
