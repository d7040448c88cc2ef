"""Transcript semantics of writes: atomic appends and encodings, compaction, rewind and
replace. Real SQLite files, driven through the real spool and ``apply_chunk``."""

from __future__ import annotations

import json
import time

import pytest
from semantics_helpers import Store, assistant, call, tool, user
from transcript_helpers import _turns

from quill.spool.quarantine import Quarantine
from quill.store.apply.normalize import ROW_COLUMNS, message_row


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


# -- atomic appends and encodings -------------------------------------------------------------


def test_a_batch_with_one_invalid_row_lands_nothing_and_leaves_counters_unchanged(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(1)})
    with store.reader() as r:
        before = (r.figures(), r.get_session("s"))
    bad = _turns(2, "late") + [{"role": "user", "content": 42}]
    assert store.apply("messages.append", {"session_id": "s", "messages": bad}) == ["invalid-field"]
    with store.reader() as r:
        after_figs, after_sess = r.figures(), r.get_session("s")
    assert after_figs["messages"] == before[0]["messages"] == 2
    assert after_figs["fts_pending"] == before[0]["fts_pending"]
    assert after_figs["applied_batches"] == before[0]["applied_batches"]
    assert (
        (after_sess["message_count"], after_sess["unread"])
        == (before[1]["message_count"], before[1]["unread"])
        == (2, 2)
    )


def test_an_append_that_would_give_a_call_two_live_results_is_rejected_naming_the_id(store):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [assistant(None, tool_calls=[call("t1")]), tool("t1", "out")],
        },
    )
    before = store.rows("s")
    assert store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("again"), tool("t1", "second result")]},
    ) == ["duplicate-tool-result"]
    assert "'t1'" in store.last_rejects[0][1]
    assert store.rows("s") == before
    # Two results for one call inside a single batch are refused too.
    assert store.apply(
        "messages.append", {"session_id": "x", "messages": [tool("t9", "a"), tool("t9", "b")]}
    ) == ["duplicate-tool-result"]
    assert store.rows("x") == []


ENCODINGS = [None, 0, False, {}, "{}", "null", "[]", "", [], "0", '""']
#: tool_calls values that are neither empty nor calls: refused, never stored as "no calls".
UNINTERPRETABLE = [
    "notalist",
    "not json {",
    "1" * 5000,
    7,
    True,
    [1, 2],
    [{"id": "c1"}, "x"],
    '"text"',
    json.dumps(json.dumps(json.dumps([{"id": "c1"}]))),  # triple-encoded
]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_empty_tool_calls_are_stored_as_no_tool_calls(store, encoding):
    store.apply(
        "messages.append", {"session_id": "s", "messages": [assistant("x", tool_calls=encoding)]}
    )
    assert store.conn.execute("SELECT tool_calls FROM messages").fetchone()[0] is None


@pytest.mark.parametrize("value", UNINTERPRETABLE, ids=range(len(UNINTERPRETABLE)))
def test_uninterpretable_tool_calls_are_quarantined_with_their_reason_not_dropped(store, value):
    """Written to the spool raw (no precheck), such a value reaches the writer: the op is
    refused (``invalid-field``) and kept in the quarantine, bytes and reason, instead of
    being applied without its tool calls (acked, then found nowhere)."""
    msgs = [user("q"), assistant("x", tool_calls=value)]
    assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == [
        "invalid-field"
    ]
    assert store.rows("s") == []
    (entry,) = Quarantine(store.root / "spool").entries()
    assert entry["reason"] == "invalid-field" and "tool_calls" in entry["detail"]
    assert json.loads(entry["raw"])["data"]["messages"][1]["tool_calls"] == value


def test_batch_and_single_appends_store_identical_rows_for_every_tool_calls_encoding(store):
    calls = [call("c1"), call("c2", "read", '{"path": "a.py"}')]
    msgs = [assistant(f"m{i}", tool_calls=enc) for i, enc in enumerate(ENCODINGS)]
    msgs += [
        assistant("list", tool_calls=calls),
        assistant("string", tool_calls=json.dumps(calls)),
        assistant("double", tool_calls=json.dumps(json.dumps(calls))),
        assistant("single object", tool_calls=calls[0]),
    ]
    store.apply("messages.append", {"session_id": "batch", "messages": msgs})
    for m in msgs:
        store.apply("messages.append", {"session_id": "single", "messages": [m]})
    cols = (
        "role, content, parts, tool_calls, tool_call_id, tool_name, reasoning, finish_reason, "
        "extra, state"
    )
    rows = {
        sid: store.conn.execute(
            f"SELECT {cols} FROM messages WHERE session_id = ? ORDER BY id", (sid,)
        ).fetchall()
        for sid in ("batch", "single")
    }
    assert rows["batch"] == rows["single"]
    stored = [r[3] for r in rows["batch"]]
    assert stored[: len(ENCODINGS)] == [None] * len(ENCODINGS)
    assert [json.loads(s) for s in stored[len(ENCODINGS) : len(ENCODINGS) + 3]] == [
        calls
    ] * 3  # decoded once
    assert json.loads(stored[-1]) == [calls[0]]


