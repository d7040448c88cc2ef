"""Transcript records survive import, on small synthetic files in the real formats,
imported through the real spool into a real SQLite store (ops/transfer/import_spool.py, the
writer's apply_chunk) and read back through the store's projections: format drift (unknown
record types, rejected files), titles, Gemini CLI sessions, re-import of a grown file, and
attachments stored once."""

from __future__ import annotations

import json

from importers_helpers import (  # noqa: F401 (store: fixture)
    GEMINI_SESSION,
    cc,
    codex_assistant,
    codex_line,
    codex_user,
    store,
    write_jsonl,
)

from quill.ops.importers import detect_format, parse_file

# -------------------------------------------------------------------- format drift


def test_claude_code_file_starting_with_bookkeeping_and_unknown_types_is_detected(store, tmp_path):
    head = [
        {"type": "summary", "summary": "Old title", "leafUuid": "zz"},
        {"type": "custom-title", "customTitle": "My session", "sessionId": "s1"},
        {
            "type": "file-history-snapshot",
            "messageId": "m",
            "snapshot": {},
            "isSnapshotUpdate": False,
        },
    ]
    head += [{"type": "brand-new-record", "sessionId": "s1", "data": i} for i in range(25)]
    recs = head + [cc("u1", "user", "hello", None), cc("a1", "assistant", "hi", "u1")]
    path = write_jsonl(tmp_path / "new.jsonl", recs)
    assert detect_format(path) == "claude-code"
    pf = parse_file(path)
    assert [m["id"] for m in pf.sessions[0].messages] == ["u1", "a1"]
    assert pf.sessions[0].session["meta"]["ignored_record_types"] == {"brand-new-record": 25}
    assert [(p.kind, p.reason) for p in pf.problems] == [
        ("ignored", "25 record(s) of unknown type 'brand-new-record' ignored")
    ]
    store.imp(path)
    assert store.session("claude-code:s1")["title"] == "My session"


def test_codex_rollout_with_new_record_types_is_detected_and_nothing_is_skipped(tmp_path):
    recs = [codex_line("brand_new_header", {"v": 2})] * 25 + [
        codex_line("session_meta", {"id": "nx"}),
        codex_line("some_future_item", {"x": 1}),
        codex_line("response_item", {"type": "future_item_kind", "x": 1}),
        codex_user("hello"),
        codex_assistant("hi"),
    ]
    path = write_jsonl(tmp_path / "rollout.jsonl", recs)
    assert detect_format(path) == "codex"
    pf = parse_file(path)
    assert [m["content"] for m in pf.sessions[0].messages] == ["hello", "hi"]
    assert pf.sessions[0].session["meta"]["counts"]["ignored_records"] == 26
    assert [(p.kind, p.reason) for p in pf.problems] == [
        ("ignored", "1 response item(s) of unknown type(s) future_item_kind ignored"),
        ("ignored", "26 record(s) of unknown type(s) ignored"),
    ]


def test_multi_file_import_with_a_rejected_file_exits_1_and_names_it(quill, tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [cc("u1", "user", "hello", None)])
    bad = tmp_path / "notes.txt"
    bad.write_text("just text\n")
    proc = quill.run("import", str(good), str(bad), check=False)
    assert proc.returncode == 1
    assert "notes.txt" in proc.stdout and "not recognised" in proc.stdout
    proc = quill.run("import", str(good), str(bad), "--json", check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert [(e["path"], e["skipped"]) for e in report] == [
        (str(good), None),
        (str(bad), "format not recognised"),
    ]


# -------------------------------------------------------------------- titles


def test_titles_custom_over_ai_over_summary_and_codex_thread_names(store, tmp_path):
    a = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"type": "summary", "summary": "summary title", "leafUuid": "u1"},
            {"type": "ai-title", "aiTitle": "AI title", "sessionId": "sa"},
            cc("u1", "user", "x", None, sid="sa"),
        ],
    )
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [
            cc("u1", "user", "x", None, sid="sb"),
            {"type": "ai-title", "aiTitle": "AI b", "sessionId": "sb"},
            {"type": "custom-title", "customTitle": "Custom b", "sessionId": "sb"},
        ],
    )
    c = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"type": "summary", "summary": "only summary", "leafUuid": "u1"},
            cc("u1", "user", "x", None, sid="sc"),
        ],
    )
    d = write_jsonl(
        tmp_path / "rollout.jsonl",
        [
            codex_line("session_meta", {"id": "cd"}),
            codex_user("x"),
            codex_line(
                "event_msg",
                {"type": "thread_name_updated", "thread_id": "cd", "thread_name": "first name"},
            ),
            codex_line(
                "event_msg",
                {"type": "thread_name_updated", "thread_id": "cd", "thread_name": "Codex name"},
            ),
        ],
    )
    e = write_jsonl(
        tmp_path / "e.jsonl",
        [
            {"type": "custom-title", "customTitle": "Custom b", "sessionId": "se"},
            cc("u1", "user", "x", None, sid="se"),
        ],
    )
    for p in (a, b, c, d, e):
        store.imp(p)
    assert store.session("claude-code:sa")["title"] == "AI title"
    assert store.session("claude-code:sb")["title"] == "Custom b"
    assert store.session("claude-code:sc")["title"] == "only summary"
    assert store.session("codex:cd")["title"] == "Codex name"
    # the existing conflict rule: the session is created, the clashing title kept in meta
    se = store.session("claude-code:se")
    assert se["title"] is None and se["meta"]["requested_title"] == "Custom b"


