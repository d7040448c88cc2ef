"""Gemini CLI ``session-*.jsonl`` logs, Gemini usage and GitHub Copilot CLI ``events.jsonl``,
imported through the real spool into a real SQLite store and read back: small synthetic files
written the way each agent writes them (Gemini: google-gemini/gemini-cli
``chatRecordingService.ts``), plus the real corpus files (docs/importers.md)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import CORPUS
from gemini_log_helpers import MAIN, SID, gem, tokens, ts, user, write_logs
from importers_helpers import store, write_jsonl  # noqa: F401 (store: fixture)

from quill.ops.importers import detect_format, iter_transcript_files, parse_file
from quill.store import Reader

GEMINI_JSON = "other/entireio-cli__gemini-cli-session-f7633853-6663-4dbb-bbf4-6159afa29df8.json"
COPILOT = "other/agentv__copilot-cli-events-10fb4666-56f0-4352-90fc-715caf95b418.jsonl"


def usage_rows(store, sid):
    with Reader(store.db) as r:
        return r.usage_totals(("session",), session_id=sid)


def test_gemini_log_last_copy_rewind_compaction_rollback_and_subagent(store, tmp_path):
    main, sub = write_logs(tmp_path)
    assert detect_format(main) == "gemini-cli" and detect_format(sub) == "gemini-cli"
    assert list(iter_transcript_files([tmp_path / "tmp"])) == [main]  # child comes with parent
    report = store.imp(main)
    sid = f"gemini-cli:{SID}"
    audit = store.view(sid, "audit")
    assert [(m["id"], m["role"], m["state"]) for m in audit] == [
        ("ctx", "user", "compacted"),
        ("u1", "user", "compacted"),
        ("g1", "assistant", "compacted"),
        ("g1:run_shell_command_1", "tool", "compacted"),
        ("g2", "assistant", "compacted"),
        ("u2", "user", "rewound"),
        ("g3", "assistant", "rewound"),
        ("g3:invoke_agent_2", "tool", "rewound"),
        ("g4", "assistant", "rewound"),
        ("u3", "user", "superseded"),  # copied verbatim into the compacted set (tail)
        ("g5", "assistant", "superseded"),
        ("c1", "user", "live"),
        ("c2", "assistant", "live"),
        ("u3#2", "user", "live"),
        ("g5#2", "assistant", "live"),
        ("u4", "user", "rewound"),
        ("g6", "assistant", "live"),
    ]
    g1 = next(m for m in audit if m["id"] == "g1")  # the last copy: the call with its result
    assert g1["reasoning"] == "Listing: Run ls."
    assert g1["tool_calls"][0]["id"] == "run_shell_command_1"
    result = next(m for m in audit if m["id"] == "g1:run_shell_command_1")
    assert (result["content"], result["tool_call_id"], result["name"]) == (
        "a\nb",
        "run_shell_command_1",
        "run_shell_command",
    )
    model = store.view(sid, "model")
    assert [m["content"] for m in model] == [
        "<state_snapshot>",
        "Got it.",
        "never mind; summarise",
        "Two files, a and b.",
        "Bye.",
    ]
    s = store.session(sid)
    assert s["title"] == "Listing files" and s["model"] == "gemini-3-flash-preview"
    assert s["meta"]["record_counts"]["message_copies"] == 2
    # one usage row per model call: g1..g6 (copies and compacted copies count once)
    (row,) = usage_rows(store, sid)
    assert row["calls"] == 6
    assert row["input_tokens"] == 100 + 120 + 150 + 170 + 300 + 90
    assert row["cache_read_tokens"] == 40
    assert row["output_tokens"] == 10 + 7 + 8 + 12 + 3 + 30 + 2  # thoughts billed as output
    assert row["reasoning_tokens"] == 7
    child = store.session("gemini-cli:sub-1")
    assert (child["parent_id"], child["parent_kind"]) == (sid, "delegate")
    assert child["meta"]["parent_tool_call_id"] == "invoke_agent_2"
    kid = store.view("gemini-cli:sub-1", "model")
    assert [(m["role"], m["content"]) for m in kid] == [
        ("user", "find tmp"),
        ("assistant", None),
        ("tool", "tmp1"),
        ("assistant", "found"),
    ]
    assert usage_rows(store, "gemini-cli:sub-1")[0]["calls"] == 2
    assert report.new > 0 and store.imp(main).new == 0  # a re-import adds nothing


def test_gemini_subagent_log_imported_alone_links_to_its_parent(store, tmp_path):
    main, sub = write_logs(tmp_path)
    store.imp(sub)
    child = store.session("gemini-cli:sub-1")
    assert (child["parent_id"], child["parent_kind"]) == (f"gemini-cli:{SID}", "delegate")
    assert child["meta"]["parent_tool_call_id"] == "invoke_agent_2"


def test_gemini_rewind_to_unknown_id_takes_back_everything(tmp_path):
    path = write_jsonl(
        tmp_path / "session-x.jsonl",
        [MAIN[0], user("u1", "a", 1), gem("g1", 2, "b"), {"$rewindTo": "zz"}, user("u2", "c", 3)],
    )
    (s,) = parse_file(path).sessions
    assert [m["id"] for m in s.messages] == ["u1", "g1", "u2"] and s.rewound == ["u1", "g1"]


def test_gemini_unreadable_tokens_keep_the_message_and_are_reported(store, tmp_path):
    path = write_jsonl(
        tmp_path / "session-t.jsonl",
        [MAIN[0], user("u1", "a", 1), gem("g1", 2, "b", tokens={"input": -3, "output": 1})],
    )
    pf = parse_file(path)
    assert [m["id"] for m in pf.sessions[0].messages] == ["u1", "g1"]
    assert [p.kind for p in pf.problems] == ["skipped"]
    assert "tokens.input" in pf.problems[0].reason
    store.imp(path)
    assert usage_rows(store, f"gemini-cli:{SID}") == [] or (
        usage_rows(store, f"gemini-cli:{SID}")[0]["calls"] == 0
    )


@pytest.fixture(scope="module")
def corpus():
    if not CORPUS.is_dir():
        pytest.skip(f"corpus absent: no transcripts at {CORPUS}")
    return CORPUS


def test_gemini_json_document_usage_is_counted(corpus, store):
    path = corpus / GEMINI_JSON
    doc = json.loads(path.read_text())
    calls = [m["tokens"] for m in doc["messages"] if m["type"] == "gemini"]
    billed = [t for t in calls if any(t.values())]  # an all-zero entry records nothing
    store.imp(path)
    (row,) = usage_rows(store, f"gemini-cli:{doc['sessionId']}")
    assert row["calls"] == len(billed) == 10
    assert row["input_tokens"] == sum(t["input"] + t.get("tool", 0) for t in billed)
    assert row["cache_read_tokens"] == sum(t["cached"] for t in billed)
    assert row["output_tokens"] == sum(t["output"] + t.get("thoughts", 0) for t in billed)
    assert row["reasoning_tokens"] == sum(t.get("thoughts", 0) for t in billed)


def test_copilot_cli_events_real_file(corpus, store):
    path = corpus / COPILOT
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    kinds = Counter(e["type"] for e in events)
    assert detect_format(path) == "copilot-cli"
    store.imp(path)
    sid = "copilot-cli:10fb4666-56f0-4352-90fc-715caf95b418"
    model = store.view(sid, "model")
    roles = Counter(m["role"] for m in model)
    assert roles == {
        "system": kinds["system.message"],
        "user": kinds["user.message"],
        "assistant": kinds["assistant.message"],
        "tool": kinds["tool.execution_complete"],
    }
    requests = [
        r for e in events if e["type"] == "assistant.message" for r in e["data"]["toolRequests"]
    ]
    calls = [c for m in model for c in m.get("tool_calls") or []]
    assert [c["id"] for c in calls] == [r["toolCallId"] for r in requests]
    names = {c["id"]: c["function"]["name"] for c in calls}
    results = [m for m in model if m["role"] == "tool"]
    assert all(names[m["tool_call_id"]] == m["name"] for m in results)
    done = {e["data"]["toolCallId"]: e["data"] for e in events if "complete" in e["type"]}
    assert sum(1 for m in results if not done[m["tool_call_id"]]["success"]) == 1
    with_reasoning = [e for e in events if e["data"].get("reasoningText")]
    assert sum(1 for m in model if m.get("reasoning")) == len(with_reasoning)
    s = store.session(sid)
    assert s["model"] == "claude-sonnet-4.6" and s["cwd"].endswith("/agentv")
    assert s["meta"]["record_counts"]["hook.start"] == kinds["hook.start"]


def test_copilot_cli_synthetic_events(store, tmp_path):
    def ev(n, kind, data):
        return {"type": kind, "data": data, "id": f"e{n}", "timestamp": ts(n), "parentId": None}

    path = write_jsonl(
        tmp_path / "events.jsonl",
        [
            ev(0, "session.start", {"sessionId": "cp1", "startTime": ts(0), "context": {}}),
            ev(1, "user.message", {"content": "run it", "transformedContent": "<x>run it"}),
            ev(2, "assistant.turn_start", {"turnId": "0"}),
            ev(
                3,
                "assistant.message",
                {
                    "content": "",
                    "reasoningText": "Need a shell.",
                    "toolRequests": [{"toolCallId": "t1", "name": "bash", "arguments": {"c": 1}}],
                },
            ),
            ev(4, "tool.execution_start", {"toolCallId": "t1", "toolName": "bash"}),
            ev(
                5,
                "tool.execution_complete",
                {"toolCallId": "t1", "success": False, "error": {"message": "denied"}},
            ),
            ev(6, "assistant.message", {"content": "It was denied.", "toolRequests": []}),
            ev(7, "abort", {"reason": "user"}),
        ],
    )
    store.imp(path)
    model = store.view("copilot-cli:cp1", "model")
    assert [(m["id"], m["role"], m["content"]) for m in model] == [
        ("e1", "user", "run it"),
        ("e3", "assistant", None),
        ("e5", "tool", "denied"),
        ("e6", "assistant", "It was denied."),
    ]
    assert model[1]["reasoning"] == "Need a shell."
    assert (model[2]["tool_call_id"], model[2]["name"]) == ("t1", "bash")
    counts = store.session("copilot-cli:cp1")["meta"]["record_counts"]
    assert counts["abort"] == 1 and counts["assistant.turn_start"] == 1


def test_gemini_tokens_that_arrive_after_an_import_are_recorded_by_the_next(store, tmp_path):
    head = [MAIN[0], user("u1", "a", 1), gem("g1", 2, "b")]  # the answer, tokens not yet in
    path = write_jsonl(tmp_path / "session-grow.jsonl", head)
    store.imp(path)
    assert usage_rows(store, f"gemini-cli:{SID}") == []
    write_jsonl(path, [*head, gem("g1", 2, "b", tokens=tokens(40, 4))])  # re-appended whole
    store.imp(path)
    (row,) = usage_rows(store, f"gemini-cli:{SID}")
    assert (row["calls"], row["input_tokens"], row["output_tokens"]) == (1, 40, 4)
    store.imp(path)
    assert usage_rows(store, f"gemini-cli:{SID}")[0]["calls"] == 1  # counted once
