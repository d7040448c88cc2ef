"""Transcript structure survives import, on small synthetic files in the real
formats, imported through the real spool into a real SQLite store (ops/transfer/import_spool.py, the
writer's apply_chunk) and read back through the store's projections: sidechains and subagent
files become linked child sessions, compaction decides what the model view holds (rewound
branches: tests/test_importers_rewound_branches.py)."""

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

# -------------------------------------------------------------------- sidechains / subagents


def test_inline_sidechains_become_delegate_children_linked_to_the_task_call(store, tmp_path):
    recs = [
        cc("u1", "user", "build it", None),
        cc(
            "a1",
            "assistant",
            [
                {
                    "type": "tool_use",
                    "id": "toolu_T",
                    "name": "Task",
                    "input": {"description": "d", "prompt": "make the parser"},
                }
            ],
            "u1",
        ),
        cc("s1u", "user", "make the parser", None, isSidechain=True),
        cc("s1a", "assistant", [{"type": "text", "text": "parser made"}], "s1u", isSidechain=True),
        cc(
            "u2",
            "user",
            [{"type": "tool_result", "tool_use_id": "toolu_T", "content": "done: parser"}],
            "a1",
        ),
        cc("a2", "assistant", [{"type": "text", "text": "all done"}], "u2"),
    ]
    path = write_jsonl(tmp_path / "s1.jsonl", recs)
    store.imp(path)
    main = store.view("claude-code:s1", "audit")
    assert [m["id"] for m in main] == ["u1", "a1", "u2", "a2"]  # only its own turns
    child_id = "claude-code:s1:agent:s1u"
    child = store.session(child_id)
    assert (child["parent_id"], child["parent_kind"]) == ("claude-code:s1", "delegate")
    assert child["meta"]["parent_tool_call_id"] == "toolu_T"
    assert texts(store.view(child_id, "model")) == ["make the parser", "parser made"]


def test_sidechain_turns_an_older_import_put_in_the_parent_move_to_the_child(store, tmp_path):
    recs = [
        cc("u1", "user", "build it", None),
        cc("s1u", "user", "sub prompt", None, isSidechain=True),
        cc("s1a", "assistant", "sub answer", "s1u", isSidechain=True),
        cc("a1", "assistant", "built", "u1"),
    ]
    # what the pre-structure importer stored: every record a turn of the parent
    store.spool.append("session.create", {"session_id": "claude-code:s1", "source": "claude-code"})
    store.spool.append(
        "messages.append",
        {
            "session_id": "claude-code:s1",
            "messages": [
                {"id": r["uuid"], "role": r["type"], "content": r["message"]["content"]}
                for r in recs
            ],
        },
    )
    report = store.imp(write_jsonl(tmp_path / "old.jsonl", recs))
    assert (report.new, report.stored) == (2, 2)
    assert [m["id"] for m in store.view("claude-code:s1", "model")] == ["u1", "a1"]
    assert texts(store.view("claude-code:s1:agent:s1u", "model")) == ["sub prompt", "sub answer"]


def test_subagent_files_next_to_the_session_are_children_and_not_imported_twice(store, tmp_path):
    folder = tmp_path / "proj"
    main = write_jsonl(
        folder / "s2.jsonl",
        [
            cc("u1", "user", "go", None, sid="s2"),
            cc(
                "a1",
                "assistant",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_A",
                        "name": "Task",
                        "input": {"prompt": "sub job"},
                    }
                ],
                "u1",
                sid="s2",
            ),
            cc(
                "u2",
                "user",
                [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "sub done"}],
                "a1",
                sid="s2",
                toolUseResult={
                    "status": "completed",
                    "agentId": "ab12",
                    "content": [{"type": "text", "text": "sub done"}],
                },
            ),
        ],
    )
    write_jsonl(
        folder / "s2" / "subagents" / "agent-ab12.jsonl",
        [
            cc(
                "x1", "user", "sub job (reworded)", None, sid="s2", isSidechain=True, agentId="ab12"
            ),
            cc(
                "x2",
                "assistant",
                [{"type": "text", "text": "working"}],
                "x1",
                sid="s2",
                isSidechain=True,
                agentId="ab12",
            ),
        ],
    )
    from quill.ops.importers import iter_transcript_files

    assert list(iter_transcript_files([folder])) == [
        main
    ]  # the session file pulls its subagents in
    report = store.imp(main)
    assert sorted(report.sessions) == ["claude-code:s2", "claude-code:s2:agent:ab12"]
    child = store.session("claude-code:s2:agent:ab12")
    assert (child["parent_id"], child["parent_kind"]) == ("claude-code:s2", "delegate")
    assert child["meta"]["parent_tool_call_id"] == "toolu_A"  # linked by toolUseResult.agentId
    assert texts(store.view("claude-code:s2:agent:ab12", "model")) == [
        "sub job (reworded)",
        "working",
    ]
    assert [m["id"] for m in store.view("claude-code:s2", "audit")] == ["u1", "a1", "u2"]


