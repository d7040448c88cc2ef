"""What real transcripts carry is kept right, on small synthetic files in the real formats
imported through the real spool into a real SQLite store: liveness of parallel tool calls on
the Claude Code ``parentUuid`` tree, user input carried by bookkeeping record types, and the
Codex rollout layouts, usage fields and turn boundaries older or newer versions write."""

from __future__ import annotations

import pytest
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


# -------------------------------------------------------------------- carried user input


def test_queued_command_attachment_is_a_user_message(store, tmp_path):
    # A prompt typed while the agent works is written only as an attachment record, in the
    # parentUuid chain; the next assistant record hangs off it.
    recs = [
        cc("u1", "user", "refactor the parser", None),
        cc("a1", "assistant", _tool_use("t1"), "u1", msg_id="m1"),
        cc("r1", "user", _tool_result("t1", "ok"), "a1"),
        {
            "parentUuid": "r1",
            "isSidechain": False,
            "type": "attachment",
            "attachment": {
                "type": "queued_command",
                "prompt": "and add a wombat test too",
                "commandMode": "prompt",
                "origin": {"kind": "human"},
            },
            "uuid": "q1",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "sessionId": "s1",
            "cwd": "/w",
            "version": "2.1.0",
        },
        cc("a2", "assistant", "adding the test", "q1"),
    ]
    store.imp(write_jsonl(tmp_path / "q.jsonl", recs))
    model = store.view("claude-code:s1", "model")
    assert [(m["id"], m["role"]) for m in model] == [
        ("u1", "user"),
        ("a1", "assistant"),
        ("r1", "tool"),
        ("q1", "user"),
        ("a2", "assistant"),
    ]
    assert model[3]["content"] == "and add a wombat test too"
    counts = store.session("claude-code:s1")["meta"]["record_counts"]
    assert (counts["attachment"], counts["carried:attachment:queued_command"]) == (1, 1)
    assert counts["user"] == 2
    with Reader(store.root / "state.db") as r:
        assert len(r.search("wombat")) == 1


def _progress(uuid, parent, agent, inner, call="task1"):
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "progress",
        "data": {
            "type": "agent_progress",
            "prompt": "find the numbat",
            "agentId": agent,
            "normalizedMessages": [],
            "message": inner,
        },
        "toolUseID": f"agent_msg_{uuid}",
        "parentToolUseID": call,
        "uuid": uuid,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "sessionId": "s1",
        "cwd": "/w",
        "version": "2.1.0",
    }


def _inner(uuid, role, content, msg_id=None):
    msg = {"role": role, "content": content}
    if role == "assistant":
        msg.update({"id": msg_id or "msg_" + uuid, "model": "claude-x", "type": "message"})
    return {"type": role, "message": msg, "uuid": uuid, "timestamp": "2026-01-01T00:00:01Z"}


def _task_session():
    """A main thread whose Task call ran a subagent carried only by agent_progress records."""
    task = [{"type": "tool_use", "id": "task1", "name": "Task", "input": {"prompt": "find"}}]
    return [
        cc("u1", "user", "delegate it", None),
        cc("a1", "assistant", task, "u1"),
        _progress("p1", "a1", "ag1", _inner("i1", "user", "find the numbat")),
        _progress("p2", "p1", "ag1", _inner("i2", "assistant", _tool_use("st1", "Grep"))),
        _progress("p3", "p2", "ag1", _inner("i3", "user", _tool_result("st1", "numbat.py"))),
        _progress("p3b", "p3", "ag1", _inner("i3", "user", _tool_result("st1", "numbat.py"))),
        _progress("p4", "p3b", "ag1", _inner("i4", "assistant", "it is in numbat.py")),
        cc("r1", "user", _tool_result("task1", "it is in numbat.py"), "a1"),
        cc("a2", "assistant", "found it", "r1"),
    ]


def test_subagent_run_carried_only_by_agent_progress_is_a_delegate_child(store, tmp_path):
    store.imp(write_jsonl(tmp_path / "s1.jsonl", _task_session()))
    child = store.session("claude-code:s1:agent:ag1")
    assert child["parent_id"] == "claude-code:s1"
    assert child["parent_kind"] == "delegate"
    assert child["meta"]["parent_tool_call_id"] == "task1"
    model = store.view("claude-code:s1:agent:ag1", "model")
    assert [(m["id"], m["role"]) for m in model] == [
        ("i1", "user"),
        ("i2", "assistant"),
        ("i3", "tool"),
        ("i4", "assistant"),
    ]
    assert [c["function"]["name"] for c in model[1]["tool_calls"]] == ["Grep"]
    parent = [m["id"] for m in store.view("claude-code:s1", "model")]
    assert parent == ["u1", "a1", "r1", "a2"]


def test_agent_progress_of_a_run_with_its_own_file_is_not_imported_twice(tmp_path):
    main = write_jsonl(tmp_path / "s1.jsonl", _task_session())
    sub = [
        cc("i1", "user", "find the numbat", None, isSidechain=True, agentId="ag1"),
        cc("i2", "assistant", _tool_use("st1", "Grep"), "i1", isSidechain=True, agentId="ag1"),
        cc("i3", "user", _tool_result("st1", "numbat.py"), "i2", isSidechain=True, agentId="ag1"),
        cc("i4", "assistant", "it is in numbat.py", "i3", isSidechain=True, agentId="ag1"),
    ]
    write_jsonl(tmp_path / "s1" / "subagents" / "agent-ag1.jsonl", sub)
    pf = parse_file(main)
    ids = {s.session["session_id"]: [m["id"] for m in s.messages] for s in pf.sessions}
    assert ids["claude-code:s1:agent:ag1"] == ["i1", "i2", "i3", "i4"]
    assert not [p for p in pf.problems if p.kind == "skipped"]