def test_nuls_and_lone_surrogates_are_scrubbed_everywhere(store):
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("a\x00b\ud800c", vendor={"k\udfff": ["x\x00y"]})]},
    )
    with store.reader() as r:
        msg = r.get_messages("s", "model")[0]
    # The spool already replaces lone surrogates when it encodes; the store scrubs NULs.
    assert msg["content"].startswith("ab") and "\x00" not in json.dumps(msg, ensure_ascii=False)
    # The store's own normaliser scrubs both, nested fields included, even without the spool.
    row = message_row(user("a\x00b\ud800c", vendor={"k\udfff": ["x\x00y"]}), 1e9)
    cols = dict(zip(ROW_COLUMNS, row))
    assert cols["content"] == "ab\ufffdc"
    assert json.loads(cols["extra"]) == {"vendor": {"k\ufffd": ["xy"]}}


def test_timestamps_in_every_unit_are_read_right_and_unreadable_ones_refused(store):
    when = 1767225600  # 2026-01-01T00:00:00Z
    units = [when, when * 1000, when * 1_000_000, when * 1_000_000_000, str(when * 1000)]
    readable = [user(f"m{i}", timestamp=v) for i, v in enumerate(units)]
    readable += [
        user("iso", timestamp="2026-01-01T00:00:00Z"),
        user("none"),
        user("e", timestamp=""),
    ]
    assert store.apply("messages.append", {"session_id": "s", "messages": readable}) == []
    arrived = store.conn.execute("SELECT arrived_at FROM messages LIMIT 1").fetchone()[0]
    with store.reader() as r:
        got = r.get_messages("s", "audit")
    assert [m["ts"] for m in got] == [float(when)] * 6 + [arrived, arrived]
    for bad in (8.4e252, "not-a-timestamp", -5, True, 12.5, time.time() + 30 * 86400, [when]):
        batch = {"session_id": "t", "messages": [user("ok"), user("bad", timestamp=bad)]}
        assert store.apply("messages.append", batch) == ["invalid-field"], bad
    with store.reader() as r:
        assert r.get_session("t") is None  # the whole batch refused, nothing re-dated


# -- compaction ---------------------------------------------------------------------------------


def _compact_with_tail(store: Store) -> None:
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("plan the migration", id="u0"),
                assistant("here is a plan", id="a0"),
                user("what about the index", id="u1"),
                assistant("rebuild it with quokkas", id="a1"),
            ],
        },
    )
    store.apply(
        "messages.compact",
        {
            "session_id": "s",
            "tail_count": 2,
            "messages": [
                user("[summary] we planned a migration"),
                user("what about the index", id="u1"),
                assistant("rebuild it with quokkas", id="a1"),
            ],
        },
    )


@pytest.mark.parametrize("indexed", [False, True])
def test_a_word_only_in_the_carried_tail_gives_exactly_one_default_search_hit(store, indexed):
    _compact_with_tail(store)
    assert store.last_rejects == []
    if indexed:
        store.index()
    with store.reader() as r:
        hits = r.search("quokkas")
        audit_hits = r.search("quokkas", projection="audit")
        model = r.get_messages("s", "model")
    assert len(hits) == 1
    assert (
        hits[0]["message_id"] == store.ids("s", state="live")[-1]
    )  # the carried copy the model sees
    assert model[-1]["content"] == "rebuild it with quokkas"
    assert hits[0]["state"] == "live"
    assert sorted(h["state"] for h in audit_hits) == ["live", "superseded"]


def test_compaction_display_shows_each_carried_message_once_in_its_original_place(store):
    _compact_with_tail(store)
    with store.reader() as r:
        display = r.get_messages("s")
        model = r.get_messages("s", "model")
        audit = r.get_messages("s", "audit")
    assert [m["content"] for m in display] == [
        "plan the migration",
        "here is a plan",
        "what about the index",
        "rebuild it with quokkas",
        "[summary] we planned a migration",
    ]
    assert [m["state"] for m in display] == ["compacted", "compacted", "live", "live", "live"]
    assert [m["content"] for m in model] == [
        "[summary] we planned a migration",
        "what about the index",
        "rebuild it with quokkas",
    ]
    assert [m["state"] for m in audit] == [
        "compacted",
        "compacted",
        "superseded",
        "superseded",
        "live",
        "live",
        "live",
    ]
    assert "message_id" not in model[0] and model[1]["id"] == "u1"  # OpenAI shape, producer id kept


def test_rows_after_the_watermark_are_kept_once_after_the_compacted_set(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(2)})
    watermark = store.ids("s")[-1]
    store.apply(
        "messages.append", {"session_id": "s", "messages": [user("concurrent tail", id="late")]}
    )
    assert (
        store.apply(
            "messages.compact",
            {"session_id": "s", "watermark": watermark, "messages": [user("[summary]")]},
        )
        == []
    )
    with store.reader() as r:
        model = [m["content"] for m in r.get_messages("s", "model")]
        display = r.get_messages("s")
    assert model == ["[summary]", "concurrent tail"]
    assert [m["content"] for m in display].count("concurrent tail") == 1
    assert [m for m in display if m["content"] == "concurrent tail"][0]["state"] == "live"


