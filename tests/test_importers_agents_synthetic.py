"""Aider chat history, OpenHands trajectories and SWE-agent ``.traj`` files: small synthetic
files written in each agent's own shape (aider/io.py's writer, OpenHands events, SWE-agent
trajectories), checked message by message."""

from __future__ import annotations

import json
from pathlib import Path

from importers_helpers import store  # noqa: F401 (a fixture, used by name)

from quill.ops.importers import detect_format, iter_transcript_files, parse_file
from quill.store import Reader

# aider's writer: header "\n# aider chat started at ...\n\n"; user_input "\n#### a  \n#### b  \n";
# tool_output "> x  \n" (a multi-line tool_output prefixes only its first line); ai_output
# "\n<reply>\n\n".
AIDER = (
    "\n# aider chat started at 2024-08-05 19:33:02\n\n"
    "> /usr/bin/aider --model gpt-4o  \n"
    "> Aider v0.47.2  \n"
    "> Model: gpt-4o with diff edit format  \n"
    "\n#### fix the bug  \n#### in utils.py  \n"
    "\nHere is the fix:\n\nutils.py\n```python\n<<<<<<< SEARCH\n> not a tool line\n"
    "#### not a user line\n=======\nx = 1\n>>>>>>> REPLACE\n```\n\n"
    "> Tokens: 5,244 sent, 604 received. Cost: $0.02 message, $0.02 session.  \n"
    "> Applied edit to utils.py  \n"
    "> ============ test session starts ====\nplatform linux -- Python 3.12  \n"
    "\n#### /run pytest  \n"
    "\n# aider chat started at 2024-08-06 10:00:00\n\n"
    "> Models: claude-3-5-sonnet with diff edit format  \n"
    "\n#### hi  \n"
    "\nStarting a reply\n```python\ndef f():\n\n"  # cut off by ^C: the fence stays open
    "> Tokens: 1.6k sent, 34 received.\n"
    "> Tokens: 194 sent, 9,474 cached, 7 received. Cost: $0.0001 message, $0.0001 session.  \n"
    "\n#### /exit  \n"
)


def test_aider_history_sessions_roles_and_usage(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(AIDER)
    assert detect_format(path) == "aider"
    pf = parse_file(path)
    assert pf.format == "aider" and pf.problems == []
    assert len(pf.sessions) == 2
    first, second = pf.sessions
    assert [(m["role"], m["content"]) for m in first.messages] == [
        (
            "tool",
            "/usr/bin/aider --model gpt-4o\nAider v0.47.2\nModel: gpt-4o with diff edit format",
        ),
        ("user", "fix the bug\nin utils.py"),
        (
            "assistant",
            "Here is the fix:\n\nutils.py\n```python\n<<<<<<< SEARCH\n> not a tool line\n"
            "#### not a user line\n=======\nx = 1\n>>>>>>> REPLACE\n```",
        ),
        (
            "tool",
            "Tokens: 5,244 sent, 604 received. Cost: $0.02 message, $0.02 session.\n"
            "Applied edit to utils.py\n============ test session starts ====\n"
            "platform linux -- Python 3.12",
        ),
        ("user", "/run pytest"),
    ]
    assert [m["id"] for m in first.messages] == ["0", "1", "2", "3", "4"]
    assert all(m.get("name") == "aider" for m in first.messages if m["role"] == "tool")
    s = first.session
    assert s["model"] == "gpt-4o" and s["started_at"] == 1722886382.0
    assert s["session_id"].startswith("aider:.aider.chat.history.md:")
    assert first.usage == [
        {
            "usage": {"prompt_tokens": 5244, "completion_tokens": 604},
            "task": "turn",
            "source": "aider",
            "ts": 1722886382.0,
            "response_id": f"{s['session_id']}:3:0",
            "model": "gpt-4o",
        }
    ]
    # the open fence of the cut-off reply ends where aider's next write starts
    assert [m["role"] for m in second.messages] == ["tool", "user", "assistant", "tool", "user"]
    assert second.messages[2]["content"] == "Starting a reply\n```python\ndef f():"
    assert second.session["model"] == "claude-3-5-sonnet"
    # rounded counts and cache figures are not recorded, only counted
    assert second.usage == [] and second.session["meta"]["usage_not_recorded"] == 2
    assert first.session["session_id"] != second.session["session_id"]


def test_aider_history_is_walked_other_markdown_is_not(tmp_path):
    (tmp_path / ".aider.chat.history.md").write_text(AIDER)
    (tmp_path / "README.md").write_text("# notes\n\n#### not a transcript\n")
    skipped: list[Path] = []
    assert list(iter_transcript_files([tmp_path], skipped)) == [tmp_path / ".aider.chat.history.md"]
    assert skipped == [tmp_path / "README.md"]
    assert detect_format(tmp_path / "README.md") is None


def _response(rid, calls, content, usage):
    return {
        "id": rid,
        "model": "claude-3-5-sonnet-20241022",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                        for cid, name, args in calls
                    ],
                }
            }
        ],
        "usage": usage,
    }


