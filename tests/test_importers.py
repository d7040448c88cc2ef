"""Tests for ops.importers on the real corpus (../shared/corpus) and synthetic files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ops.importers import (
    ImportedSession, ParsedFile, Problem, detect_format, iter_transcript_files, parse_file)
from ops.importers.jsonlines import iter_jsonl

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
GLUED = "claude-code/entireio-cli__130d7b7e-5801-4345-9bd6-f32fd9b8429b.jsonl"

# file -> (sessions, messages, problems); cross-checked below by independent counting
EXPECTED = {
    "claude-code/agentv__acc53d32-5580-4747-9273-e2acff2ba566.jsonl": (1, 33, 0),
    "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl": (1, 29, 0),
    "claude-code/d-kimuson__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": (1, 29, 0),
    "claude-code/d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": (1, 437, 0),
    "claude-code/drmaciver__coverage-test-fix__c64cc478-3430-40fe-8e9c-4ee9986e9754.jsonl": (1, 37, 0),
    "claude-code/drmaciver__python-to-rust-port__c7d3d95c-57f0-4359-8f4b-926a9bef5a3f.jsonl": (1, 96, 0),
    "claude-code/entireio-cli__08940314-9e93-46b1-a598-06bada65ed55.jsonl": (1, 983, 0),
    GLUED: (1, 150, 2),  # glued line 128 (repaired) + re-written record at line 131 (skipped)
    "claude-code/llm-guard__logs-chat.json": (1, 359, 0),
    "codex/agentv__rollout-019ed836-b1da-78f1-8a0c-e598363d10f4.jsonl": (1, 56, 0),
    "codex/agentv__rollout-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl": (1, 464, 0),
    "codex/agentv__rollout-019f36b8-7808-7b53-b256-85144c802798.jsonl": (1, 806, 0),
    "openai-chat/mini-swe-agent__github_issue.traj.json": (1, 22, 0),
    "sharegpt/hermeswith__trajectory_samples.jsonl": (13, 39, 0),
}


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


def corpus_files(sub: str) -> list[Path]:
    return sorted((CORPUS / sub).glob("*")) if CORPUS.is_dir() else []


def plain_records(path: Path) -> list[tuple[int | None, dict]]:
    """Independent reader: JSON array, or JSONL decoded with a raw_decode loop."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return [(None, r) for r in json.loads(text)]
    out, dec = [], json.JSONDecoder()
    for n, line in enumerate(text.split("\n"), 1):
        pos, line = 0, line.strip()
        while pos < len(line):
            obj, pos = dec.raw_decode(line, pos)
            out.append((n, obj))
    return out


