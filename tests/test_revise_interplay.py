"""``revise`` (last copy wins) against the store's other rules, on both backends through the
real spool: a capture that saw early copies of a transcript ends as an import of the final
copy leaves it (tool-result names, usage), and revisions mix with order keys, compaction,
rewinds and refused ops in one writer chunk (the bulk path) with nothing else changed."""

from __future__ import annotations

from semantics_helpers import assistant, call, store, user  # noqa: F401 (store: fixture)

LIVE, FINAL = "s-live", "s-final"
COLS = "ext_id, role, quill_text(content), tool_calls, tool_name, ts, finish_reason, state"


def _rows(store, sid: str) -> list[tuple]:
    return store.conn.execute(
        f"SELECT {COLS} FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
    ).fetchall()


def _append(store, sid: str, messages: list[dict], **kw) -> list[str]:
    return store.apply("messages.append", {"session_id": sid, "messages": messages, **kw})


def _result(call_id: str, text: str | None, rid: str, ts: float = 1_700_000_002) -> dict:
    """A tool result as importers send it: no ``name`` (the writer names it from its call)."""
    return {"role": "tool", "tool_call_id": call_id, "content": text, "id": rid, "timestamp": ts}


def _capture_vs_import(store, copies: list[list[dict]]) -> None:
    """Each of ``copies`` appended with ``revise`` to LIVE (a watcher reading a file as it
    grows), the last one alone to FINAL (an import of the final file): same rows."""
    for msgs in copies:
        assert _append(store, LIVE, msgs, revise=True) == []
    assert _append(store, FINAL, copies[-1], revise=True) == []
    assert _rows(store, LIVE) == _rows(store, FINAL)


def test_a_result_is_named_after_its_calls_last_copy(store):
    """The call is first written with one tool name and then rewritten with another (an
    agent that records a call before it resolves the tool); its result, sent without a
    name, is named after the call's last copy, as an import of the final file names it."""
    first = [
        user("go", id="u1", timestamp=1_700_000_000),
        assistant(None, id="a1", tool_calls=[call("c1", "shell")], timestamp=1_700_000_001),
        _result("c1", "ran", "r1"),
    ]
    final = [
        first[0],
        assistant(None, id="a1", tool_calls=[call("c1", "run_shell")], timestamp=1_700_000_001),
        _result("c1", "ran", "r1"),
    ]
    _capture_vs_import(store, [first, final])
    assert _rows(store, LIVE)[2][4] == "run_shell"


def test_a_renamed_call_renames_its_result_when_only_the_call_is_sent_again(store):
    """An import sends only the records that changed: the result is not sent again, yet it
    ends named after the call's last copy, and search finds it by that name only."""
    first = [
        assistant(None, id="a1", tool_calls=[call("c1", "shell")], timestamp=1_700_000_001),
        _result("c1", "ran", "r1"),
    ]
    assert _append(store, LIVE, first, revise=True) == []
    store.index()
    later = [
        assistant(None, id="a1", tool_calls=[call("c1", "run_shell")], timestamp=1_700_000_001)
    ]
    assert _append(store, LIVE, later, revise=True) == []
    assert _append(store, FINAL, [later[0], first[1]], revise=True) == []
    store.index()
    assert _rows(store, LIVE) == _rows(store, FINAL)
    with store.reader() as r:
        assert {h["session_id"] for h in r.search("run_shell")} == {LIVE, FINAL}


def _usage(store, sid: str) -> list[tuple]:
    return store.conn.execute(
        "SELECT response_id, input_tokens, output_tokens FROM usage "
        "WHERE session_id = ? ORDER BY id",
        (sid,),
    ).fetchall()


