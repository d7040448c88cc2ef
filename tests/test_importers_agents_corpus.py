"""Aider, OpenHands and SWE-agent files of the real corpus (../shared/corpus/other): counts
taken independently from the raw files (JSON walks, line patterns, the agents' own usage
totals), then the files imported into a real store through the production writer."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import CORPUS
from importers_helpers import store  # noqa: F401 (a fixture, used by name)

from quill.ops.importers import detect_format, parse_file
from quill.store import Reader

OTHER = CORPUS / "other"
AIDER = OTHER / "aider__chat-history.md"
OH_EVAL = OTHER / "openhands__multi_swe_bench__output.jsonl"
OH_TRAJ = OTHER / "openhands__trajs__basic_gui_mode.json"
SWE_GPT4 = OTHER / "swe-agent__gpt4__pydicom__pydicom-1458.traj"
SWE_FC = OTHER / "swe-agent__replay__marshmallow-code__marshmallow-1867__function_calling.traj"


@pytest.fixture(scope="module", autouse=True)
def corpus() -> Path:
    if not OTHER.is_dir():
        pytest.skip(f"corpus absent: no transcripts at {OTHER}")
    return OTHER


def _paired(messages: list[dict]) -> None:
    """Every tool message answers a call of an earlier assistant message."""
    calls: set[str] = set()
    for m in messages:
        calls.update(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool" and m.get("tool_call_id") is not None:
            assert m["tool_call_id"] in calls, m["id"]


def _openhands_expected(events: list[dict]) -> dict:
    """Role counts and usage of one event list, straight from the events."""
    tcm_actions = {e["id"]: e for e in events if "action" in e and e.get("tool_call_metadata")}
    responses = {
        e["tool_call_metadata"]["model_response"]["id"]: e["tool_call_metadata"]["model_response"]
        for e in tcm_actions.values()
    }
    obs = [e for e in events if "observation" in e]
    return {
        "roles": Counter(
            {
                "system": sum(e.get("action") == "system" for e in events),
                "user": sum(e.get("action") == "message" and e["source"] == "user" for e in events)
                + sum(e["observation"] == "recall" for e in obs)
                + sum(
                    e["observation"] == "error"
                    and e.get("cause") is None
                    and not e.get("tool_call_metadata")
                    for e in obs
                ),
                "assistant": len(responses)
                + sum(
                    e.get("action") == "message"
                    and e["source"] == "agent"
                    and not e.get("tool_call_metadata")
                    for e in events
                ),
                "tool": sum(
                    bool(e.get("tool_call_metadata")) or e.get("cause") in tcm_actions for e in obs
                ),
            }
        ),  # fmt: skip
        "calls": len(responses),
        "prompt": sum(r["usage"]["prompt_tokens"] for r in responses.values()),
        "completion": sum(r["usage"]["completion_tokens"] for r in responses.values()),
    }


def _check_openhands(session, events: list[dict]) -> dict:
    want = _openhands_expected(events)
    got = Counter(m["role"] for m in session.messages)
    assert +got == +want["roles"]
    _paired(session.messages)
    usage = [m["extra"]["usage"] for m in session.messages if "usage" in m.get("extra", {})]
    assert len(usage) == want["calls"]
    assert sum(u["input_tokens"] for u in usage) == want["prompt"]
    assert sum(u["output_tokens"] for u in usage) == want["completion"]
    return want


def test_openhands_evaluation_output_corpus():
    records = [json.loads(line) for line in OH_EVAL.read_text().splitlines()]
    assert detect_format(OH_EVAL) == "openhands"
    pf = parse_file(OH_EVAL)
    assert pf.problems == [] and len(pf.sessions) == len(records) == 3
    for s, rec in zip(pf.sessions, records, strict=True):
        want = _check_openhands(s, rec["history"])
        # OpenHands' own running total agrees with the per-response usage we keep
        total = rec["metrics"]["accumulated_token_usage"]
        assert (want["prompt"], want["completion"]) == (
            total["prompt_tokens"],
            total["completion_tokens"],
        )
        assert want["calls"] == len(rec["metrics"]["token_usages"])
        assert s.session["title"] == rec["instance_id"]
    assert [len(s.messages) for s in pf.sessions] == [48, 69, 102]


def test_openhands_trajectory_corpus():
    events = json.loads(OH_TRAJ.read_text())
    assert detect_format(OH_TRAJ) == "openhands"
    pf = parse_file(OH_TRAJ)
    assert pf.problems == [] and len(pf.sessions) == 1
    s = pf.sessions[0]
    want = _check_openhands(s, events)
    assert want["roles"] == Counter(system=0, user=1, assistant=5, tool=4)
    assert s.session["meta"]["event_counts"]["observation:agent_state_changed"] == 4


def test_swe_agent_corpus():
    for path, tool_role in ((SWE_GPT4, "user"), (SWE_FC, "tool")):
        doc = json.loads(path.read_text())
        assert detect_format(path) == "swe-agent"
        pf = parse_file(path)
        assert pf.problems == [] and len(pf.sessions) == 1
        s = pf.sessions[0]
        hist = doc["history"]
        answers = sum(
            1
            for prev, m in zip(hist, hist[1:], strict=False)
            if prev["role"] == "assistant" and m["role"] == tool_role and not m.get("is_demo")
        )
        roles = Counter(m["role"] for m in s.messages)
        assert roles["assistant"] == sum(m["role"] == "assistant" for m in hist)
        assert roles["tool"] == answers
        assert len(s.messages) == len(hist)
        assert all(len(m["tool_calls"]) == 1 for m in s.messages if m["role"] == "assistant")
        _paired(s.messages)
    gpt4, fc = parse_file(SWE_GPT4).sessions[0], parse_file(SWE_FC).sessions[0]
    assert (Counter(m["role"] for m in gpt4.messages)["tool"], len(gpt4.messages)) == (11, 26)
    stats = json.loads(SWE_GPT4.read_text())["info"]["model_stats"]
    assert [u["usage"] for u in gpt4.usage] == [
        {"input_tokens": stats["tokens_sent"], "output_tokens": stats["tokens_received"]}
    ]
    assert fc.usage == []  # a replay: model_stats tokens are 0, nothing is recorded


TOKENS_EXACT = re.compile(r"^> Tokens: ([\d,]+) sent, ([\d,]+) received\b")


def test_aider_history_corpus():
    lines = AIDER.read_text().splitlines()
    headers = sum(line.startswith("# aider chat started at ") for line in lines)
    exact = [TOKENS_EXACT.match(line) for line in lines]
    exact = [m for m in exact if m and m.group(1, 2) != ("0", "0")]  # 0/0: nothing to record
    assert detect_format(AIDER) == "aider"
    pf = parse_file(AIDER)
    assert pf.problems == []
    assert len(pf.sessions) == headers + 1 == 1134  # text before the first header is one more
    usage = [u for s in pf.sessions for u in s.usage]
    assert len(usage) == len(exact) == 675
    assert sum(u["usage"]["prompt_tokens"] for u in usage) == sum(
        int(m.group(1).replace(",", "")) for m in exact
    )
    # user blocks: runs of "#### " lines; two such runs sit inside a fenced Markdown file an
    # assistant reply quotes (aider's docs), so they stay in that reply
    runs = sum(
        1
        for prev, line in zip([""] + lines, lines, strict=False)
        if line.startswith("#### ") and not prev.startswith("#### ")
    )
    roles = Counter(m["role"] for s in pf.sessions for m in s.messages)
    assert roles["user"] == runs - 2 == 1774
    assert (roles["assistant"], roles["tool"]) == (1028, 2669)
    models = Counter(s.session["model"] for s in pf.sessions)
    assert models["claude-3-5-sonnet-20240620"] > 100
    ids = [s.session["session_id"] for s in pf.sessions]
    assert len(set(ids)) == len(ids)


def test_corpus_files_land_in_the_store_with_their_usage(store):  # noqa: F811
    """Imported through the production writer: no quarantine, every message stored, one usage
    row per model call, tokens equal to the agents' own figures."""
    expected: dict[str, tuple[int, int, int]] = {}  # session -> (messages, calls, input)
    for path in (OH_EVAL, OH_TRAJ, SWE_GPT4, SWE_FC, AIDER):
        for s in parse_file(path).sessions:
            inline = [m["extra"]["usage"] for m in s.messages if "usage" in m.get("extra", {})]
            calls = len(inline) + len(s.usage)
            tokens = sum(u["input_tokens"] for u in inline) + sum(
                u["usage"].get("input_tokens", u["usage"].get("prompt_tokens", 0)) for u in s.usage
            )
            expected[s.session["session_id"]] = (len(s.messages), calls, tokens)
        store.imp(path)
    with Reader(store.db) as r:
        rows = {row["session"]: row for row in r.usage_totals(("session",))}
        for sid, (n, calls, tokens) in expected.items():
            assert r.get_session(sid)["message_count"] == n, sid
            if calls:
                assert (rows[sid]["calls"], rows[sid]["input_tokens"]) == (calls, tokens), sid
            else:
                assert sid not in rows
    oh = json.loads(OH_EVAL.read_text().splitlines()[0])["metrics"]["accumulated_token_usage"]
    assert oh["prompt_tokens"] in {t for _, _, t in expected.values()}