def test_a_title_added_to_a_grown_file_is_applied_on_reimport(store, tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [cc("u1", "user", "x", None)])
    store.imp(path)
    assert store.session("claude-code:s1")["title"] is None
    write_jsonl(
        path,
        [
            cc("u1", "user", "x", None),
            {"type": "custom-title", "customTitle": "Named later", "sessionId": "s1"},
        ],
    )
    store.imp(path)
    assert store.session("claude-code:s1")["title"] == "Named later"
    other = write_jsonl(tmp_path / "o.jsonl", [cc("u1", "user", "x", None, sid="o1")])
    store.imp(other)
    write_jsonl(
        other,
        [
            cc("u1", "user", "x", None, sid="o1"),
            {"type": "custom-title", "customTitle": "Named later", "sessionId": "o1"},
        ],
    )
    report = store.imp(other)  # the clash is reported, nothing is quarantined
    assert [p.reason for p in report.problems] == [
        "title 'Named later' of claude-code:o1 not applied: session claude-code:s1 holds it"
    ]
    assert store.session("claude-code:o1")["title"] is None


# -------------------------------------------------------------------- Gemini CLI

#: A Gemini CLI session file (one JSON document), as the CLI writes it; also the fuzz seed of
#: tests/test_importer_fuzz.py.


def test_gemini_cli_session(store, tmp_path):
    doc = json.loads(json.dumps(GEMINI_SESSION))
    path = tmp_path / "session-g1.jsonl"  # stored upstream under a .jsonl name
    path.write_text(json.dumps(doc, indent=2))
    assert detect_format(path) == "gemini-cli"
    store.imp(path)
    model = store.view("gemini-cli:g1", "model")
    assert [(m["role"], m["content"]) for m in model] == [
        ("user", "make a file"),
        ("assistant", "I will write it."),
        ("tool", "wrote docs/blue.md"),
        ("user", "thanks"),
    ]
    assert model[1]["reasoning"] == "Planning: write docs/blue.md"
    assert model[1]["tool_calls"][0]["id"] == "wf-1" and model[2]["tool_call_id"] == "wf-1"
    assert model[2]["name"] == "write_file"
    s = store.session("gemini-cli:g1")
    assert s["model"] == "gemini-2.5-flash" and s["meta"]["entry_counts"] == {
        "user": 2,
        "gemini": 1,
        "info": 1,
    }


# -------------------------------------------------------------------- re-import


