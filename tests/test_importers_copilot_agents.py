"""GitHub Copilot CLI sub-agent runs (``delegate`` children) and ``session.shutdown`` usage,
imported through the real spool into a real SQLite store.

The real corpus log holds neither (its session never ran a sub-agent and never shut down), so
the runs are built from its own events: a turn of real events is copied under a sub-agent in
the two ways the writer's schema gives (a top-level ``agentId``, and the older
``data.parentToolCallId``), between ``subagent.started``/``completed`` events, and a
``session.shutdown`` in the schema's shape ends the log (github/copilot-sdk
``session-events.ts``; docs/importers.md). Expected counts are taken from the file written."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import CORPUS
from importers_helpers import store, write_jsonl  # noqa: F401 (store: fixture)

from quill.store import Reader

pytestmark = pytest.mark.corpus

REAL = CORPUS / "other/agentv__copilot-cli-events-10fb4666-56f0-4352-90fc-715caf95b418.jsonl"
SID = "copilot-cli:10fb4666-56f0-4352-90fc-715caf95b418"
MESSAGE_EVENTS = ("assistant.message", "tool.execution_complete", "user.message")


def _ev(kind: str, eid: str, data: dict, ts: str, **top) -> dict:
    return {"type": kind, "data": data, "id": eid, "timestamp": ts, "parentId": None, **top}


def _run(events: list[dict], call: str, how: str) -> list[dict]:
    """The real events of the first turn with a tool call, copied as the run of sub-agent
    ``call`` (new ids; ``how``: a top-level ``agentId``, or ``data.parentToolCallId``)."""
    start = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "assistant.message" and e["data"]["toolRequests"]
    )
    end = next(i for i in range(start, len(events)) if events[i]["type"] == "assistant.turn_end")
    out = []
    for e in copy.deepcopy(events[start:end]):
        e["id"] = f"{call}:{e['id']}"
        if how == "agentId":
            e["agentId"] = f"agent-{call}"
        else:
            e["data"]["parentToolCallId"] = call
        for req in e["data"].get("toolRequests") or []:
            req["toolCallId"] = f"{call}:{req['toolCallId']}"
        if "toolCallId" in e["data"]:
            e["data"]["toolCallId"] = f"{call}:{e['data']['toolCallId']}"
        out.append(e)
    return out


def _log(tmp_path):
    events = [json.loads(line) for line in REAL.read_text().splitlines() if line.strip()]
    ts = events[-1]["timestamp"]
    added: list[dict] = []
    children: dict[str, list[dict]] = {}
    for call, how in (("call_task_a", "agentId"), ("call_task_b", "parentToolCallId")):
        task = {"toolCallId": call, "name": "task", "arguments": {"prompt": f"do {call}"}}
        added.append(
            _ev("assistant.message", f"m-{call}", {"content": "", "toolRequests": [task]}, ts)
        )
        started = {
            "toolCallId": call,
            "agentName": "explore",
            "agentDisplayName": f"Explore {call}",
            "agentDescription": "Reads the code",
            "model": "claude-haiku-4.5",
        }
        top = {"agentId": f"agent-{call}"} if how == "agentId" else {}
        added.append(_ev("subagent.started", f"s-{call}", started, ts, **top))
        children[call] = _run(events, call, how)
        added += children[call]
        done = {"toolCallId": call, "agentName": "explore", "agentDisplayName": "Explore"}
        added.append(
            _ev("subagent.completed", f"d-{call}", {**done, "totalToolCalls": 1}, ts, **top)
        )
        result = {"toolCallId": call, "success": True, "result": {"content": f"{call} done"}}
        added.append(_ev("tool.execution_complete", f"r-{call}", result, ts))
    metrics = {
        "claude-sonnet-4.6": {
            "requests": {"count": 57, "cost": 1},
            "usage": {
                "inputTokens": 1627935,
                "outputTokens": 16655,
                "cacheReadTokens": 1424086,
                "cacheWriteTokens": 0,
            },
        },
        "claude-haiku-4.5": {
            "requests": {"count": 4, "cost": 0},
            "usage": {
                "inputTokens": 71282,
                "outputTokens": 900,
                "cacheReadTokens": 35495,
                "cacheWriteTokens": 35783,
                "reasoningTokens": 120,
            },
        },
    }
    shutdown = {
        "shutdownType": "routine",
        "totalApiDurationMs": 1000,
        "sessionStartTime": 1772896520265,
        "codeChanges": {"linesAdded": 0, "linesRemoved": 0, "filesModified": []},
        "modelMetrics": metrics,
    }
    added.append(_ev("session.shutdown", "shutdown-1", shutdown, ts))
    path = write_jsonl(tmp_path / "events.jsonl", [*events, *added])
    return path, events, added, children, metrics


def test_copilot_subagent_runs_are_delegate_children_and_shutdown_metrics_are_usage(
    store, tmp_path
):
    path, events, added, children, metrics = _log(tmp_path)
    store.imp(path)
    main = store.view(SID, "model")
    kinds = ("system.message", *MESSAGE_EVENTS)
    in_main = [e["id"] for e in [*events, *added] if e["type"] in kinds]
    assert [m["id"] for m in main] == [i for i in in_main if not i.startswith("call_task_")]
    assert {m["id"] for m in main} >= {"m-call_task_a", "r-call_task_a", "r-call_task_b"}
    assert not any(m["id"].startswith("call_task_") for m in main)
    for call, run in children.items():
        child = f"{SID}:agent:{call}"
        got = store.view(child, "model")
        want = [e for e in run if e["type"] in MESSAGE_EVENTS]
        assert [m["id"] for m in got] == [e["id"] for e in want]
        s = store.session(child)
        assert s["parent_id"] == SID and s["model"] == "claude-haiku-4.5"
        assert s["meta"]["parent_tool_call_id"] == call
        assert s["meta"]["agent_name"] == "explore" and s["meta"]["status"] == "completed"
        assert s["title"] == f"Explore {call}"
    with Reader(store.db) as r:
        rows = {row["model"]: row for row in r.usage_totals(("model",), session_id=SID)}
    assert rows.keys() == metrics.keys()
    for model, m in metrics.items():
        u = m["usage"]
        assert rows[model]["calls"] == 1  # one row standing for requests.count calls
        assert rows[model]["input_tokens"] == u["inputTokens"]
        assert rows[model]["output_tokens"] == u["outputTokens"]
        assert rows[model]["cache_read_tokens"] == u["cacheReadTokens"]
        assert rows[model]["cache_write_tokens"] == u["cacheWriteTokens"]
    store.imp(path)  # a re-import records no call twice
    with Reader(store.db) as r:
        assert sum(row["calls"] for row in r.usage_totals(("session",), session_id=SID)) == 2