def test_usage_of_a_revised_response_is_counted_once_with_its_last_figures(store):
    """Tokens arriving on a later copy (Gemini CLI writes them on a re-appended record):
    one usage row per response, holding the largest figures any copy gave, as the import of
    the final file records it."""

    def reply(out: int, **kw) -> dict:
        u = {"prompt_tokens": 10, "completion_tokens": out}
        return assistant("hi", id="a1", timestamp=1_700_000_001, usage=u, **kw)

    for named in (True, False):  # a response id is one model call store-wide: one per session
        live, final = f"{LIVE}{named}", f"{FINAL}{named}"
        for out in (3, 7, 7):
            kw = {"response_id": f"{live}-resp"} if named else {}
            assert _append(store, live, [reply(out, **kw)], revise=True) == []
        kw = {"response_id": f"{final}-resp"} if named else {}
        assert _append(store, final, [reply(7, **kw)], revise=True) == []
        got = [u[1:] for u in _usage(store, live)]
        assert got == [u[1:] for u in _usage(store, final)] == [(10, 7)], named


def test_revisions_order_keys_and_a_refused_op_in_one_chunk(store):
    """One writer chunk (the bulk path, falling back op by op at a revision) holding appends
    with order keys, revisions of the rows they placed, a refused op and a later append: the
    refused op alone is quarantined; the rows are those the ops give one chunk at a time."""
    sid = LIVE
    ops = [
        {
            "messages": [user("one", id="u1"), assistant("two", id="a1")],
            "order_keys": [[2_000, 0, 0], [3_000, 0, 0]],
        },
        {
            "messages": [user("zero", id="u0"), user("one", id="u1")],
            "order_keys": [[1_000, 0, 0], [500, 0, 0]],
        },  # u1 moves before u0
        {"messages": [user("one, revised", id="u1")], "revise": True},
        {
            "messages": [
                assistant(None, id="a2", tool_calls=[call("c1")]),
                {**_result("c1", "x", "r1")},
                {**_result("c1", "y", "r2")},
            ],
            "revise": True,
        },  # two live results for one call: refused whole
        {"messages": [user("two, revised", id="a1", role="assistant")], "revise": True},
        {"messages": [user("three", id="u3")]},
    ]
    for data in ops:
        store.spool.append("messages.append", {"session_id": sid, **data})
    assert store.drain() == ["duplicate-tool-result"]
    chunked = _rows(store, sid)
    assert [(r[0], r[2]) for r in chunked] == [
        ("u1", "one, revised"),
        ("u0", "zero"),
        ("a1", "two, revised"),
        ("u3", "three"),
    ]
    for data in ops:  # the same ops, one chunk each, into another session
        store.apply("messages.append", {"session_id": FINAL, **data})
    assert [r[:5] + r[6:] for r in _rows(store, FINAL)] == [r[:5] + r[6:] for r in chunked]
    with store.reader() as r:
        assert {h["session_id"] for h in r.search("revised")} == {sid, FINAL}


def test_a_v11_store_migrated_then_draining_revisions_spooled_before_the_upgrade(tmp_path):
    """A v11 SQLite store whose spool still holds revisions and keyed appends written before
    the upgrade: opened (migrated to v12) and drained, it holds the rows, batch numbers and
    search hits of a store that was v12 all along and drained the same spool."""
    import shutil

    from semantics_helpers import Store
    from test_batch_numbers import _named_rows, _sqlite_v11_copy

    live = Store(tmp_path / "live")
    first = [user("zebras at dawn", id="u1"), assistant(None, id="a1", tool_calls=[call("c1")])]
    assert _append(live, LIVE, first + [_result("c1", None, "r1")]) == []
    later = [
        {
            "session_id": LIVE,
            "revise": True,
            "messages": [
                user("quaggas at dusk", id="u1"),
                assistant(None, id="a1", tool_calls=[call("c1", "edit")]),
                _result("c1", "done", "r1"),
            ],
        },
        {
            "session_id": LIVE,
            "messages": [user("early", id="u0"), user("x", id="u1")],
            "order_keys": [[1, 0, 0], [1, 0, 1]],
        },
    ]
    for data in later:
        live.spool.append("messages.append", data)
    live.spool.close()
    live.backend.close()
    old = tmp_path / "old"
    old.mkdir()
    _sqlite_v11_copy(tmp_path / "live" / "state.db", old / "state.db")
    shutil.copytree(tmp_path / "live" / "spool", old / "spool")
    live = Store(tmp_path / "live")
    migrated = Store(old)  # opening migrates
    try:
        assert live.drain() == [] and migrated.drain() == []
        live.index()
        migrated.index()
        assert _named_rows(migrated.conn) == _named_rows(live.conn)
        assert [(r[0], r[4]) for r in _rows(migrated, LIVE)] == [
            ("u0", None),
            ("u1", None),
            ("a1", None),
            ("r1", "edit"),
        ]
        for s in (live, migrated):
            with s.reader() as r:
                assert [h["snippet"] for h in r.search("quaggas")] == ["quaggas at dusk"]
                assert r.search("zebras") == []
    finally:
        live.close()
        migrated.close()


