"""End to end on real input: the real fleet as a subprocess, the real corpus imported through
the CLI, every session and message checked, phrases found by `quill search`."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from conftest import CORPUS

from quill.ops.importers import iter_transcript_files, parse_file

pytestmark = pytest.mark.corpus


def _phrase(messages: list[dict]) -> str | None:
    """Three consecutive plain words from a user/assistant text, as a quoted phrase."""
    for m in messages:
        text = m.get("content")
        if m.get("role") not in ("user", "assistant") or not isinstance(text, str):
            continue
        words = re.findall(r"\b[A-Za-z]{4,}\b", text)
        for i in range(len(words) - 2):
            window = " ".join(words[i : i + 3])
            if window in " ".join(text.split()):
                return f'"{window}"'
    return None


def test_import_corpus_into_running_fleet(quill, fleet):
    parsed = [parse_file(p) for p in iter_transcript_files([CORPUS])]
    supported = [p for p in parsed if p.format]
    assert {p.format for p in supported} == {
        "claude-code",
        "codex",
        "gemini-cli",
        "copilot-cli",
        "sharegpt",
        "openai-chat",
        "openhands",
        "swe-agent",
        "aider",
    }
    sessions_of = {s.session["session_id"]: s for p in supported for s in p.sessions}

    proc = quill.run("import", str(CORPUS), "--json", check=False)
    # every transcript of the corpus is in a format Quill reads (its *.md docs are named apart)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {e["path"] for e in report if e["format"]} == {p.path for p in supported}
    assert {e["path"] for e in report if not e["format"]} == {
        p.path for p in parsed if not p.format
    }
    glued = [e for e in report if "130d7b7e" in e["path"]][0]
    assert any(p["line"] == 128 for p in glued["problems"])  # reported with file and line

    quill.wait_idle()
    listed = {
        s["id"]: s
        for s in quill.json("sessions", "list", "--limit", "10000", "--chains")["sessions"]
    }
    assert set(listed) == set(sessions_of)
    for sid, s in sessions_of.items():
        if not s.compactions:  # display = every message not on an abandoned branch
            assert listed[sid]["message_count"] == len(s.messages) - len(s.rewound), sid

    # sidechains became delegate children of their session, linked to the Task call
    kimuson = "claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    children = [s for s in listed.values() if s.get("parent_id") == kimuson]
    assert len(children) == 5 and all(c["parent_kind"] == "delegate" for c in children)
    assert sum(c["message_count"] for c in children) == 405
    assert listed[kimuson]["message_count"] == 32
    assert all(
        str(sessions_of[c["id"]].session["meta"]["parent_tool_call_id"]).startswith("toolu_")
        for c in children
    )

    # compacted sessions: the model view is shorter than the audit view
    compacted = [sid for sid, s in sessions_of.items() if s.compactions]
    assert len(compacted) == 3  # Claude Code /compact, Claude Code 1.0 summary, Codex compacted x2
    for sid in compacted:
        model = quill.json("sessions", "show", sid, "--view", "model")["messages"]
        audit = quill.json("sessions", "show", sid, "--view", "audit")["messages"]
        assert len(model) < len(audit), sid

    for p in supported:
        for s in p.sessions[:3]:
            phrase = _phrase(s.messages)
            if phrase is None:
                continue
            hits = quill.json("search", phrase, "--limit", "200", "--audit")["hits"]
            assert s.session["session_id"] in {h["session_id"] for h in hits}, (p.path, phrase)

    # Importing the corpus a second time spools nothing and changes no count.
    again = json.loads(quill.run("import", str(CORPUS), "--json", check=False).stdout)
    assert sum(e["new"] for e in again) == 0
    quill.wait_idle()
    relisted = quill.json("sessions", "list", "--limit", "10000", "--chains")["sessions"]
    assert {s["id"]: s["message_count"] for s in relisted} == {
        k: v["message_count"] for k, v in listed.items()
    }
    assert quill.status()["spool"]["quarantined"] == 0


def test_tool_calls_and_results_survive_the_round_trip(quill):
    codex = sorted((CORPUS / "codex").glob("*.jsonl"))[0]
    parsed = parse_file(codex)
    quill.run("import", str(codex))
    quill.drain()
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
    idx = next(
        i
        for i, line in enumerate(lines)
        if i > len(lines) // 2 and '"type":"assistant"' in line.replace(" ", "")
    )
    lines[idx] = lines[idx][: len(lines[idx]) // 2] + "\n"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines), encoding="utf-8")

    report = quill.json("import", str(broken))
    problems = report[0]["problems"]
    assert [(p["line"], p["kind"]) for p in problems] == [(idx + 1, "skipped")]
    human = quill.run("import", str(broken)).stdout
    assert f"broken.jsonl:{idx + 1}" in human
    quill.drain()
    sessions = quill.json("sessions", "list")["sessions"]
    assert [s["message_count"] for s in sessions] == [len(good.messages) - 1]
