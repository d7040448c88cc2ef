"""GitHub Copilot CLI sub-agents and session usage (``copilot.py`` has the messages).

Rules from the writer's event schema (github/copilot-sdk ``nodejs/src/generated/
session-events.ts``, generated from the CLI's ``session-events.schema.json``; docs/importers.md
says which commit):

* a sub-agent run starts with ``subagent.started`` (``data.toolCallId``: the parent's tool
  call that spawned it, ``agentName``, ``agentDisplayName``, ``agentDescription``, ``model``)
  and ends with ``subagent.completed`` (``totalToolCalls``, ``totalTokens``, ``durationMs``,
  ``cancelled``) or ``subagent.failed`` (``error``);
* the run's own events carry a top-level ``agentId`` (the sub-agent instance; events of the
  main agent have none), and in older CLI versions ``data.parentToolCallId`` (deprecated in
  the schema) instead. Either routes a message event to a ``delegate`` child session
  ``<session id>:agent:<tool call id>`` (the ``agentId`` mapped to the call through its
  ``subagent.started``, else the ``agentId`` itself), ``meta.parent_tool_call_id`` = that call;
* ``assistant.usage`` (one model call) is ``ephemeral``: "not persisted to the session event
  log on disk", so an ``events.jsonl`` never holds it. What the log holds is
  ``session.shutdown`` ``data.modelMetrics``: per model, the totals of the requests of that run
  (``requests.count``; ``usage.inputTokens``, ``outputTokens``, ``cacheReadTokens``,
  ``cacheWriteTokens``, ``reasoningTokens``). Each becomes one ``usage.record`` named
  ``<session id>:shutdown:<event id>:<model>``: one row standing for ``requests.count`` calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from quill.ops.importers.events import Usage
from quill.ops.importers.jsonlines import ShapeError, parse_timestamp

FORMAT = "copilot-cli"
#: events that open, close or describe a sub-agent run (read in pass 1)
AGENT_EVENTS = ("subagent.started", "subagent.completed", "subagent.failed")
_INFO = {
    "agentName": "agent_name",
    "agentDisplayName": "agent_display_name",
    "agentDescription": "agent_description",
    "totalToolCalls": "total_tool_calls",
    "totalTokens": "total_tokens",
    "durationMs": "duration_ms",
    "cancelled": "cancelled",
    "error": "error",
}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class Agents:
    """The sub-agent runs of one log: ``note`` their events in pass 1, then ``of`` routes an
    event to its run (or None: the main agent) and ``session`` gives a run's session."""

    def __init__(self) -> None:
        self.call_of: dict[str, str] = {}  # agentId -> the tool call that spawned it
        self.info: dict[str, dict[str, Any]] = {}  # tool call id -> what the run said

    def note(self, ev: dict, data: dict) -> None:
        call = _str(data.get("toolCallId")) or _str(ev.get("agentId"))
        if call is None:
            return
        if _str(ev.get("agentId")):
            self.call_of[ev["agentId"]] = call
        info = self.info.setdefault(call, {})
        if ev["type"] == "subagent.started":
            info["started_at"] = ev.get("timestamp")
            info["status"] = "running"
        else:
            info["status"] = "failed" if ev["type"] == "subagent.failed" else "completed"
        if _str(data.get("model")):
            info["model"] = data["model"]
        for src, k in _INFO.items():  # names as the run's start gave them (the invocation's)
            if data.get(src) is not None and (k not in info or ev["type"] == "subagent.started"):
                info[k] = data[src]

    def of(self, ev: dict) -> str | None:
        """The tool call id of the run an event belongs to, None for the main agent."""
        agent = _str(ev.get("agentId"))
        if agent is not None:
            return self.call_of.get(agent, agent)
        data = ev.get("data")
        return _str(data.get("parentToolCallId")) if isinstance(data, dict) else None

    def session(self, call: str, child_id: str, parent: dict) -> dict:
        """The ``session.create`` payload of the run ``call`` (a delegate child of
        ``parent``)."""
        info = self.info.get(call, {})
        meta = {"source_file": parent["meta"].get("source_file"), "parent_tool_call_id": call}
        meta.update((k, v) for k, v in info.items() if k not in ("model", "started_at"))
        return {
            "session_id": child_id,
            "source": FORMAT,
            "title": info.get("agent_display_name"),
            "model": info.get("model"),
            "cwd": parent.get("cwd"),
            "started_at": parse_timestamp(info.get("started_at")),
            "parent_id": parent["session_id"],
            "parent_kind": "delegate",
            "meta": meta,
        }


def _count(usage: dict, key: str, model: str) -> int:
    value = usage.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ShapeError(f"modelMetrics[{model!r}].usage.{key} is not a count: {value!r}")
    return value


def shutdown_usage(sid: str, ev: dict) -> Iterator[Usage]:
    """The ``usage.record`` of each model of a ``session.shutdown`` event's ``modelMetrics``
    (module doc); none when it has no metrics. ``inputTokens`` is read as every prompt token,
    cache reads and writes included (Quill's ``input_tokens``). Raises ``ShapeError`` when a
    metric is not in the schema's shape (nothing of the event is then recorded)."""
    metrics = ev["data"].get("modelMetrics")
    if metrics is None:
        return
    if not isinstance(metrics, dict):
        raise ShapeError(f"modelMetrics must be an object, got {type(metrics).__name__}")
    out = []
    for model, metric in metrics.items():
        usage = metric.get("usage") if isinstance(metric, dict) else None
        if not isinstance(usage, dict) or not {"inputTokens", "outputTokens"} <= usage.keys():
            raise ShapeError(f"modelMetrics[{model!r}] has no usage.inputTokens/outputTokens")
        data: dict[str, Any] = {
            "usage": {
                "input_tokens": _count(usage, "inputTokens", model),
                "output_tokens": _count(usage, "outputTokens", model),
                "cache_read_tokens": _count(usage, "cacheReadTokens", model),
                "cache_write_tokens": _count(usage, "cacheWriteTokens", model),
                "reasoning_tokens": _count(usage, "reasoningTokens", model),
            },
            "model": model,
            "task": "turn",
            "source": FORMAT,
            "response_id": f"{sid}:shutdown:{ev['id']}:{model}",
        }
        if parse_timestamp(ev.get("timestamp")) is not None:
            data["ts"] = parse_timestamp(ev.get("timestamp"))
        out.append(Usage(sid, data))
    yield from out
