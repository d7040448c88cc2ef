"""Importers on small synthetic files: malformed and glued lines, giant lines, each format's
mapping details, damaged JSON arrays."""

from __future__ import annotations

import json
from pathlib import Path

from importers_helpers import all_messages, text_of

from quill.ops.importers import ParsedFile, detect_format, parse_file


def claude_rec(uuid, rtype, content, sid="s1", parent=None, ts="2026-01-01T00:00:00.000Z", **kw):
    msg = {"role": rtype, "content": content}
    if rtype == "assistant":
        msg.update({"id": "msg_" + uuid, "model": "claude-x"})
    return {
        "type": rtype,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": sid,
        "timestamp": ts,
        "cwd": "/w",
        "version": "2.0.0",
        "message": msg,
        **kw,
    }


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_malformed_line_in_the_middle(tmp_path):
    recs = [
        claude_rec("u1", "user", "hello"),
        claude_rec("a1", "assistant", [{"type": "text", "text": "hi"}]),
        '{"type": "user", "uuid": "broken", "message": {"role": ',
        claude_rec("u2", "user", "again"),
        claude_rec("a2", "assistant", [{"type": "text", "text": "ok"}]),
    ]
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    pf = parse_file(path)
    assert pf.format == "claude-code"
    assert [m["id"] for m in all_messages(pf)] == ["u1", "a1", "u2", "a2"]
    (p,) = pf.problems
    assert (p.path, p.line, p.kind) == (str(path), 3, "skipped") and "invalid JSON" in p.reason


