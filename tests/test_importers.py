"""Tests for ops.importers on the real corpus (../shared/corpus) and synthetic files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import CORPUS
from importers_helpers import all_messages, text_of

from quill.ops.importers import (
    ImportedSession,
    Problem,
    detect_format,
    iter_transcript_files,
    parse_file,
)
from quill.ops.importers.jsonlines import iter_jsonl

#: files of ``other/`` in formats Quill reads (name fragments)
GLUED = "claude-code/entireio-cli__130d7b7e-5801-4345-9bd6-f32fd9b8429b.jsonl"

# file -> (sessions, messages, problems); cross-checked below by independent counting
EXPECTED = {
    "claude-code/agentv__acc53d32-5580-4747-9273-e2acff2ba566.jsonl": (1, 33, 0),
    "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl": (1, 29, 0),
    "claude-code/d-kimuson__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": (1, 29, 0),
    "claude-code/d-kimuson__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": (6, 437, 0),  # 5 subagents
    "claude-code/drmaciver__coverage-test-fix__c64cc478-3430-40fe-8e9c-4ee9986e9754.jsonl": (
        1,
        37,
        0,
    ),
    "claude-code/drmaciver__python-to-rust-port__c7d3d95c-57f0-4359-8f4b-926a9bef5a3f.jsonl": (
        1,
        96,
        0,
    ),
    "claude-code/entireio-cli__08940314-9e93-46b1-a598-06bada65ed55.jsonl": (
        1,
        982,
        0,
    ),  # + 1 compaction
    GLUED: (1, 150, 2),  # glued line 128 (repaired) + re-written record at line 131 (skipped)
    "claude-code/llm-guard__logs-chat.json": (1, 358, 0),  # + 1 compaction
    "codex/agentv__rollout-019ed836-b1da-78f1-8a0c-e598363d10f4.jsonl": (1, 56, 0),
    "codex/agentv__rollout-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl": (1, 464, 0),
    "codex/agentv__rollout-019f36b8-7808-7b53-b256-85144c802798.jsonl": (1, 806, 0),
    "openai-chat/mini-swe-agent__github_issue.traj.json": (1, 22, 0),
    "sharegpt/hermeswith__trajectory_samples.jsonl": (13, 39, 0),
}


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus absent: no transcripts at {CORPUS}")
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


# --------------------------------------------------------------------- corpus


def test_expected_table_covers_supported_corpus(corpus):
    supported = {
        str(p.relative_to(corpus))
        for sub in ("claude-code", "codex", "sharegpt", "openai-chat")
        for p in corpus_files(sub)
    }
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
        assert set(s.session) - {"parent_id", "parent_kind"} == {
            "session_id",
            "source",
            "title",
            "model",
            "cwd",
            "started_at",
            "meta",
        }
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
    sessions, messages, tool_results, tool_uses, compactions = set(), 0, 0, 0, 0
    for _, r in records:
        if r.get("type") not in ("user", "assistant"):
            continue
        if r.get("isCompactSummary"):  # a compaction's summary: the compacted set, not a message
            compactions += 1
            continue
        key = json.dumps(r["message"].get("content"), sort_keys=True)
        if key in seen.setdefault(r["uuid"], set()):
            continue  # the same record re-written by a resumed session
        seen[r["uuid"]].add(key)
        if not r.get("isSidechain"):
            sessions.add(r["sessionId"])
        content = r["message"]["content"]
        blocks = content if isinstance(content, list) else []
        n_results = sum(1 for b in blocks if b.get("type") == "tool_result")
        tool_results += n_results
        tool_uses += sum(1 for b in blocks if b.get("type") == "tool_use")
        messages += n_results + (1 if n_results == 0 or n_results < len(blocks) else 0)
    pf = parse_file(path)
    msgs = all_messages(pf)
    mains = [s for s in pf.sessions if "parent_id" not in s.session]
    assert {s.session["session_id"] for s in mains} == {f"claude-code:{s}" for s in sessions}
    assert len(msgs) == messages
    assert sum(len(s.compactions) for s in pf.sessions) == compactions
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
            if (
                b.get("type") == "tool_result"
                and isinstance(b.get("content"), str)
                and b["content"]
            ):
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
    pf = parse_file(
        corpus / "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl"
    )
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
    assert {"summary": at_128[1]["summary"], "leafUuid": at_128[1]["leafUuid"]} in summaries
    assert pf.sessions[0].session["meta"]["cli_versions"] == ["2.1.7", "2.1.12"]


@pytest.mark.parametrize("path", corpus_files("codex"), ids=lambda p: p.name)
def test_codex_independent_counts(corpus, path):
    recs = [r for _, r in plain_records(path)]
    items = Counter(r["payload"]["type"] for r in recs if r["type"] == "response_item")
    expected = sum(
        items[t]
        for t in (
            "message",
            "function_call",
            "function_call_output",
            "custom_tool_call",
            "custom_tool_call_output",
            "web_search_call",
        )
    )
    pf = parse_file(path)
    (sess,) = pf.sessions
    assert sess.session["session_id"] == "codex:" + recs[0]["payload"]["id"]
    msgs = sess.messages
    assert len(msgs) == expected
    # the response_item stream only: event_msg agent_message/user_message are not duplicated
    assert sum(1 for m in msgs if m["role"] == "assistant" and m["content"]) == sum(
        1
        for r in recs
        if r["type"] == "response_item"
        and r["payload"]["type"] == "message"
        and r["payload"]["role"] == "assistant"
    )
    assert sum(1 for m in msgs if m["role"] == "tool") == (
        items["function_call_output"] + items["custom_tool_call_output"]
    )
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
    assert (
        len({s.session["session_id"] for s in pf.sessions}) == 13
    )  # content ids: one per conversation
    assert len(all_messages(pf)) == sum(len(r["conversations"]) for _, r in recs)
    for (line, rec), s in zip(recs, pf.sessions):
        assert (
            s.session["session_id"].startswith(f"sharegpt:{path.name}:")
            and s.legacy_id == f"sharegpt:{path.name}:{line}"
        )
        assert s.session["model"] == rec["model"]
        assert [m["role"] for m in s.messages] == [
            {"system": "system", "human": "user", "gpt": "assistant"}[t["from"]]
            for t in rec["conversations"]
        ]
        for m in s.messages:
            assert m["timestamp"] == s.session["started_at"] is not None
            if m["role"] == "assistant":
                assert "<think>" not in (m["content"] or "") and m.get("reasoning")


def test_openai_chat_corpus(corpus):
    path = corpus / "openai-chat/mini-swe-agent__github_issue.traj.json"
    arr = json.loads(path.read_text())
    pf = parse_file(path)
    (s,) = pf.sessions
    assert (
        s.session["session_id"].startswith(f"openai-chat:{path.name}:")
        and s.legacy_id == f"openai-chat:{path.name}"
    )
    assert [(m["role"], m["content"]) for m in s.messages] == [
        (a["role"], a["content"]) for a in arr
    ]
    assert [m["id"] for m in s.messages] == [str(i) for i in range(len(arr))]


#: Files of ``other/`` in formats Quill reads (tests/test_importers_agents_corpus.py).
READ_OTHER = ("gemini", "copilot", "aider__", "openhands__", "swe-agent__")


def _unread(p: Path) -> bool:
    return not any(key in p.name for key in READ_OTHER)


def test_every_corpus_file_is_in_a_format_quill_reads(corpus):
    """Every real transcript of the corpus is recognised; a file of a format Quill does not
    read would be named here (and listed in docs/importers.md)."""
    unread = [p.name for p in corpus_files("other") if _unread(p)]
    assert not unread, unread
    for path in corpus_files("other"):
        assert detect_format(path) is not None, path.name


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
    assert [f.name for f in files if f.suffix == ".md"] == ["aider__chat-history.md"]
    assert len(files) == 21
    explicit = corpus / "FORMATS.md"
    assert list(iter_transcript_files([explicit])) == [explicit]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.jsonl").write_text("")
    (tmp_path / "a.json").write_text("")
    (tmp_path / "notes.md").write_text("")
    assert list(iter_transcript_files([tmp_path])) == [
        tmp_path / "a.json",
        tmp_path / "b" / "x.jsonl",
    ]


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
                    del data[pos : pos + rng.randint(1, 100)]
                else:
                    data[pos:pos] = bytes(
                        rng.choice(b'{}[]",:\n\\\xff ') for _ in range(rng.randint(1, 4))
                    )
            out = tmp_path / src.name
            out.write_bytes(bytes(data))
            pf = parse_file(out)  # must not raise
            assert all(
                isinstance(p, Problem) and p.kind in ("skipped", "repaired", "ignored")
                for p in pf.problems
            )
            if src.parent.name == "other" and _unread(src):
                assert pf.format is None
