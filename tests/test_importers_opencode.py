"""opencode session exports (``opencode export``) imported through the real spool into a real
SQLite store: real public exports (tests/samples/opencode, SOURCES.md there) with counts
taken independently from the files, and a small synthetic export in the same shape."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import REPO
from importers_helpers import store  # noqa: F401 (store: fixture)

from quill.ops.importers import detect_format, parse_file
from quill.store import Reader

SAMPLES = REPO / "tests" / "samples" / "opencode"


def usage_row(store, sid):
    with Reader(store.db) as r:
        rows = r.usage_totals(("session",), session_id=sid)
    return rows[0] if rows else {"calls": 0}


@pytest.mark.parametrize(
    "name",
    [
        "dark-factory__jolly-eagle__ses_39b5d713cffeRgAoxPIwS3Plus.json",
        "dark-factory__nimble-pixel__ses_39b4c1891ffezxPVc5OPmcqF33.json",
    ],
)
def test_opencode_real_export(store, name):
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"sample absent: {path}")
    doc = json.loads(path.read_text())
    parts = [(m["info"], p) for m in doc["messages"] for p in m["parts"]]
    tools = [p for _, p in parts if p["type"] == "tool"]
    assert detect_format(path) == "opencode"
    store.imp(path)
    sid = f"opencode:{doc['info']['id']}"
    audit = store.view(sid, "audit")
    roles = Counter(m["role"] for m in audit)
    assert roles == {
        "user": sum(m["info"]["role"] == "user" for m in doc["messages"]),
        "assistant": sum(m["info"]["role"] == "assistant" for m in doc["messages"]),
        "tool": sum(p["state"]["status"] in ("completed", "error") for p in tools),
    }
    assert [c["id"] for m in audit for c in m.get("tool_calls") or []] == [
        p["callID"] for p in tools
    ]
    results = {m["tool_call_id"]: m for m in audit if m["role"] == "tool"}
    for p in tools:
        assert results[p["callID"]]["name"] == p["tool"]
        assert results[p["callID"]]["content"] == p["state"]["output"]
    thought = {i["id"] for i, p in parts if p["type"] == "reasoning" and p["text"]}
    assert {m["id"] for m in audit if m.get("reasoning")} == thought
    steps = [p["tokens"] for _, p in parts if p["type"] == "step-finish"]
    billed = [t for t in steps if t["input"] or t["output"] or t["cache"]["read"]]
    row = usage_row(store, sid)
    assert row["calls"] == len(billed) > 0
    assert row["input_tokens"] == sum(t["input"] + t["cache"]["read"] for t in billed)
    assert row["cache_read_tokens"] == sum(t["cache"]["read"] for t in billed)
    assert row["output_tokens"] == sum(t["output"] for t in billed)
    assert row["reasoning_tokens"] == sum(t["reasoning"] for t in billed)
    s = store.session(sid)
    assert s["title"] == doc["info"]["title"] and s["cwd"] == doc["info"]["directory"]
    assert s["model"] == "gpt-5.3-codex"


def _part(kind, **kw):
    return {"type": kind, "id": f"prt_{kind}_{len(kw)}", **kw}


def test_opencode_synthetic_child_session_tool_error_and_reasoning_beside_output(store, tmp_path):
    tokens = {"input": 10, "output": 5, "reasoning": 7, "cache": {"read": 4, "write": 0}}
    tokens["total"] = 10 + 5 + 7 + 4  # reasoning counted beside the output
    doc = {
        "info": {
            "id": "ses_child",
            "parentID": "ses_parent",
            "title": "Explore (@explore subagent)",
            "directory": "/w",
            "version": "1.2.5",
            "time": {"created": 1771216037749, "updated": 1771216040000},
        },
        "messages": [
            {
                "info": {"id": "msg_u", "role": "user", "time": {"created": 1771216037749}},
                "parts": [_part("text", text="find the bug")],
            },
            {
                "info": {
                    "id": "msg_a",
                    "role": "assistant",
                    "modelID": "claude-x",
                    "providerID": "anthropic",
                    "time": {"created": 1771216038000, "completed": 1771216039000},
                },
                "parts": [
                    _part("step-start"),
                    _part("reasoning", text="Look at main."),
                    _part(
                        "tool",
                        callID="c1",
                        tool="read",
                        state={"status": "error", "input": {"p": "x"}, "error": "no such file"},
                    ),
                    _part("tool", callID="c2", tool="bash", state={"status": "running"}),
                    _part("step-finish", reason="tool-calls", tokens=tokens),
                ],
            },
        ],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))  # one line: a one-line document is detected too
    assert detect_format(path) == "opencode"
    store.imp(path)
    audit = store.view("opencode:ses_child", "audit")
    assert [(m["id"], m["role"], m["content"]) for m in audit] == [
        ("msg_u", "user", "find the bug"),
        ("msg_a", "assistant", None),
        ("msg_a:c1", "tool", "no such file"),
    ]
    assert [c["id"] for c in audit[1]["tool_calls"]] == ["c1", "c2"]
    assert audit[1]["reasoning"] == "Look at main." and audit[2]["name"] == "read"
    child = store.session("opencode:ses_child")
    assert (child["parent_id"], child["parent_kind"]) == ("opencode:ses_parent", "delegate")
    row = usage_row(store, "opencode:ses_child")
    assert (row["calls"], row["input_tokens"], row["output_tokens"]) == (1, 14, 12)
    assert row["reasoning_tokens"] == 7 and row["cache_read_tokens"] == 4


def test_opencode_unreadable_tokens_keep_the_message_and_are_reported(tmp_path):
    doc = {
        "info": {"id": "ses_t", "time": {"created": 1}},
        "messages": [
            {
                "info": {"id": "msg_a", "role": "assistant", "time": {"created": 1}},
                "parts": [
                    _part("text", text="hi"),
                    _part("step-finish", tokens={"input": "many", "output": 1}),
                ],
            }
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=2))
    pf = parse_file(path)
    assert [m["id"] for m in pf.sessions[0].messages] == ["msg_a"]
    assert pf.sessions[0].usage == []
    assert [p.kind for p in pf.problems] == ["skipped"] and "tokens.input" in pf.problems[0].reason