def test_a_compaction_carrying_one_tool_result_twice_is_rejected_and_changes_nothing(store):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("go"),
                assistant(None, tool_calls=[call("t1")]),
                tool("t1", "result"),
            ],
        },
    )
    before = store.rows("s")
    assert store.apply(
        "messages.compact",
        {
            "session_id": "s",
            "messages": [
                user("[summary]"),
                assistant(None, tool_calls=[call("t1")]),
                tool("t1", "result"),
                tool("t1", "result"),
            ],
        },
    ) == ["duplicate-tool-result"]
    assert "'t1'" in store.last_rejects[0][1]
    assert store.rows("s") == before
    # Carrying the call and its result once is fine: one live result, two on disk.
    assert (
        store.apply(
            "messages.compact",
            {
                "session_id": "s",
                "tail_count": 2,
                "messages": [
                    user("[summary]"),
                    assistant(None, tool_calls=[call("t1")]),
                    tool("t1", "result"),
                ],
            },
        )
        == []
    )
    live = store.conn.execute(
        "SELECT count(*) FROM messages WHERE tool_call_id = 't1' AND state = 'live'"
    ).fetchone()[0]
    assert (live, len(store.ids("s", tool_call_id="t1"))) == (1, 2)


def test_a_tail_count_without_byte_identical_originals_is_refused(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(1)})
    before = store.rows("s")
    assert store.apply(
        "messages.compact",
        {
            "session_id": "s",
            "tail_count": 1,
            "messages": [user("[summary]"), assistant("edited answer")],
        },
    ) == ["tail-mismatch"]
    assert store.rows("s") == before


# -- rewind and replace -------------------------------------------------------------------------


def test_rewind_to_a_user_message_gives_exactly_the_specified_row_counts(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(3)})  # u0 a0 u1 a1 u2 a2
    target = store.ids("s", role="user")[1]
    assert store.apply("messages.rewind", {"session_id": "s", "message_id": target}) == []
    with store.reader() as r:
        counts = [len(r.get_messages("s", p)) for p in ("model", "display", "audit")]
        states = [m["state"] for m in r.get_messages("s", "audit")]
    assert counts == [2, 2, 6]
    assert states == ["live", "live", "rewound", "rewound", "rewound", "rewound"]
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 6  # nothing deleted


def test_rewind_to_a_non_user_message_is_refused_and_changes_nothing(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(2)})
    before = store.rows("s")
    assistant_id = store.ids("s", role="assistant")[0]
    assert store.apply("messages.rewind", {"session_id": "s", "message_id": assistant_id}) == [
        "not-a-user-message"
    ]
    assert store.apply("messages.rewind", {"session_id": "s", "user_turn": 3}) == ["no-such-turn"]
    assert store.apply("messages.rewind", {"session_id": "s", "user_turn": 0}) == ["no-such-turn"]
    assert store.apply("messages.rewind", {"session_id": "s", "message_id": 10**9}) == [
        "unknown-message"
    ]
    assert store.rows("s") == before


def test_rewind_by_user_turn_counts_from_the_end_when_negative(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(3)})
    assert store.apply("messages.rewind", {"session_id": "s", "user_turn": -1}) == []
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("s", "model")][-1] == "turn answer 1"
    assert store.apply("messages.rewind", {"session_id": "s", "user_turn": 1}) == []
    with store.reader() as r:
        assert r.get_messages("s", "model") == []


def test_rewind_after_compaction_keeps_the_summary_and_the_compacted_history(store):
    _compact_with_tail(store)
    carried_user = store.ids("s", state="live", role="user")[1]
    assert store.apply("messages.rewind", {"session_id": "s", "message_id": carried_user}) == []
    with store.reader() as r:
        model = [m["content"] for m in r.get_messages("s", "model")]
        display = [m["content"] for m in r.get_messages("s")]
        audit = r.get_messages("s", "audit")
    assert model == ["[summary] we planned a migration"]
    assert display == ["plan the migration", "here is a plan", "[summary] we planned a migration"]
    assert len(audit) == 7 and [m["state"] for m in audit].count("rewound") == 2


def test_replace_regenerates_from_a_message_and_keeps_the_dropped_rows_as_rewound(store):
    store.apply("messages.append", {"session_id": "s", "messages": _turns(2)})
    last_answer = store.ids("s", role="assistant")[-1]
    assert (
        store.apply(
            "messages.replace",
            {
                "session_id": "s",
                "from_message_id": last_answer,
                "messages": [assistant("a better answer", id="a1")],
            },
        )
        == []
    )
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("s", "model")][-1] == "a better answer"
        audit = r.get_messages("s", "audit")
    assert [m["state"] for m in audit] == ["live", "live", "live", "rewound", "live"]
    assert (
        store.apply("messages.replace", {"session_id": "s", "messages": [user("fresh start")]})
        == []
    )
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("s", "model")] == ["fresh start"]
