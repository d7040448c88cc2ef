"""``messages.append`` with ``revise: true`` (last copy wins, store/apply/revise.py) on both
backends, through the real spool: a later copy of a held message rewrites its row in place
(search finds the new text, the old text is gone from the indexes), keeps the row's id,
place and state, keeps a time or a tool name the copy leaves out, changes nothing when the
copy is the same, and leaves a plain append first-copy-wins."""

from __future__ import annotations

import pytest
from semantics_helpers import assistant, call, store, tool, user  # noqa: F401 (store: fixture)

SID = "s-revise"


def _rows(store) -> list[tuple]:
    return store.conn.execute(
        "SELECT id, ext_id, role, quill_text(content), tool_calls, tool_name, ts, extra, state, "
        "seq "
        "FROM messages WHERE session_id = ? ORDER BY id",
        (SID,),
    ).fetchall()


def _append(store, messages: list[dict], revise: bool = True) -> list[str]:
    data = {"session_id": SID, "messages": messages}
    if revise:
        data["revise"] = True
    return store.apply("messages.append", data)


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "unindexed"])
def test_a_later_copy_rewrites_the_held_row_in_place(store, indexed):
    first = [
        user("list files", id="u1", timestamp=1_700_000_000),
        assistant(None, id="a1", tool_calls=[call("c1")], timestamp=1_700_000_001),
        {"role": "tool", "tool_call_id": "c1", "content": None, "id": "r1", "status": "running"},
        user("thanks", id="u2", timestamp=1_700_000_003),
    ]
    assert _append(store, first) == []
    assert store.apply("messages.rewind", {"session_id": SID, "ext_ids": ["u2"]}) == []
    if indexed:
        store.index()
    before = _rows(store)
    later = [
        assistant(None, id="a1", tool_calls=[call("c1"), call("c2")], timestamp=1_700_000_001),
        {"role": "tool", "tool_call_id": "c1", "content": "wombat.txt", "id": "r1"},
        user("thanks a lot", id="u2", timestamp=1_700_000_004),
    ]
    assert _append(store, later) == []
    store.index()
    after = _rows(store)
    assert [r[0] for r in after] == [r[0] for r in before]  # ids kept, no row added
    assert [(r[1], r[8], r[9]) for r in after] == [(r[1], r[8], r[9]) for r in before]
    a1, r1, u2 = after[1], after[2], after[3]
    assert '"c2"' in a1[4]
    assert r1[3] == "wombat.txt" and r1[5] == "bash"  # named after its call, as an append
    assert r1[6] == before[2][6]  # no timestamp in the copy: the stored time stays
    assert r1[7] is None  # the copy's extra replaces the old one ("status" gone)
    assert u2[3] == "thanks a lot" and u2[6] == 1_700_000_004 and u2[8] == "rewound"
    with store.reader() as r:
        assert [h["snippet"] for h in r.search("wombat")] == ["wombat.txt"]
        assert r.search("running") == []
        assert [h["state"] for h in r.search("thanks", projection="audit")] == ["rewound"]
    # the same copy again changes nothing
    assert _append(store, later + [user("more", id="u3")]) == []
    assert _rows(store)[:4] == after


def test_without_revise_the_first_copy_stays(store):
    assert _append(store, [user("first", id="u1")], revise=False) == []
    assert _append(store, [user("second", id="u1"), user("next", id="u2")], revise=False) == []
    assert [r[3] for r in _rows(store)] == ["first", "next"]


def test_a_revision_that_would_make_two_live_results_is_refused(store):
    msgs = [
        assistant(None, id="a1", tool_calls=[call("c1"), call("c2")]),
        {**tool("c1", "one"), "id": "r1"},
        {**tool("c2", "two"), "id": "r2"},
    ]
    assert _append(store, msgs) == []
    assert _append(store, [{**tool("c1", "two again"), "id": "r2"}]) == ["duplicate-tool-result"]
    assert [r[3] for r in _rows(store)] == [None, "one", "two"]


def test_revise_must_be_a_boolean(store):
    assert _append(store, [user("x", id="u1")], revise=False) == []
    bad = {"session_id": SID, "messages": [user("y", id="u1")], "revise": "yes"}
    assert store.apply("messages.append", bad) == ["invalid-field"]


def test_a_revision_inside_a_run_of_appends_applies_as_op_by_op(store):
    """Appends drained as one chunk go through the bulk path; a ``revise`` op in the run that
    sends a held id (held before the run or added by an earlier op of it) is applied as the
    op-at-a-time path applies it."""
    for msgs in (
        [user("one", id="u1")],
        [user("one, revised", id="u1"), user("two", id="u2")],
        [user("three", id="u3")],
    ):
        store.spool.append("messages.append", {"session_id": SID, "messages": msgs, "revise": True})
    assert store.drain() == []
    assert [(r[1], r[3]) for r in _rows(store)] == [
        ("u1", "one, revised"),
        ("u2", "two"),
        ("u3", "three"),
    ]


def test_session_create_with_revise_takes_the_meta_keys_it_sends(store):
    """An import reading a session again sends its meta with ``revise``: the keys sent win,
    keys only the store holds stay; a create without it fills only an empty meta."""
    import json

    def meta() -> dict:
        row = store.conn.execute("SELECT meta FROM sessions WHERE id = ?", (SID,)).fetchone()
        return json.loads(row[0]) if isinstance(row[0], str) else row[0]

    create = {"session_id": SID, "model": None, "meta": {"counts": 1, "file": "a"}}
    assert store.apply("session.create", create) == []
    assert store.apply("session.create", {**create, "meta": {"counts": 2}}) == []
    assert meta() == {"counts": 1, "file": "a"}
    later = {**create, "model": "m1", "meta": {"counts": 3, "parent_call": "c1"}, "revise": True}
    assert store.apply("session.create", later) == []
    assert meta() == {"counts": 3, "file": "a", "parent_call": "c1"}
    row = store.conn.execute("SELECT model FROM sessions WHERE id = ?", (SID,)).fetchone()
    assert row[0] == "m1"
    assert store.apply("session.create", {**later, "revise": "yes"}) == ["invalid-field"]
