"""OpenHands delegation: the events a delegate agent adds to the stream between a ``delegate``
action and the ``delegate`` observation that closes it become a ``delegate`` child session.

No public trajectory with a delegation was found, so the run is made of real events: a
stretch of a real CodeActAgent run from the corpus (``openhands__multi_swe_bench__output.jsonl``)
is wrapped in the pair OpenHands' controller writes (``start_delegate``/``end_delegate``:
the action with the parent's tool call, a ``TASK:`` user message, the observation carrying
the same ``tool_call_metadata``). Expected ids come from importing the unwrapped events."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS

from quill.ops.importers import parse_file

pytestmark = pytest.mark.corpus

EVAL = CORPUS / "other" / "openhands__multi_swe_bench__output.jsonl"
CALL = {"function_name": "delegate_to_browsing_agent", "tool_call_id": "toolu_delegate_1"}


def _closed_stretch(events: list[dict]) -> tuple[int, int]:
    """Indexes ``[i, j)`` of a stretch of real events that starts at a tool-call action and
    holds every observation answering its actions (and nothing answering one outside)."""
    ids = [e["id"] for e in events]
    for i, e in enumerate(events):
        if "action" not in e or "tool_call_metadata" not in e or i < 3:
            continue
        for j in range(i + 4, min(len(events), i + 20)):
            inside = set(ids[i:j])
            causes_in = {x.get("cause") for x in events[i:j] if "observation" in x}
            causes_out = {x.get("cause") for x in events[j:] if "observation" in x}
            if causes_in <= inside | {None} and not (causes_out & inside):
                return i, j
    raise AssertionError("no closed stretch in the real run")


def _wrapped(events: list[dict], i: int, j: int) -> list[dict]:
    ts = events[i]["timestamp"]
    action = {
        "id": 900001,
        "timestamp": ts,
        "source": "agent",
        "message": "I'm asking BrowsingAgent for help with this task.",
        "action": "delegate",
        "args": {"agent": "BrowsingAgent", "inputs": {"task": "find the docs"}, "thought": ""},
        "tool_call_metadata": CALL,
    }
    task = {
        "id": 900002,
        "timestamp": ts,
        "source": "user",
        "message": "TASK: find the docs",
        "action": "message",
        "args": {"content": "TASK: find the docs", "image_urls": None, "wait_for_response": False},
    }
    done = {
        "id": 900003,
        "timestamp": events[j - 1]["timestamp"],
        "source": "agent",
        "message": "",
        "observation": "delegate",
        "content": "Delegated agent finished with result:\n\nBrowsingAgent finishes task with "
        "content: x",
        "extras": {"outputs": {"content": "x"}},
        "tool_call_metadata": CALL,
    }
    return [*events[:i], action, task, *events[i:j], done, *events[j:]]


def test_a_delegate_run_is_a_delegate_child_of_the_agent_that_delegated(tmp_path):
    record = json.loads(EVAL.read_text().splitlines()[0])
    events = record["history"]
    i, j = _closed_stretch(events)
    plain = tmp_path / "plain" / "trajectory.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(events))
    (ref,) = parse_file(plain).sessions
    wrapped = tmp_path / "trajectory.json"
    wrapped.write_text(json.dumps(_wrapped(events, i, j)))
    parsed = parse_file(wrapped)
    assert parsed.format == "openhands"
    main, child = parsed.sessions
    inside = {f"event:{e['id']}" for e in events[i:j]}
    ref_ids = [m["id"] for m in ref.messages]
    # the run's messages, in order, and nothing else: the task, then the delegate's own
    assert [m["id"] for m in child.messages] == ["event:900002"] + [
        x for x in ref_ids if x in inside
    ]
    assert len(child.messages) > 2
    # the parent keeps the rest, plus the delegating call and its result
    pos = {f"event:{e['id']}": k for k, e in enumerate(events)}
    before = [x for x in ref_ids if pos[x] < i]
    after = [x for x in ref_ids if pos[x] >= j]
    assert [m["id"] for m in main.messages] == [*before, "event:900001", "event:900003", *after]
    call = next(m for m in main.messages if m["id"] == "event:900001")
    result = next(m for m in main.messages if m["id"] == "event:900003")
    assert call["tool_calls"][0]["id"] == result["tool_call_id"] == CALL["tool_call_id"]
    assert child.session["parent_id"] == main.session["session_id"]
    assert child.session["parent_kind"] == "delegate"
    assert child.session["session_id"] == main.session["session_id"] + ":delegate:900001"
    assert child.session["meta"]["parent_tool_call_id"] == CALL["tool_call_id"]
    assert child.session["meta"]["delegate"]["agent"] == "BrowsingAgent"
    assert child.session["meta"]["delegate"]["outputs"] == {"content": "x"}


def test_a_parents_own_history_holds_no_run_and_makes_no_child(tmp_path):
    """The parent's ``State.history`` has the action and its observation side by side."""
    record = json.loads(EVAL.read_text().splitlines()[0])
    events = _wrapped(record["history"], 5, 5)
    events = [e for e in events if e["id"] != 900002]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(events))
    (only,) = parse_file(path).sessions
    assert {"event:900001", "event:900003"} <= {m["id"] for m in only.messages}
