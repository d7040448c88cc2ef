"""The read CLI over a real fleet run: filters, a readable transcript, export = every row."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS


def _ops() -> str:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "grep", "arguments": '{"pattern": "config"}'},
    }
    ops = [
        {
            "op": "session.create",
            "data": {"session_id": "demo", "source": "cli", "title": "user_auth fix"},
        },
        {
            "op": "session.create",
            "data": {"session_id": "other", "source": "cli", "title": "userXauth notes"},
        },
        {
            "session_id": "demo",
            "messages": [
                {"role": "user", "content": "where is [the] config parsed?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": "c1",
                    "name": "grep",
                    "content": "ops/config.py:12: def load",
                },
                {"role": "assistant", "content": "In ops/config.py"},
            ],
        },
        {
            "op": "messages.compact",
            "data": {
                "session_id": "demo",
                "tail_count": 1,
                "messages": [
                    {"role": "user", "content": "[summary] asked about config"},
                    {"role": "assistant", "content": "In ops/config.py"},
                ],
            },
        },
    ]
    return "\n".join(json.dumps(o) for o in ops)


def test_read_commands_show_filter_search_and_export_one_display_transcript(quill):
    quill.run("push", input=_ops())
    quill.drain()
    assert [
        s["id"] for s in quill.json("sessions", "list", "--title", "user_auth")["sessions"]
    ] == ["demo"]
    shown = quill.json("sessions", "show", "demo")
    # `sessions export` writes Quill ops `quill import` takes back: every row with its state
    lines = quill.run("sessions", "export", "demo").stdout.splitlines()
    assert json.loads(lines[0])["quill_export"] == 1
    rows = [
        r
        for o in map(json.loads, lines[1:])
        if o["op"] == "messages.restore"
        for r in o["data"]["rows"]
    ]
    audit = quill.json("sessions", "show", "demo", "--view", "audit")["messages"]
    assert [(r["message"]["content"], r["state"]) for r in rows] == [
        (m["content"], m["state"]) for m in audit
    ]
    assert [m["content"] for m in shown["messages"]][-2:] == [
        "In ops/config.py",
        "[summary] asked about config",
    ]
    assert len(quill.json("sessions", "show", "demo", "--view", "model")["messages"]) == 2
    human = quill.run("sessions", "show", "demo").stdout
    for needle in (
        "user",
        "assistant",
        "→ grep",
        "tool (grep) ← c1",
        "ops/config.py:12",
        "[the]",
        "[compacted]",
    ):
        assert needle in human, needle
    hits = quill.json("search", "config.py")["hits"]
    assert [h["message_id"] for h in hits] == [
        shown["messages"][3]["message_id"],
        shown["messages"][2]["message_id"],
    ]
    assert hits[0]["after"] == shown["messages"][4]
    assert quill.run("sessions", "show", "nope", check=False).returncode == 3


@pytest.mark.corpus
def test_subagent_runs_are_left_out_of_the_default_session_list(quill):
    """A real Claude Code session that fanned out to 5 Task subagents listed as 6 sessions by
    default; the reference's pickers hide delegate runs (reached from their parent).
    ``--chains`` and the client's ``chains=True`` still list every session."""
    from quill import Client

    quill.run(
        "import",
        str(CORPUS / "claude-code" / "d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"),
    )
    quill.drain()
    parent = "claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    assert [s["id"] for s in quill.json("sessions", "list")["sessions"]] == [parent]
    every = quill.json("sessions", "list", "--chains")["sessions"]
    delegates = [s for s in every if s["parent_kind"] == "delegate"]
    assert len(every) == 6 and len(delegates) == 5
    assert {s["parent_id"] for s in delegates} == {parent}
    client = Client(quill.home)
    assert [s["id"] for s in client.sessions()] == [parent]
    assert len(client.sessions(chains=True)) == 6
