"""What real transcripts carry is kept right, on small synthetic files in the real formats
imported through the real spool into a real SQLite store: liveness of parallel tool calls on
the Claude Code ``parentUuid`` tree, user input carried by bookkeeping record types, and the
Codex rollout layouts, usage fields and turn boundaries older or newer versions write."""

from __future__ import annotations

from importers_helpers import (  # noqa: F401 (store: fixture)
    cc,
    store,
    texts,
    write_jsonl,
)

from quill.ops.importers import parse_file
from quill.store import Reader


def _tool_use(tid, name="Read"):
    return [{"type": "tool_use", "id": tid, "name": name, "input": {"p": tid}}]


def _tool_result(tid, text):
    return [{"type": "tool_result", "tool_use_id": tid, "content": text}]


# -------------------------------------------------------------------- parallel tool calls


def test_parallel_call_answered_first_off_the_second_record_stays_live(store, tmp_path):
    # One API response written as A1 -> A2 (same message.id). A2's result comes first (parent
    # A2), then A1's (parent A1), and the conversation continues from A1's result: A2 and its
    # result are off the active path but the model saw both.
    recs = [
        cc("u1", "user", "read two files", None),
        cc("a1", "assistant", _tool_use("t1"), "u1", msg_id="m1"),
        cc("a2", "assistant", _tool_use("t2"), "a1", msg_id="m1"),
        cc("r2", "user", _tool_result("t2", "quokka output"), "a2"),
        cc("r1", "user", _tool_result("t1", "first output"), "a1"),
        cc("a3", "assistant", "both read", "r1"),
    ]
    store.imp(write_jsonl(tmp_path / "p.jsonl", recs))
    audit = store.view("claude-code:s1", "audit")
    assert [(m["id"], m["state"]) for m in audit] == [
        (u, "live") for u in ("u1", "a1", "a2", "r2", "r1", "a3")
    ]
    model = store.view("claude-code:s1", "model")
    calls = {c["id"] for m in model for c in m.get("tool_calls") or []}
    answered = {m.get("tool_call_id") for m in model if m["role"] == "tool"}
    assert calls == answered == {"t1", "t2"}
    with Reader(store.root / "state.db") as r:
        assert len(r.search("quokka")) == 1


def test_three_parallel_calls_results_chained_off_each_other_stay_live(tmp_path):
    # A1 -> A2 -> A3 of one response; results R3 (parent A3), R2 (parent R3: answering a live
    # call although its parent is another result), R1 (parent A1), continued from R1.
    recs = [
        cc("u1", "user", "go", None),
        cc("a1", "assistant", _tool_use("t1"), "u1", msg_id="m1"),
        cc("a2", "assistant", _tool_use("t2"), "a1", msg_id="m1"),
        cc("a3", "assistant", _tool_use("t3"), "a2", msg_id="m1"),
        cc("r3", "user", _tool_result("t3", "c"), "a3"),
        cc("r2", "user", _tool_result("t2", "b"), "r3"),
        cc("r1", "user", _tool_result("t1", "a"), "a1"),
        cc("a4", "assistant", "done", "r1"),
    ]
    pf = parse_file(write_jsonl(tmp_path / "p3.jsonl", recs))
    assert pf.sessions[0].rewound == []


def test_results_of_an_abandoned_branch_stay_rewound(tmp_path):
    # The user rewinds to a0 and asks again: the tool call and result after the first ask
    # are on the abandoned branch, so they stay rewound.
    recs = [
        cc("u0", "user", "hello", None),
        cc("a0", "assistant", "hi", "u0"),
        cc("u1", "user", "go", "a0"),
        cc("a1", "assistant", _tool_use("t1"), "u1", msg_id="m1"),
        cc("r1", "user", _tool_result("t1", "a"), "a1"),
        cc("a2", "assistant", "did it", "r1"),
        cc("u2", "user", "go differently", "a0"),
        cc("a3", "assistant", "ok", "u2"),
    ]
    pf = parse_file(write_jsonl(tmp_path / "fork.jsonl", recs))
    assert sorted(pf.sessions[0].rewound) == ["a1", "a2", "r1", "u1"]
