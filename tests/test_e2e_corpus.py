"""End to end on real input: the real fleet as a subprocess, the real corpus imported through
the CLI, every session and message checked, phrases found by `quill search`."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from quill.ops.importers import iter_transcript_files, parse_file

from conftest import CORPUS

pytestmark = pytest.mark.skipif(not CORPUS.exists(), reason="../shared/corpus not present")


def _phrase(messages: list[dict]) -> str | None:
    """Three consecutive plain words from a user/assistant text, as a quoted phrase."""
    for m in messages:
        text = m.get("content")
        if m.get("role") not in ("user", "assistant") or not isinstance(text, str):
            continue
        words = re.findall(r"\b[A-Za-z]{4,}\b", text)
        for i in range(len(words) - 2):
            window = " ".join(words[i:i + 3])
            if window in " ".join(text.split()):
                return f'"{window}"'
    return None


def test_import_corpus_into_running_fleet(quill, fleet):
    parsed = [parse_file(p) for p in iter_transcript_files([CORPUS])]
    supported = [p for p in parsed if p.format]
    assert {p.format for p in supported} == {"claude-code", "codex", "sharegpt", "openai-chat"}
    expected = {s.session["session_id"]: len(s.messages) for p in supported for s in p.sessions}

    report = quill.json("import", str(CORPUS))
    assert {e["path"] for e in report if e["format"]} == {p.path for p in supported}
    glued = [e for e in report if "130d7b7e" in e["path"]][0]
    assert any(p["line"] == 128 for p in glued["problems"])  # reported with file and line

    quill.wait_idle()
    sessions = quill.json("sessions", "list", "--limit", "10000")
    got = {s["id"]: s["message_count"] for s in sessions}
    assert got == expected

    for p in supported:
        for s in p.sessions[:3]:
            phrase = _phrase(s.messages)
            if phrase is None:
                continue
            hits = quill.json("search", phrase, "--limit", "200")
            assert s.session["session_id"] in {h["session_id"] for h in hits}, (p.path, phrase)

    # Importing the corpus a second time changes no count.
    quill.run("import", str(CORPUS))
    quill.wait_idle()
    again = quill.json("sessions", "list", "--limit", "10000")
    assert {s["id"]: s["message_count"] for s in again} == expected
    assert quill.status()["spool"]["quarantined"] == 0


def test_tool_calls_and_results_survive_the_round_trip(quill):
    codex = sorted((CORPUS / "codex").glob("*.jsonl"))[0]
    parsed = parse_file(codex)
    quill.run("import", str(codex))
    quill.run("run", "--until-idle", "--timeout", "120")
    sid = parsed.sessions[0].session["session_id"]
    shown = quill.json("sessions", "show", sid, "--view", "model")
    messages = shown["messages"]
    assert len(messages) == len(parsed.sessions[0].messages)
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls and results and set(results) <= set(calls)
    roles = Counter(m["role"] for m in messages)
    assert roles == Counter(m["role"] for m in parsed.sessions[0].messages)
    human = quill.run("sessions", "show", sid).stdout
    assert "→" in human and "tool" in human


def test_malformed_line_is_reported_and_the_rest_of_the_file_lands(quill, tmp_path):
    src = CORPUS / "claude-code" / "agentv__acc53d32-5580-4747-9273-e2acff2ba566.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    good = parse_file(src).sessions[0]
    # Break one message line in the middle: truncate it so it is not JSON any more.
    idx = next(i for i, line in enumerate(lines) if i > len(lines) // 2 and '"type":"assistant"' in line.replace(" ", ""))
    lines[idx] = lines[idx][: len(lines[idx]) // 2] + "\n"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines), encoding="utf-8")

    report = quill.json("import", str(broken))
    problems = report[0]["problems"]
    assert [(p["line"], p["kind"]) for p in problems] == [(idx + 1, "skipped")]
    human = quill.run("import", str(broken)).stdout
    assert f"broken.jsonl:{idx + 1}" in human
    quill.run("run", "--until-idle", "--timeout", "120")
    sessions = quill.json("sessions", "list")
    assert [s["message_count"] for s in sessions] == [len(good.messages) - 1]