def test_a_subagent_file_imported_alone_is_still_linked_to_its_task_call(tmp_path):
    folder = tmp_path / "proj"
    write_jsonl(
        folder / "s3.jsonl",
        [
            cc(
                "u1",
                "user",
                [{"type": "tool_result", "tool_use_id": "toolu_Z", "content": "ok"}],
                None,
                sid="s3",
                toolUseResult={"agentId": "zz"},
            )
        ],
    )
    agent = write_jsonl(
        folder / "s3" / "subagents" / "agent-zz.jsonl",
        [cc("x1", "user", "job", None, sid="s3", isSidechain=True, agentId="zz")],
    )
    (child,) = parse_file(agent).sessions  # the session file is read for the link, not imported
    assert child.session["session_id"] == "claude-code:s3:agent:zz"
    assert child.session["meta"]["parent_tool_call_id"] == "toolu_Z"


# -------------------------------------------------------------------- compaction


def test_claude_code_compact_boundary_and_summary_give_a_shorter_model_view(store, tmp_path):
    recs = [
        cc("u1", "user", "first question", None),
        cc("a1", "assistant", [{"type": "text", "text": "first answer"}], "u1"),
        {
            "parentUuid": None,
            "logicalParentUuid": "a1",
            "isSidechain": False,
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "sessionId": "s1",
            "uuid": "cb",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "compactMetadata": {"trigger": "manual"},
        },
        cc(
            "sum",
            "user",
            "This session is being continued... Summary: asked and answered",
            "cb",
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        ),
        cc("u2", "user", "second question", "sum"),
        cc("a2", "assistant", [{"type": "text", "text": "second"}], "u2"),
    ]
    store.imp(write_jsonl(tmp_path / "c.jsonl", recs))
    sid = "claude-code:s1"
    model = store.view(sid, "model")
    assert texts(model) == [
        "This session is being continued... Summary: asked and answered",
        "second question",
        "second",
    ]
    assert [m["state"] for m in store.view(sid, "audit")] == [
        "compacted",
        "compacted",
        "live",
        "live",
        "live",
    ]
    assert len(store.view(sid, "display")) == 5 > len(model)


def test_claude_code_1_0_compact_summary_without_boundary(store, tmp_path):
    recs = [
        cc("u1", "user", "q", None),
        cc("a1", "assistant", "a", "u1"),
        cc(
            "sum",
            "user",
            "continued from a previous conversation: summary",
            None,
            isCompactSummary=True,
        ),
        cc("u2", "user", "next", "sum"),
    ]
    store.imp(write_jsonl(tmp_path / "c.jsonl", recs))
    assert texts(store.view("claude-code:s1", "model")) == [
        "continued from a previous conversation: summary",
        "next",
    ]
    assert len(store.view("claude-code:s1", "display")) == 4


def test_codex_compacted_replacement_history_is_what_the_model_sees(store, tmp_path):
    recs = [
        codex_line("session_meta", {"id": "cx1", "cwd": "/w", "timestamp": "2026-01-01T00:00:00Z"}),
        codex_user("make a plan"),
        codex_assistant("plan: A then B"),
        codex_user("do A"),
        codex_assistant("A done"),
        codex_line(
            "compacted",
            {
                "message": "",
                "replacement_history": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "make a plan"}],
                    },
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "do A"}],
                    },
                    {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
                ],
            },
        ),
        codex_line("event_msg", {"type": "context_compacted"}),
        codex_user("now B"),
        codex_assistant("B done"),
    ]
    store.imp(write_jsonl(tmp_path / "rollout.jsonl", recs))
    sid = "codex:cx1"
    model = store.view(sid, "model")
    assert texts(model) == ["make a plan", "do A", None, "now B", "B done"]
    assert model[2]["encrypted_content"] == "opaque"
    display = store.view(sid, "display")
    assert texts(display) == [
        "make a plan",
        "plan: A then B",
        "do A",
        "A done",
        None,
        "now B",
        "B done",
    ]


def test_codex_compacted_without_history_uses_its_message(store, tmp_path):
    recs = [
        codex_line("session_meta", {"id": "cx2"}),
        codex_user("q"),
        codex_assistant("a"),
        codex_line("compacted", {"message": "summary of q and a"}),
        codex_user("q2"),
    ]
    store.imp(write_jsonl(tmp_path / "rollout.jsonl", recs))
    assert texts(store.view("codex:cx2", "model")) == ["summary of q and a", "q2"]