def test_a_revision_of_a_compacted_message_rewrites_its_copy_and_search_finds_it_once(store):
    """A message compacted with its carried copy (same producer id): a later copy rewrites
    both rows; search finds the new text once and the old text nowhere, on both backends,
    indexed before or after the revision."""
    msgs = [user("zebras at dawn", id="u1"), assistant("gazelles graze", id="a1")]
    assert _append(store, LIVE, msgs, revise=True) == []
    compact = {
        "session_id": LIVE,
        "tail_count": 1,
        "messages": [user("summary so far"), assistant("gazelles graze", id="a1")],
    }
    assert store.apply("messages.compact", compact) == []
    store.index()
    assert _append(store, LIVE, [assistant("quaggas roam", id="a1")], revise=True) == []
    store.index()
    rows = [r for r in _rows(store, LIVE) if r[0] == "a1"]
    assert [(r[2], r[7]) for r in rows] == [
        ("quaggas roam", "superseded"),
        ("quaggas roam", "live"),
    ]
    with store.reader() as r:
        assert [h["snippet"] for h in r.search("quaggas")] == ["quaggas roam"]
        assert r.search("gazelles") == []
        assert len(r.search("quaggas", projection="audit")) == 2


def test_a_new_result_sent_with_the_copy_that_renames_its_call(store):
    """The result first arrives in the op whose copy renames its call (the call held, the
    result new): it is named after the call's last copy, as the import of the final file."""
    first = [assistant(None, id="a1", tool_calls=[call("c1", "shell")], timestamp=1_700_000_001)]
    final = [
        assistant(None, id="a1", tool_calls=[call("c1", "run_shell")], timestamp=1_700_000_001),
        _result("c1", "ran", "r1"),
    ]
    _capture_vs_import(store, [first, final])
    assert _rows(store, LIVE)[1][4] == "run_shell"


def test_a_later_copy_without_the_response_id_is_still_one_call(store):
    """The first copy names its response, a later copy does not (its record rewritten
    without it): the message's usage is still one row, with the largest figures."""
    u = {"prompt_tokens": 10, "completion_tokens": 3}
    first = assistant("hi", id="a1", timestamp=1_700_000_001, usage=u, response_id="r-once")
    later = assistant("hi!", id="a1", timestamp=1_700_000_001, usage={**u, "completion_tokens": 5})
    assert _append(store, LIVE, [first], revise=True) == []
    assert _append(store, LIVE, [later], revise=True) == []
    assert _usage(store, LIVE) == [("r-once", 10, 5)]


def test_usage_time_follows_a_later_copy_that_gives_the_message_time(store):
    """First copy without a timestamp (stored at its arrival), the last with one: the usage
    row's time (and day) should be the message's, as the import of the final file has it."""
    u = {"prompt_tokens": 10, "completion_tokens": 3}
    first = assistant("hi", id="a1", usage=u)
    final = assistant("hi", id="a1", timestamp=1_700_000_001, usage=u)
    _capture_vs_import(store, [[first], [final]])
    times = [
        store.conn.execute("SELECT ts, day FROM usage WHERE session_id = ?", (sid,)).fetchall()
        for sid in (LIVE, FINAL)
    ]
    assert times[0] == times[1]