def test_glued_objects_and_partial_lines(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(
        json.dumps(claude_rec("u1", "user", "a"))
        + json.dumps(claude_rec("a1", "assistant", "b"))
        + "\n\n   \n"
        + json.dumps(claude_rec("u2", "user", "c"))
        + '{"oops": \n'
    )
    pf = parse_file(path)
    assert [m["id"] for m in all_messages(pf)] == ["u1", "a1", "u2"]
    assert [(p.line, p.kind) for p in pf.problems] == [(1, "repaired"), (4, "repaired")]


def test_empty_and_unknown_files(tmp_path):
    cases = {
        "empty.jsonl": "",
        "blank.jsonl": "\n\n  \n",
        "text.txt": "hello world\n",
        "obj.json": '{"foo": 1, "bar": [1, 2]}',
        "ints.json": "[1, 2, 3]",
        "bad.json": "[{",
        "events.jsonl": '{"type": "session.start", "data": {}, "id": "1"}\n',
        "agent.jsonl": '{"role": "agent", "kind": "message", "content": "x", "raw": {}}\n',
    }
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        assert detect_format(p) is None, name
        assert parse_file(p) == ParsedFile(str(p), None, [], []), name


def test_giant_line(tmp_path):
    big = "x" * 600_000
    path = write_jsonl(
        tmp_path / "big.jsonl",
        [
            claude_rec("u1", "user", big),
            claude_rec("a1", "assistant", [{"type": "text", "text": "k"}]),
        ],
    )
    pf = parse_file(path)
    assert [len(text_of(m["content"])) for m in all_messages(pf)] == [600_000, 1]


def test_claude_code_mapping_details(tmp_path):
    recs = [
        {"type": "summary", "summary": "My title", "leafUuid": "a2"},
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        claude_rec(
            "a1",
            "assistant",
            [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": "f"}},
            ],
        ),
        claude_rec(
            "u1",
            "user",
            [
                {"type": "tool_result", "tool_use_id": "t1", "content": "out1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "err2"}],
                },
            ],
        ),
        {"type": "system", "subtype": "turn_duration", "uuid": "sys1", "sessionId": "s1"},
        {"type": "progress", "uuid": "p1", "sessionId": "s1", "data": {"type": "bash_progress"}},
        claude_rec(
            "u2",
            "user",
            [
                {"type": "text", "text": "see"},
                {"type": "tool_result", "tool_use_id": "t9", "content": "x"},
            ],
        ),
        claude_rec("a2", "assistant", "done", isSidechain=True),
        claude_rec("b1", "user", "other session", sid="s2"),
    ]
    pf = parse_file(write_jsonl(tmp_path / "c.jsonl", recs))
    s1, s2, child = pf.sessions
    assert s1.session["session_id"] == "claude-code:s1" and s1.session["title"] == "My title"
    assert s2.session["session_id"] == "claude-code:s2" and s2.session["title"] is None
    assert (child.session["parent_id"], child.session["parent_kind"]) == (
        "claude-code:s1",
        "delegate",
    )
    m = {x["id"]: x for x in s1.messages + child.messages}
    assert [x["id"] for x in s1.messages] == ["a1", "u1:0", "u1:1", "u2", "u2:0"]
    assert not s1.rewound  # roots without a parent in the file continue the thread, never fork it
    assert m["a1"]["reasoning"] == "hmm" and m["a1"]["content"] is None
    assert [c["function"]["name"] for c in m["a1"]["tool_calls"]] == ["Bash", "Read"]
    assert json.loads(m["a1"]["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    assert (m["u1:0"]["role"], m["u1:0"]["content"], m["u1:0"]["name"]) == ("tool", "out1", "Bash")
    assert (m["u1:1"]["content"], m["u1:1"]["name"], m["u1:1"]["extra"]["is_error"]) == (
        "err2",
        "Read",
        True,
    )
    assert m["u2"]["role"] == "user" and m["u2"]["content"] == "see"
    assert m["u2:0"]["tool_call_id"] == "t9" and "name" not in m["u2:0"]
    assert m["a2"]["extra"]["isSidechain"] is True and m["a2"]["extra"]["model"] == "claude-x"
    assert s1.session["started_at"] == 1767225600.0 and s1.session["model"] == "claude-x"


def test_codex_synthetic(tmp_path):
    def line(t, p):
        return {"timestamp": "2026-01-01T00:00:01.000Z", "type": t, "payload": p}

    recs = [
        line(
            "session_meta",
            {"id": "abc", "cwd": "/w", "cli_version": "0.1", "timestamp": "2026-01-01T00:00:00Z"},
        ),
        line("turn_context", {"turn_id": "T1", "model": "gpt-x"}),
        line(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ),
        line("event_msg", {"type": "user_message", "message": "hi"}),
        line(
            "response_item",
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        ),
        line(
            "response_item",
            {"type": "function_call", "name": "exec", "arguments": '{"cmd":"ls"}', "call_id": "c1"},
        ),
        line(
            "response_item",
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "input": "*** Begin",
                "call_id": "c2",
            },
        ),
        line("response_item", {"type": "function_call_output", "call_id": "c1", "output": "files"}),
        line("response_item", {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"}),
        line(
            "compacted",
            {
                "message": "",
                "replacement_history": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "hi"}],
                    }
                ],
            },
        ),
        line(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "phase": "final",
                "content": [{"type": "output_text", "text": "bye"}],
            },
        ),
        line("event_msg", {"type": "agent_message", "message": "bye"}),
    ]
    pf = parse_file(write_jsonl(tmp_path / "rollout.jsonl", recs))
    assert pf.format == "codex"
    (s,) = pf.sessions
    assert s.session["session_id"] == "codex:abc" and s.session["model"] == "gpt-x"
    ms = s.messages
    assert [m["id"] for m in ms] == ["line:3", "line:6", "line:7", "line:8", "line:9", "line:11"]
    assert ms[1]["reasoning"] == "think" and ms[1]["tool_calls"][0]["id"] == "c1"
    assert json.loads(ms[2]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin"}
    assert (ms[3]["role"], ms[3]["name"], ms[3]["content"]) == ("tool", "exec", "files")
    assert ms[4]["name"] == "apply_patch"
    assert ms[5]["extra"]["phase"] == "final" and ms[5]["extra"]["turn_id"] == "T1"
    assert s.session["meta"]["compactions"][0]["replacement_history_items"] == 1


def test_sharegpt_tool_calls(tmp_path):
    conv = [
        {"from": "system", "value": "tools <tool_call>{'name': <function-name>}</tool_call>"},
        {"from": "human", "value": "weather?"},
        {
            "from": "gpt",
            "value": '<think>need tools</think>\n<tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
            '{"name": "get_time", "arguments": {}}\n</tool_call>',
        },
        {
            "from": "tool",
            "value": '<tool_response>\n{"tool_call_id": "x9", "name": "get_time", '
            '"content": "noon"}\n</tool_response>\n<tool_response>\n'
            '{"tool_call_id": "x8", "name": "get_weather", "content": '
            '{"temp": 20}}\n</tool_response>',
        },
        {"from": "gpt", "value": "<think></think>Sunny, 20C at noon."},
    ]
    path = write_jsonl(
        tmp_path / "traj.jsonl",
        [
            {"conversations": conv, "timestamp": "2026-04-13T21:38:56.194348", "model": "m"},
            "not json at all",
        ],
    )
    pf = parse_file(path)
    assert pf.format == "sharegpt"
    assert [(p.line, p.kind) for p in pf.problems] == [(2, "skipped")]
    (s,) = pf.sessions
    assert (
        s.session["session_id"].startswith("sharegpt:traj.jsonl:")
        and s.legacy_id == "sharegpt:traj.jsonl:1"
    )
    ms = s.messages
    assert [m["id"] for m in ms] == ["0", "1", "2", "3:0", "3:1", "4"]
    assert ms[0]["content"] == conv[0]["value"]  # <tool_call> text in system prompt left alone
    call = ms[2]
    assert call["content"] is None and call["reasoning"] == "need tools"
    assert [c["id"] for c in call["tool_calls"]] == ["sharegpt_2_0", "sharegpt_2_1"]
    assert (ms[3]["tool_call_id"], ms[3]["name"], ms[3]["content"]) == (
        "sharegpt_2_1",
        "get_time",
        "noon",
    )
    assert (ms[4]["tool_call_id"], ms[4]["name"]) == ("sharegpt_2_0", "get_weather")
    assert (
        json.loads(ms[4]["content"]) == {"temp": 20}
        and ms[4]["extra"]["source_tool_call_id"] == "x8"
    )
    assert ms[5]["content"] == "Sunny, 20C at noon." and "reasoning" not in ms[5]
    assert parse_file(path).sessions == pf.sessions


def test_openai_chat_jsonl_variants(tmp_path):
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "ls?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "sh", "arguments": {"c": "ls"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a b"},
        {"role": "assistant", "content": "done", "reasoning_content": "easy"},
    ]
    per_line = parse_file(write_jsonl(tmp_path / "msgs.jsonl", msgs))
    assert per_line.format == "openai-chat"
    (s,) = per_line.sessions
    assert (
        s.session["session_id"].startswith("openai-chat:msgs.jsonl:")
        and s.legacy_id == "openai-chat:msgs.jsonl"
    )
    assert s.opening == ["0", "1"]  # the system prompt and the first user turn identify it
    assert [m["content"] for m in s.messages] == ["be brief", "ls?", None, "a b", "done"]
    assert json.loads(s.messages[2]["tool_calls"][0]["function"]["arguments"]) == {"c": "ls"}
    assert s.messages[3]["name"] == "sh" and s.messages[4]["reasoning"] == "easy"
    convs = parse_file(
        write_jsonl(
            tmp_path / "convs.jsonl", [{"messages": msgs}, {"messages": msgs[:2], "model": "m"}]
        )
    )
    assert [x.legacy_id for x in convs.sessions] == [
        "openai-chat:convs.jsonl:1",
        "openai-chat:convs.jsonl:2",
    ]
    assert len({x.session["session_id"] for x in convs.sessions}) == 2
    assert [len(x.messages) for x in convs.sessions] == [5, 2] and convs.sessions[1].session[
        "model"
    ] == "m"
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"messages": msgs}, indent=2))
    assert detect_format(obj) == "openai-chat" and len(parse_file(obj).sessions[0].messages) == 5


def test_damaged_pretty_printed_array(tmp_path):
    recs = [claude_rec(f"u{i}", "user", f"text {i}") for i in range(4)]
    text = json.dumps(recs, indent=2)
    lines = text.split("\n")
    damaged_at = next(n for n, ln in enumerate(lines, 1) if '"u1"' in ln)
    text = text.replace('"uuid": "u1",', '"uuid": "u1" BROKEN', 1)
    path = tmp_path / "chat.json"
    path.write_text(text)
    pf = parse_file(path)
    assert pf.format == "claude-code"
    assert [m["id"] for m in all_messages(pf)] == ["u0", "u2", "u3"]
    (p,) = pf.problems
    assert (
        p.kind == "skipped"
        and p.line is not None
        and p.line < damaged_at
        and "resumed at line" in p.reason
    )
    path.write_text(
        json.dumps(recs, indent=2)[:-30]
    )  # truncated: last element lost, array unclosed
    pf = parse_file(path)
    assert [m["id"] for m in all_messages(pf)] == ["u0", "u1", "u2"]
    assert [p.kind for p in pf.problems] == ["skipped"]