def text_of(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def all_messages(pf: ParsedFile) -> list[dict]:
    return [m for s in pf.sessions for m in s.messages]


# --------------------------------------------------------------------- corpus

def test_expected_table_covers_supported_corpus(corpus):
    supported = {str(p.relative_to(corpus)) for sub in ("claude-code", "codex", "sharegpt", "openai-chat")
                 for p in corpus_files(sub)}
    assert supported == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_counts_table(corpus, rel):
    pf = parse_file(corpus / rel)
    assert pf.format == rel.split("/")[0]
    assert pf.path == str(corpus / rel)
    got = (len(pf.sessions), len(all_messages(pf)), len(pf.problems))
    assert got == EXPECTED[rel]
    for s in pf.sessions:
        assert isinstance(s, ImportedSession)
        assert s.session["source"] == pf.format
        assert set(s.session) == {"session_id", "source", "title", "model", "cwd", "started_at", "meta"}
        ids = [m["id"] for m in s.messages]
        assert len(ids) == len(set(ids)), "message ids unique within a session"
        for m in s.messages:
            assert m["role"] in {"system", "developer", "user", "assistant", "tool"}
            assert isinstance(m["id"], str)
            for call in m.get("tool_calls") or []:
                assert call["type"] == "function" and isinstance(call["id"], str)
                json.loads(call["function"]["arguments"])  # always a JSON string


@pytest.mark.parametrize("path", corpus_files("claude-code"), ids=lambda p: p.name)
def test_claude_code_independent_counts(corpus, path):
    records = plain_records(path)
    seen: dict[str, set] = {}
    sessions, messages, tool_results, tool_uses, thinking_records = set(), 0, 0, 0, 0
    for _, r in records:
        if r.get("type") not in ("user", "assistant"):
            continue
        key = json.dumps(r["message"].get("content"), sort_keys=True)
        if key in seen.setdefault(r["uuid"], set()):
            continue  # the same record re-written by a resumed session
        seen[r["uuid"]].add(key)
        sessions.add(r["sessionId"])
        content = r["message"]["content"]
        blocks = content if isinstance(content, list) else []
        n_results = sum(1 for b in blocks if b.get("type") == "tool_result")
        tool_results += n_results
        tool_uses += sum(1 for b in blocks if b.get("type") == "tool_use")
        messages += n_results + (1 if n_results == 0 or n_results < len(blocks) else 0)
    pf = parse_file(path)
    msgs = all_messages(pf)
    assert {s.session["session_id"] for s in pf.sessions} == {f"claude-code:{s}" for s in sessions}
    assert len(msgs) == messages
    assert sum(1 for m in msgs if m["role"] == "tool") == tool_results
    assert sum(len(m.get("tool_calls") or []) for m in msgs) == tool_uses
    calls = {c["id"]: c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []}
    for m in msgs:
        if m["role"] == "tool" and m["tool_call_id"] in calls:
            assert m["name"] == calls[m["tool_call_id"]]
        assert m.get("timestamp") is None or isinstance(m["timestamp"], float)
    # no system/progress/snapshot record became a message
    kept = {m["extra"]["uuid"] for m in msgs}
    for _, r in records:
        if r.get("type") in ("system", "progress"):
            assert r["uuid"] not in kept


def test_claude_code_tool_results_keep_their_text(corpus):
    path = corpus / "claude-code/d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    by_id = {m["id"]: m for m in all_messages(parse_file(path))}
    checked = 0
    for _, r in plain_records(path):
        if r.get("type") != "user" or not isinstance(r["message"]["content"], list):
            continue
        for b in r["message"]["content"]:
            if b.get("type") == "tool_result" and isinstance(b.get("content"), str) and b["content"]:
                assert text_of(by_id[r["uuid"]]["content"]) == b["content"]
                checked += 1
    assert checked > 100


def test_claude_code_title_and_meta(corpus):
    pf = parse_file(corpus / "claude-code/entireio-cli__08940314-9e93-46b1-a598-06bada65ed55.jsonl")
    s = pf.sessions[0].session
    assert s["title"] == "Session ID stability: midnight crossing bug fix"  # the last summary
    assert len(s["meta"]["summaries"]) == 3
    assert s["meta"]["compactions"][0]["logicalParentUuid"]
    assert s["model"] and s["model"] != "<synthetic>"
    assert s["cwd"] and isinstance(s["started_at"], float)
    first = parse_file(corpus / "claude-code/d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    assert first.sessions[0].session["title"] == "Empty Repo Setup: CLAUDE.md Foundation Created"
    arr = parse_file(corpus / "claude-code/llm-guard__logs-chat.json")
    assert arr.sessions[0].session["meta"]["variant"] == "json-array"
    assert arr.sessions[0].session["meta"]["record_counts"]["system"] == 372


def test_claude_code_images_kept_as_parts(corpus):
    pf = parse_file(corpus / "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl")
    with_images = [m for m in all_messages(pf) if isinstance(m["content"], list)]
    assert with_images
    parts = with_images[0]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"]
    assert sum(1 for p in parts if p["type"] == "image_url") == 2
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_glued_line_128(corpus):
    path = corpus / GLUED
    problems: list[Problem] = []
    at_128 = [obj for n, obj in iter_jsonl(path, problems) if n == 128]
    assert [o["type"] for o in at_128] == ["assistant", "summary"]
    assert problems == [Problem(str(path), 128, "repaired", problems[0].reason)]
    pf = parse_file(path)
    kinds = {(p.line, p.kind) for p in pf.problems}
    assert (128, "repaired") in kinds and (131, "skipped") in kinds
    ids = {m["id"] for m in all_messages(pf)}
    assert at_128[0]["uuid"] in ids
    summaries = pf.sessions[0].session["meta"]["summaries"]
    assert {"summary": at_128[1]["summary"], "leafUuid": at_128[1]["leafUuid"], "line": 128} in summaries
    assert pf.sessions[0].session["meta"]["cli_versions"] == ["2.1.7", "2.1.12"]


@pytest.mark.parametrize("path", corpus_files("codex"), ids=lambda p: p.name)
def test_codex_independent_counts(corpus, path):
    recs = [r for _, r in plain_records(path)]
    items = Counter(r["payload"]["type"] for r in recs if r["type"] == "response_item")
    expected = sum(items[t] for t in ("message", "function_call", "function_call_output",
                                      "custom_tool_call", "custom_tool_call_output", "web_search_call"))
    pf = parse_file(path)
    (sess,) = pf.sessions
    assert sess.session["session_id"] == "codex:" + recs[0]["payload"]["id"]
    msgs = sess.messages
    assert len(msgs) == expected
    # the response_item stream only: event_msg agent_message/user_message are not duplicated
    assert sum(1 for m in msgs if m["role"] == "assistant" and m["content"]) == sum(
        1 for r in recs if r["type"] == "response_item" and r["payload"]["type"] == "message"
        and r["payload"]["role"] == "assistant")
    assert sum(1 for m in msgs if m["role"] == "tool") == (
        items["function_call_output"] + items["custom_tool_call_output"])
    compacted = [r for r in recs if r["type"] == "compacted"]
    assert len(sess.session["meta"].get("compactions", [])) == len(compacted)
    calls = {c["id"]: c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []}
    for m in msgs:
        assert m["id"].startswith("line:") and isinstance(m["timestamp"], float)
        if m["role"] == "tool":
            assert m["name"] == calls[m["tool_call_id"]]
    assert sess.session["model"] and sess.session["cwd"] and sess.session["meta"]["cli_version"]


def test_codex_compaction_history_not_replayed(corpus):
    path = corpus / "codex/agentv__rollout-019f36b8-7808-7b53-b256-85144c802798.jsonl"
    pf = parse_file(path)
    comps = pf.sessions[0].session["meta"]["compactions"]
    assert [c["replacement_history_items"] for c in comps] == [7, 12]
    lines = {int(m["id"].split(":")[1]) for m in pf.sessions[0].messages}
    assert not lines & {c["line"] for c in comps}
    images = [m for m in pf.sessions[0].messages if isinstance(m["content"], list)]
    assert len(images) == 4 and all(m["role"] == "tool" for m in images)


def test_sharegpt_corpus(corpus):
    path = corpus / "sharegpt/hermeswith__trajectory_samples.jsonl"
    recs = plain_records(path)
    pf = parse_file(path)
    assert len(pf.sessions) == len(recs) == 13
    assert len(all_messages(pf)) == sum(len(r["conversations"]) for _, r in recs)
    for (line, rec), s in zip(recs, pf.sessions):
        assert s.session["session_id"] == f"sharegpt:{path.name}:{line}"
        assert s.session["model"] == rec["model"]
        assert [m["role"] for m in s.messages] == [
            {"system": "system", "human": "user", "gpt": "assistant"}[t["from"]] for t in rec["conversations"]]
        for m in s.messages:
            assert m["timestamp"] == s.session["started_at"] is not None
            if m["role"] == "assistant":
                assert "<think>" not in (m["content"] or "") and m.get("reasoning")


def test_openai_chat_corpus(corpus):
    path = corpus / "openai-chat/mini-swe-agent__github_issue.traj.json"
    arr = json.loads(path.read_text())
    pf = parse_file(path)
    (s,) = pf.sessions
    assert s.session["session_id"] == f"openai-chat:{path.name}"
    assert [(m["role"], m["content"]) for m in s.messages] == [(a["role"], a["content"]) for a in arr]
    assert [m["id"] for m in s.messages] == [str(i) for i in range(len(arr))]


@pytest.mark.parametrize("path", corpus_files("other"), ids=lambda p: p.name)
def test_other_formats_are_not_detected(corpus, path):
    assert detect_format(path) is None
    assert parse_file(path) == ParsedFile(str(path), None, [], [])


def test_reparse_is_stable_and_ids_unique(corpus):
    seen_sessions: set[str] = set()
    for rel in sorted(EXPECTED):
        a, b = parse_file(corpus / rel), parse_file(corpus / rel)
        ids_a = [(s.session["session_id"], [m["id"] for m in s.messages]) for s in a.sessions]
        ids_b = [(s.session["session_id"], [m["id"] for m in s.messages]) for s in b.sessions]
        assert ids_a == ids_b
        assert a.sessions == b.sessions and a.problems == b.problems
        for sid, _ in ids_a:
            assert sid not in seen_sessions
            seen_sessions.add(sid)


def test_iter_transcript_files(corpus, tmp_path):
    files = list(iter_transcript_files([corpus]))
    assert files == sorted(files)
    assert not any(f.suffix == ".md" for f in files)
    assert len(files) == 20
    explicit = corpus / "FORMATS.md"
    assert list(iter_transcript_files([explicit])) == [explicit]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.jsonl").write_text("")
    (tmp_path / "a.json").write_text("")
    (tmp_path / "notes.md").write_text("")
    assert list(iter_transcript_files([tmp_path])) == [tmp_path / "a.json", tmp_path / "b" / "x.jsonl"]


# ------------------------------------------------------------------ synthetic

def claude_rec(uuid, rtype, content, sid="s1", parent=None, ts="2026-01-01T00:00:00.000Z", **kw):
    msg = {"role": rtype, "content": content}
    if rtype == "assistant":
        msg.update({"id": "msg_" + uuid, "model": "claude-x"})
    return {"type": rtype, "uuid": uuid, "parentUuid": parent, "sessionId": sid, "timestamp": ts,
            "cwd": "/w", "version": "2.0.0", "message": msg, **kw}


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_malformed_line_in_the_middle(tmp_path):
    recs = [claude_rec("u1", "user", "hello"), claude_rec("a1", "assistant", [{"type": "text", "text": "hi"}]),
            '{"type": "user", "uuid": "broken", "message": {"role": ',
            claude_rec("u2", "user", "again"), claude_rec("a2", "assistant", [{"type": "text", "text": "ok"}])]
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    pf = parse_file(path)
    assert pf.format == "claude-code"
    assert [m["id"] for m in all_messages(pf)] == ["u1", "a1", "u2", "a2"]
    (p,) = pf.problems
    assert (p.path, p.line, p.kind) == (str(path), 3, "skipped") and "invalid JSON" in p.reason


def test_glued_objects_and_partial_lines(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps(claude_rec("u1", "user", "a")) + json.dumps(claude_rec("a1", "assistant", "b"))
                    + "\n\n   \n" + json.dumps(claude_rec("u2", "user", "c")) + '{"oops": \n')
    pf = parse_file(path)
    assert [m["id"] for m in all_messages(pf)] == ["u1", "a1", "u2"]
    assert [(p.line, p.kind) for p in pf.problems] == [(1, "repaired"), (4, "repaired")]


def test_empty_and_unknown_files(tmp_path):
    cases = {"empty.jsonl": "", "blank.jsonl": "\n\n  \n", "text.txt": "hello world\n",
             "obj.json": '{"foo": 1, "bar": [1, 2]}', "ints.json": "[1, 2, 3]", "bad.json": "[{",
             "events.jsonl": '{"type": "session.start", "data": {}, "id": "1"}\n',
             "agent.jsonl": '{"role": "agent", "kind": "message", "content": "x", "raw": {}}\n',
             "gemini.json": json.dumps({"sessionId": "x", "messages": [{"type": "user", "content": "hi"}]})}
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        assert detect_format(p) is None, name
        assert parse_file(p) == ParsedFile(str(p), None, [], []), name


def test_giant_line(tmp_path):
    big = "x" * 600_000
    path = write_jsonl(tmp_path / "big.jsonl", [claude_rec("u1", "user", big),
                                               claude_rec("a1", "assistant", [{"type": "text", "text": "k"}])])
    pf = parse_file(path)
    assert [len(text_of(m["content"])) for m in all_messages(pf)] == [600_000, 1]


def test_claude_code_mapping_details(tmp_path):
    recs = [
        {"type": "summary", "summary": "My title", "leafUuid": "a2"},
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        claude_rec("a1", "assistant", [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "ls"}},
                                        {"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": "f"}}]),
        claude_rec("u1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "out1"},
                                  {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
                                   "content": [{"type": "text", "text": "err2"}]}]),
        {"type": "system", "subtype": "turn_duration", "uuid": "sys1", "sessionId": "s1"},
        {"type": "progress", "uuid": "p1", "sessionId": "s1", "data": {"type": "bash_progress"}},
        claude_rec("u2", "user", [{"type": "text", "text": "see"},
                                  {"type": "tool_result", "tool_use_id": "t9", "content": "x"}]),
        claude_rec("a2", "assistant", "done", isSidechain=True),
        claude_rec("b1", "user", "other session", sid="s2"),
    ]
    pf = parse_file(write_jsonl(tmp_path / "c.jsonl", recs))
    s1, s2 = pf.sessions
    assert s1.session["session_id"] == "claude-code:s1" and s1.session["title"] == "My title"
    assert s2.session["session_id"] == "claude-code:s2" and s2.session["title"] is None
    m = {x["id"]: x for x in s1.messages}
    assert list(m) == ["a1", "u1:0", "u1:1", "u2", "u2:0", "a2"]
    assert m["a1"]["reasoning"] == "hmm" and m["a1"]["content"] is None
    assert [c["function"]["name"] for c in m["a1"]["tool_calls"]] == ["Bash", "Read"]
    assert json.loads(m["a1"]["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    assert (m["u1:0"]["role"], m["u1:0"]["content"], m["u1:0"]["name"]) == ("tool", "out1", "Bash")
    assert (m["u1:1"]["content"], m["u1:1"]["name"], m["u1:1"]["extra"]["is_error"]) == ("err2", "Read", True)
    assert m["u2"]["role"] == "user" and m["u2"]["content"] == "see"
    assert m["u2:0"]["tool_call_id"] == "t9" and "name" not in m["u2:0"]
    assert m["a2"]["extra"]["isSidechain"] is True and m["a2"]["extra"]["model"] == "claude-x"
    assert s1.session["started_at"] == 1767225600.0 and s1.session["model"] == "claude-x"


def test_codex_synthetic(tmp_path):
    def line(t, p):
        return {"timestamp": "2026-01-01T00:00:01.000Z", "type": t, "payload": p}
    recs = [line("session_meta", {"id": "abc", "cwd": "/w", "cli_version": "0.1", "timestamp": "2026-01-01T00:00:00Z"}),
            line("turn_context", {"turn_id": "T1", "model": "gpt-x"}),
            line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
            line("event_msg", {"type": "user_message", "message": "hi"}),
            line("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}),
            line("response_item", {"type": "function_call", "name": "exec", "arguments": "{\"cmd\":\"ls\"}", "call_id": "c1"}),
            line("response_item", {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin", "call_id": "c2"}),
            line("response_item", {"type": "function_call_output", "call_id": "c1", "output": "files"}),
            line("response_item", {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"}),
            line("compacted", {"message": "", "replacement_history": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
            line("response_item", {"type": "message", "role": "assistant", "phase": "final",
                                   "content": [{"type": "output_text", "text": "bye"}]}),
            line("event_msg", {"type": "agent_message", "message": "bye"})]
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
    conv = [{"from": "system", "value": "tools <tool_call>{'name': <function-name>}</tool_call>"},
            {"from": "human", "value": "weather?"},
            {"from": "gpt", "value": "<think>need tools</think>\n<tool_call>\n{\"name\": \"get_weather\", "
                                     "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
                                     "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
            {"from": "tool", "value": "<tool_response>\n{\"tool_call_id\": \"x9\", \"name\": \"get_time\", "
                                      "\"content\": \"noon\"}\n</tool_response>\n<tool_response>\n"
                                      "{\"tool_call_id\": \"x8\", \"name\": \"get_weather\", \"content\": "
                                      "{\"temp\": 20}}\n</tool_response>"},
            {"from": "gpt", "value": "<think></think>Sunny, 20C at noon."}]
    path = write_jsonl(tmp_path / "traj.jsonl", [{"conversations": conv, "timestamp": "2026-04-13T21:38:56.194348",
                                                  "model": "m"}, "not json at all"])
    pf = parse_file(path)
    assert pf.format == "sharegpt"
    assert [(p.line, p.kind) for p in pf.problems] == [(2, "skipped")]
    (s,) = pf.sessions
    assert s.session["session_id"] == "sharegpt:traj.jsonl:1"
    ms = s.messages
    assert [m["id"] for m in ms] == ["0", "1", "2", "3:0", "3:1", "4"]
    assert ms[0]["content"] == conv[0]["value"]  # <tool_call> text in system prompt left alone
    call = ms[2]
    assert call["content"] is None and call["reasoning"] == "need tools"
    assert [c["id"] for c in call["tool_calls"]] == ["sharegpt_2_0", "sharegpt_2_1"]
    assert (ms[3]["tool_call_id"], ms[3]["name"], ms[3]["content"]) == ("sharegpt_2_1", "get_time", "noon")
    assert (ms[4]["tool_call_id"], ms[4]["name"]) == ("sharegpt_2_0", "get_weather")
    assert json.loads(ms[4]["content"]) == {"temp": 20} and ms[4]["extra"]["source_tool_call_id"] == "x8"
    assert ms[5]["content"] == "Sunny, 20C at noon." and "reasoning" not in ms[5]
    assert parse_file(path).sessions == pf.sessions


def test_openai_chat_jsonl_variants(tmp_path):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "ls?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "sh", "arguments": {"c": "ls"}}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a b"},
            {"role": "assistant", "content": "done", "reasoning_content": "easy"}]
    per_line = parse_file(write_jsonl(tmp_path / "msgs.jsonl", msgs))
    assert per_line.format == "openai-chat"
    (s,) = per_line.sessions
    assert s.session["session_id"] == "openai-chat:msgs.jsonl"
    assert [m["content"] for m in s.messages] == ["be brief", "ls?", None, "a b", "done"]
    assert json.loads(s.messages[2]["tool_calls"][0]["function"]["arguments"]) == {"c": "ls"}
    assert s.messages[3]["name"] == "sh" and s.messages[4]["reasoning"] == "easy"
    convs = parse_file(write_jsonl(tmp_path / "convs.jsonl", [{"messages": msgs}, {"messages": msgs[:2], "model": "m"}]))
    assert [x.session["session_id"] for x in convs.sessions] == ["openai-chat:convs.jsonl:1", "openai-chat:convs.jsonl:2"]
    assert [len(x.messages) for x in convs.sessions] == [5, 2] and convs.sessions[1].session["model"] == "m"
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
    assert p.kind == "skipped" and p.line is not None and p.line < damaged_at and "resumed at line" in p.reason
    path.write_text(json.dumps(recs, indent=2)[:-30])  # truncated: last element lost, array unclosed
    pf = parse_file(path)
    assert [m["id"] for m in all_messages(pf)] == ["u0", "u1", "u2"]
    assert [p.kind for p in pf.problems] == ["skipped"]


def test_random_damage_never_raises(corpus, tmp_path):
    import random
    rng = random.Random(3)
    sources = [corpus / rel for rel in sorted(EXPECTED)] + corpus_files("other")
    for src in sources:
        data = bytearray(src.read_bytes())
        for _ in range(3):
            for _ in range(rng.randint(1, 20)):
                pos = rng.randrange(len(data))
                if rng.random() < 0.5:
                    del data[pos:pos + rng.randint(1, 100)]
                else:
                    data[pos:pos] = bytes(rng.choice(b'{}[]",:\n\\\xff ') for _ in range(rng.randint(1, 4)))
            out = tmp_path / src.name
            out.write_bytes(bytes(data))
            pf = parse_file(out)  # must not raise
            assert all(isinstance(p, Problem) and p.kind in ("skipped", "repaired") for p in pf.problems)
            if src.parent.name == "other":
                assert pf.format is None