def openhands_events():
    usage = {
        "prompt_tokens": 3439,
        "completion_tokens": 104,
        "prompt_tokens_details": {"cached_tokens": 0},
        "cache_creation_input_tokens": 3435,
        "cache_read_input_tokens": 0,
    }
    calls = [("t1", "execute_bash", {"command": "ls"}), ("t2", "execute_bash", {"command": "pwd"})]
    resp = _response("chatcmpl-1", calls, "Let me look.", usage)

    def tcm(cid):
        return {
            "function_name": "execute_bash",
            "tool_call_id": cid,
            "model_response": resp,
            "total_calls_in_response": 2,
        }

    ts = "2025-01-20T20:29:3{}.000000"
    return [
        {"id": 0, "timestamp": ts.format(0), "source": "environment", "message": "",
         "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "init"}},
        {"id": 1, "timestamp": ts.format(1), "source": "agent", "message": "sys",
         "action": "system", "args": {"content": "You are OpenHands.", "tools": []}},
        {"id": 2, "timestamp": ts.format(2), "source": "user", "message": "do it",
         "action": "message", "args": {"content": "do it", "image_urls": []}},
        {"id": 3, "timestamp": ts.format(3), "source": "user", "message": "", "cause": 2,
         "observation": "null", "content": "", "extras": {}},
        {"id": 4, "timestamp": ts.format(4), "source": "agent", "message": "Running ls",
         "action": "run", "tool_call_metadata": tcm("t1"),
         "args": {"command": "ls", "thought": "Let me look."}},
        {"id": 5, "timestamp": ts.format(5), "source": "agent", "message": "Running pwd",
         "action": "run", "tool_call_metadata": tcm("t2"),
         "args": {"command": "pwd", "thought": "Let me look."}},
        {"id": 6, "timestamp": ts.format(6), "source": "agent", "message": "ran", "cause": 4,
         "observation": "run", "tool_call_metadata": tcm("t1"), "content": "a.py",
         "extras": {"metadata": {"exit_code": 0}}, "success": True},
        {"id": 7, "timestamp": ts.format(7), "source": "agent", "message": "ran", "cause": 5,
         "observation": "run", "content": "/w", "extras": {}},
        {"id": 8, "timestamp": ts.format(8), "source": "agent", "message": "bad",
         "observation": "error", "content": "Parameter 'command' is expected", "extras": {}},
        {"id": 9, "timestamp": ts.format(9), "source": "agent", "message": "Done.",
         "action": "message", "args": {"content": "Done."}},
    ]  # fmt: skip


def _check_openhands(s):
    assert [(m["id"], m["role"]) for m in s.messages] == [
        ("event:1", "system"),
        ("event:2", "user"),
        ("event:4", "assistant"),  # event 5 is the same response's second call: no message
        ("event:6", "tool"),
        ("event:7", "tool"),  # linked through `cause` to the action of call t2
        ("event:8", "user"),  # an error no action answers: user text to the model
        ("event:9", "assistant"),
    ]
    call = s.messages[2]
    assert call["content"] == "Let me look."
    assert [c["id"] for c in call["tool_calls"]] == ["t1", "t2"]
    assert (s.messages[3]["tool_call_id"], s.messages[4]["tool_call_id"]) == ("t1", "t2")
    assert s.messages[3]["name"] == "execute_bash"
    assert call["extra"]["response_id"] == "chatcmpl-1"
    assert call["extra"]["usage"] == {
        "input_tokens": 3439,
        "output_tokens": 104,
        "cache_read_tokens": 0,
        "cache_write_tokens": 3435,
        "reasoning_tokens": 0,
    }
    assert sum("usage" in m.get("extra", {}) for m in s.messages) == 1
    counts = s.session["meta"]["event_counts"]
    assert counts["observation:agent_state_changed"] == 1 and counts["action:run"] == 2
    assert s.session["model"] == "claude-3-5-sonnet-20241022"


def test_openhands_event_array(tmp_path):
    path = tmp_path / "traj.json"
    path.write_text(json.dumps(openhands_events(), indent=1))
    assert detect_format(path) == "openhands"
    pf = parse_file(path)
    assert pf.problems == [] and len(pf.sessions) == 1
    _check_openhands(pf.sessions[0])
    assert pf.sessions[0].session["session_id"].startswith("openhands:traj.json:")


def test_openhands_evaluation_output(tmp_path):
    path = tmp_path / "output.jsonl"
    recs = [
        {"instance_id": f"repo__x-{n}", "history": openhands_events(), "metrics": {}, "error": None}
        for n in (1, 2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert detect_format(path) == "openhands"
    pf = parse_file(path)
    assert pf.problems == [] and len(pf.sessions) == 2
    for s, rec in zip(pf.sessions, recs, strict=True):
        _check_openhands(s)
        assert s.session["title"] == rec["instance_id"]
    assert pf.sessions[0].session["session_id"] != pf.sessions[1].session["session_id"]


def swe_classic():
    return {
        "environment": "swe_main",
        "history": [
            {"role": "system", "content": "SETTING: ...", "agent": "primary"},
            {"role": "user", "content": "demo", "agent": "primary", "is_demo": True},
            {"role": "user", "content": "ISSUE: fix it", "agent": "primary"},
            {"role": "assistant", "content": "Look first.\n```\nls\n```", "agent": "primary",
             "thought": "Look first.\n", "action": "ls\n"},
            {"role": "user", "content": "a.py\n(Open file: n/a)", "agent": "primary"},
            {"role": "assistant", "content": "Done.\n```\nsubmit\n```", "agent": "primary",
             "thought": "Done.\n", "action": "submit\n"},
        ],
        "trajectory": [
            {"action": "ls\n", "observation": "a.py", "response": "", "thought": "", "state": "{}"},
            {"action": "submit\n", "observation": "diff", "response": "", "thought": "",
             "state": "{}"},
        ],
        "info": {"exit_status": "submitted", "model_stats": {
            "instance_cost": 1.27, "tokens_sent": 122612, "tokens_received": 1369,
            "api_calls": 12}},
    }  # fmt: skip


def test_swe_agent_classic_trajectory(tmp_path):
    path = tmp_path / "x.traj"
    path.write_text(json.dumps(swe_classic(), indent=2))
    assert detect_format(path) == "swe-agent"
    pf = parse_file(path)
    assert pf.problems == [] and len(pf.sessions) == 1
    s = pf.sessions[0]
    assert [m["role"] for m in s.messages] == [
        "system", "user", "user", "assistant", "tool", "assistant"
    ]  # fmt: skip
    assert s.messages[1]["extra"]["is_demo"] is True
    call = s.messages[3]["tool_calls"][0]
    assert call["id"] == "history:3:action" and call["function"]["name"] == "ls"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls\n"}
    assert s.messages[4]["tool_call_id"] == call["id"] and s.messages[4]["name"] == "ls"
    assert s.messages[4]["extra"]["swe_agent_role"] == "user"
    assert "reasoning" not in s.messages[3]  # the thought is the text already in the content
    assert s.usage == [
        {
            "usage": {"input_tokens": 122612, "output_tokens": 1369},
            "task": "turn",
            "source": "swe-agent",
            "response_id": f"{s.session['session_id']}:model_stats",
        }
    ]
    assert s.session["meta"]["model_stats"]["api_calls"] == 12


def test_swe_agent_function_calling_and_zero_stats(tmp_path):
    doc = {
        "history": [
            {"role": "system", "content": "S", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": "ISSUE", "agent": "main", "message_type": "observation"},
            {"role": "assistant", "content": "List.", "thought": "List.", "action": "ls -F",
             "agent": "main", "message_type": "action", "tool_calls": [
                 {"id": "call_1", "type": "function",
                  "function": {"name": "bash", "arguments": "{\"command\":\"ls -F\"}"}}]},
            {"role": "tool", "content": "src/", "agent": "main", "message_type": "observation",
             "tool_call_ids": ["call_1"]},
        ],
        "trajectory": [{"action": "ls -F", "observation": "src/", "response": "List.",
                        "thought": "List.", "state": {"working_dir": "/testbed"},
                        "execution_time": 0.1}],
        "info": {"model_stats": {"instance_cost": 0, "tokens_sent": 0, "tokens_received": 0,
                                 "api_calls": 1}},
        "replay_config": {"agent": {"model": {"name": "replay"}}},
    }  # fmt: skip
    path = tmp_path / "y.traj"
    path.write_text(json.dumps(doc))  # one line: sniffed as a one-line document
    assert detect_format(path) == "swe-agent"
    s = parse_file(path).sessions[0]
    assert [m["role"] for m in s.messages] == ["system", "user", "assistant", "tool"]
    assert s.messages[2]["tool_calls"][0]["id"] == "call_1"
    assert s.messages[3]["tool_call_id"] == "call_1" and s.messages[3]["name"] == "bash"
    assert s.messages[3]["extra"]["execution_time"] == 0.1
    assert s.usage == []  # a replay counts no tokens: nothing recorded, never zero
    assert s.session["model"] == "replay"


def test_reused_tool_call_ids_are_stored_unique(store, tmp_path):  # noqa: F811
    """A call id a session uses twice (SWE-agent replays, logs that number calls afresh each
    turn) would give two live results for one id, which the store refuses for the whole
    batch (duplicate-tool-result): each later use is stored as ``<id>#<n>``."""

    def turn(cmd):
        return [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": f"ran {cmd}"},
        ]  # fmt: skip

    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "go"}, *turn("ls"), *turn("pwd")]))
    traj = tmp_path / "replay.traj"
    doc = {
        "history": [{"role": "user", "content": "ISSUE", "agent": "main"}]
        + [
            {**m, "agent": "main", "tool_call_ids": [m["tool_call_id"]]} if m["role"] == "tool"
            else {**m, "agent": "main", "action": "x"}
            for m in turn("ls") + turn("pwd")
        ],
        "trajectory": [{"action": "x", "observation": "o"}] * 2,
        "info": {},
    }  # fmt: skip
    traj.write_text(json.dumps(doc))
    for path in (chat, traj):
        s = parse_file(path).sessions[0]
        calls = [c["id"] for m in s.messages for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in s.messages if m["role"] == "tool"]
        assert calls == results == ["call_0", "call_0#1"], path
        store.imp(path)  # drained: nothing quarantined
        with Reader(store.db) as r:
            assert r.get_session(s.session["session_id"])["message_count"] == len(s.messages)
