"""Rewound branches survive import, on small synthetic files in the real formats imported through
the real spool into a real SQLite store: an abandoned Claude Code exchange is rewound, parallel
tool results and split responses stay live, a Codex thread rollback rewinds its last turns."""

from __future__ import annotations

from importers_helpers import (  # noqa: F401 (store: fixture)
    cc,
    codex_assistant,
    codex_line,
    codex_user,
    store,
    texts,
    write_jsonl,
)

from quill.ops.importers import parse_file
from quill.store import Reader


def test_claude_code_abandoned_exchange_is_rewound(store, tmp_path):
    # 6 records: u1 -> a1 -> u2 -> a2 (abandoned), then the user rewinds to a1 and asks again.
    recs = [
        cc("u1", "user", "hello", None),
        cc("a1", "assistant", "hi", "u1"),
        cc("u2", "user", "wrong question", "a1"),
        cc("a2", "assistant", "wrong answer", "u2"),
        cc("u3", "user", "right question", "a1"),
        cc("a3", "assistant", "right answer", "u3"),
    ]
    store.imp(write_jsonl(tmp_path / "r.jsonl", recs))
    audit = store.view("claude-code:s1", "audit")
    assert [(m["id"], m["state"]) for m in audit] == [
        ("u1", "live"),
        ("a1", "live"),
        ("u2", "rewound"),
        ("a2", "rewound"),
        ("u3", "live"),
        ("a3", "live"),
    ]
    assert texts(store.view("claude-code:s1", "model")) == [
        "hello",
        "hi",
        "right question",
        "right answer",
    ]
    with Reader(store.root / "state.db") as r:
        assert r.search("wrong") == []


def test_parallel_tool_results_and_split_responses_stay_live(store, tmp_path):
    # One API response split over two records (same message.id), two tool_uses; the first
    # result hangs off the first record (off the main chain), as real Claude Code writes it.
    recs = [
        cc("u1", "user", "read two files", None),
        cc(
            "a1",
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a"}}],
            "u1",
            msg_id="m1",
        ),
        cc(
            "a2",
            "assistant",
            [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": "b"}}],
            "a1",
            msg_id="m1",
        ),
        cc("r1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "A"}], "a1"),
        cc("r2", "user", [{"type": "tool_result", "tool_use_id": "t2", "content": "B"}], "a2"),
        cc("a3", "assistant", "both read", "r2"),
    ]
    store.imp(write_jsonl(tmp_path / "p.jsonl", recs))
    assert {m["state"] for m in store.view("claude-code:s1", "audit")} == {"live"}


def test_codex_thread_rolled_back_rewinds_the_last_turns(store, tmp_path):
    recs = [
        codex_line("session_meta", {"id": "rb"}),
        codex_user("# AGENTS.md instructions for /w\n<INSTRUCTIONS>x</INSTRUCTIONS>"),
        codex_user("turn one"),
        codex_line("event_msg", {"type": "user_message", "message": "turn one"}),
        codex_assistant("answer one"),
        codex_user("turn two zebra"),
        codex_line("event_msg", {"type": "user_message", "message": "turn two zebra"}),
        codex_line(
            "response_item",
            {"type": "function_call", "name": "exec", "arguments": "{}", "call_id": "c1"},
        ),
        codex_line(
            "response_item",
            {"type": "function_call_output", "call_id": "c1", "output": "zebra output"},
        ),
        codex_assistant("answer two zebra"),
        codex_line("event_msg", {"type": "thread_rolled_back", "num_turns": 1}),
        codex_user("turn two again"),
        codex_line("event_msg", {"type": "user_message", "message": "turn two again"}),
        codex_assistant("answer two again"),
    ]
    store.imp(write_jsonl(tmp_path / "rollout.jsonl", recs))
    model = store.view("codex:rb", "model")
    assert texts(model)[1:] == ["turn one", "answer one", "turn two again", "answer two again"]
    assert sum(m["state"] == "rewound" for m in store.view("codex:rb", "audit")) == 4
    with Reader(store.root / "state.db") as r:
        assert r.search("zebra") == []
        assert len(r.search("zebra", projection="audit")) == 3


def test_codex_rollback_of_more_turns_than_known_is_reported(tmp_path):
    recs = [
        codex_line("session_meta", {"id": "rb2"}),
        codex_user("only turn"),
        codex_line("event_msg", {"type": "user_message", "message": "only turn"}),
        codex_assistant("answer"),
        codex_line("event_msg", {"type": "thread_rolled_back", "num_turns": 3}),
        codex_line("event_msg", {"type": "thread_rolled_back", "num_turns": 1}),
    ]
    pf = parse_file(write_jsonl(tmp_path / "rollout.jsonl", recs))
    assert pf.sessions[0].rewound == ["line:2", "line:4"]
    assert [(p.line, p.kind) for p in pf.problems] == [(5, "repaired"), (6, "skipped")]