# -------------------------------------------------------------------- Codex layouts and usage

#: A rollout as Codex wrote it before the {timestamp, type, payload} envelope: a bare header,
#: state lines and bare response items without timestamps (openai/codex rollout.rs, 2025).
LEGACY_ROLLOUT = [
    {
        "id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e",
        "timestamp": "2025-05-07T17:24:21.123Z",
        "instructions": None,
        "git": {"commit_hash": "abc123", "branch": "main"},
    },
    {"record_type": "state"},
    {
        "type": "message",
        "id": None,
        "role": "user",
        "content": [{"type": "input_text", "text": "list the capybara files"}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
    {
        "type": "function_call",
        "id": "fc_1",
        "name": "shell",
        "arguments": '{"command":["ls"]}',
        "call_id": "call_1",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "capybara.md"},
    {"record_type": "state", "previous_response_id": "resp_1"},
    {
        "type": "message",
        "id": None,
        "role": "assistant",
        "content": [{"type": "output_text", "text": "one capybara file"}],
    },
]


def test_codex_rollout_before_the_envelope_format_is_imported(store, tmp_path):
    path = write_jsonl(tmp_path / "rollout-2025-05-07T17-24-21-5973b6c0.jsonl", LEGACY_ROLLOUT)
    assert parse_file(path).format == "codex"
    store.imp(path)
    sid = "codex:5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    session = store.session(sid)
    assert session["meta"]["git"] == {"commit_hash": "abc123", "branch": "main"}
    assert session["meta"]["counts"]["state"] == 2
    model = store.view(sid, "model")
    assert [m["role"] for m in model] == ["user", "assistant", "tool", "assistant"]
    assert model[1]["tool_calls"][0]["function"]["name"] == "shell"
    assert model[2]["tool_call_id"] == "call_1" and model[2]["content"] == "capybara.md"
    with Reader(store.root / "state.db") as r:
        assert len(r.search("capybara")) == 3


def _tokens(total, last=None):
    info = {"total_token_usage": total}
    if last is not None:
        info["last_token_usage"] = last
    return codex_line("event_msg", {"type": "token_count", "info": info})


def _u(inp, out):
    return {
        "input_tokens": inp,
        "cached_input_tokens": 0,
        "output_tokens": out,
        "reasoning_output_tokens": 0,
        "total_tokens": inp + out,
    }


def test_codex_token_count_with_only_the_running_total_records_each_call(tmp_path):
    recs = [
        codex_line("session_meta", {"id": "tk"}),
        codex_user("q"),
        _tokens(_u(100, 10)),
        codex_assistant("a"),
        _tokens(_u(100, 10)),  # a repeat (rate-limit update): no new call
        _tokens(_u(250, 30)),
        _tokens(_u(400, 45), last=_u(150, 15)),
    ]
    pf = parse_file(write_jsonl(tmp_path / "rollout.jsonl", recs))
    calls = [
        (u["usage"]["input_tokens"], u["usage"]["output_tokens"]) for u in pf.sessions[0].usage
    ]
    assert calls == [(100, 10), (150, 20), (150, 15)]


def test_codex_total_that_went_down_without_last_usage_is_reported_not_zero(tmp_path):
    recs = [
        codex_line("session_meta", {"id": "tk2"}),
        codex_user("q"),
        _tokens(_u(100, 10)),
        _tokens(_u(40, 5)),  # restarted count, no last_token_usage: unknown
    ]
    pf = parse_file(write_jsonl(tmp_path / "rollout.jsonl", recs))
    assert [u["usage"]["input_tokens"] for u in pf.sessions[0].usage] == [100]
    assert [(p.line, p.kind) for p in pf.problems] == [(4, "skipped")]


# -------------------------------------------------------------------- Codex turn boundaries


def _turn(turn_id):
    p = {"model": "gpt-x", "cwd": "/w"}
    if not turn_id.startswith("old"):  # older versions wrote turn_context without a turn_id
        p["turn_id"] = turn_id
    return codex_line("turn_context", p)


@pytest.mark.parametrize("ids", [("t1", "t2", "t3"), ("old1", "old2", "old3")])
def test_codex_rollback_uses_turn_context_when_a_turn_has_no_user_message_echo(
    store, tmp_path, ids
):
    t1, t2, t3 = ids
    recs = [
        codex_line("session_meta", {"id": "rb3"}),
        codex_user("# AGENTS.md instructions for /w\n<INSTRUCTIONS>x</INSTRUCTIONS>"),
        _turn(t1),
        codex_user("turn one"),
        codex_line("event_msg", {"type": "user_message", "message": "turn one"}),
        codex_assistant("answer one"),
        _turn(t2),
        codex_user("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"),
        codex_user("turn two platypus"),  # no user_message echo for this turn
        codex_assistant("answer two platypus"),
        codex_line("event_msg", {"type": "thread_rolled_back", "num_turns": 1}),
        _turn(t3),
        _turn(t3),  # written again within the turn: no new turn
        codex_user("turn two again"),
        codex_line("event_msg", {"type": "user_message", "message": "turn two again"}),
        codex_assistant("answer two again"),
    ]
    store.imp(write_jsonl(tmp_path / "rollout.jsonl", recs))
    model = texts(store.view("codex:rb3", "model"))
    assert model[1:] == [
        "turn one",
        "answer one",
        "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>",
        "turn two again",
        "answer two again",
    ]
    with Reader(store.root / "state.db") as r:
        assert r.search("platypus") == []