def test_reimport_spools_nothing_and_a_grown_file_only_its_new_messages(store, tmp_path):
    recs = [
        cc("u1", "user", "hello", None),
        cc("a1", "assistant", "hi", "u1"),
        cc("u2", "user", "wrong question", "a1"),
        cc("a2", "assistant", "wrong answer", "u2"),
    ]
    path = write_jsonl(tmp_path / "g.jsonl", recs)
    first = store.imp(path)
    assert (first.new, first.stored) == (4, 0)
    size = sum(f.stat().st_size for f in (store.root / "spool").rglob("*") if f.is_file())
    again = store.imp(path)
    assert (again.new, again.stored) == (0, 4)
    assert sum(f.stat().st_size for f in (store.root / "spool").rglob("*") if f.is_file()) == size
    # the file grows: the user rewound to a1 and asked again - u2/a2 become rewound
    write_jsonl(
        path,
        recs + [cc("u3", "user", "right question", "a1"), cc("a3", "assistant", "right", "u3")],
    )
    grown = store.imp(path)
    assert (grown.new, grown.stored) == (2, 4)
    assert [(m["id"], m["state"]) for m in store.view("claude-code:s1", "audit")] == [
        ("u1", "live"),
        ("a1", "live"),
        ("u2", "rewound"),
        ("a2", "rewound"),
        ("u3", "live"),
        ("a3", "live"),
    ]


def test_reimport_through_the_cli_reports_0_new(quill, tmp_path):
    path = write_jsonl(
        tmp_path / "g.jsonl", [cc("u1", "user", "hello", None), cc("a1", "assistant", "hi", "u1")]
    )
    assert "spooled 2 new message(s)" in quill.run("import", str(path)).stdout
    quill.drain()
    out = quill.run("import", str(path)).stdout
    assert "spooled 0 new message(s) from 1 file(s) (2 already stored)" in " ".join(out.split())
    assert quill.json("import", str(path))[0]["new"] == 0


# -------------------------------------------------------------------- attachments stored once


def _b64(seed: int, n: int = 3000) -> str:
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(str(seed).encode()).digest() * (n // 32)).decode()


def test_claude_code_images_and_documents_are_stored_once_and_read_back_intact(store, tmp_path):
    imgs = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(i)}}
        for i in range(5)
    ]
    doc = {
        "type": "document",
        "title": "spec.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": _b64(99)},
    }
    recs = [
        cc("u1", "user", [{"type": "text", "text": "read this"}, doc], None),
        cc(
            "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Shot", "input": {}}], "u1"
        ),
        cc(
            "r1",
            "user",
            [{"type": "tool_result", "tool_use_id": "t1", "content": imgs}],
            "a1",
            toolUseResult={"content": imgs},
        ),  # Claude Code's second copy of every image
        cc("u2", "user", [{"type": "text", "text": "again"}, imgs[0]], "r1"),
    ]
    store.imp(write_jsonl(tmp_path / "img.jsonl", recs))
    from quill.store.apply import blobs

    assert blobs.stats(store.conn)["blobs"] == 6  # 5 images (12 copies) + 1 document
    model = store.view("claude-code:s1", "model")
    assert model[0]["content"][1] == {
        "type": "file",
        "file": {"file_data": f"data:application/pdf;base64,{_b64(99)}", "filename": "spec.pdf"},
    }
    assert [p["image_url"]["url"] for p in model[2]["content"]] == [
        f"data:image/png;base64,{_b64(i)}" for i in range(5)
    ]
    assert store.view("claude-code:s1", "audit")[2]["toolUseResult"] == {"content": imgs}
    assert "read this" == model[0]["content"][0]["text"]


def test_gemini_inline_data_and_codex_input_files_are_kept_as_parts(store, tmp_path):
    doc = {
        "sessionId": "g2",
        "messages": [
            {
                "id": "m1",
                "type": "user",
                "content": [
                    {"text": "look"},
                    {"inlineData": {"mimeType": "image/png", "data": _b64(1)}},
                ],
            },
            {"id": "m2", "type": "gemini", "content": "seen"},
        ],
    }
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(doc))
    store.imp(gpath)
    assert store.view("gemini-cli:g2", "model")[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(1)}"}},
    ]
    recs = [
        codex_line("session_meta", {"id": "cf"}),
        codex_line(
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "summarise"},
                    {
                        "type": "input_file",
                        "filename": "a.pdf",
                        "file_data": f"data:application/pdf;base64,{_b64(2)}",
                    },
                ],
            },
        ),
    ]
    store.imp(write_jsonl(tmp_path / "rollout.jsonl", recs))
    part = store.view("codex:cf", "model")[0]["content"][1]
    assert part == {
        "type": "file",
        "file": {"file_data": f"data:application/pdf;base64,{_b64(2)}", "filename": "a.pdf"},
    }
    from quill.store.apply import blobs

    assert blobs.stats(store.conn)["blobs"] == 2
