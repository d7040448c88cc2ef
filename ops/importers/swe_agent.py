"""SWE-agent trajectories (``*.traj``) -> one Quill session per file.

Input (sniffed from content): one JSON object ``{trajectory: [steps], history: [messages],
info: {exit_status, submission, model_stats}, environment, replay_config?}``. ``history`` is
the conversation the model saw (OpenAI-chat shaped, plus ``thought``, ``action``, ``agent``,
``message_type``, ``is_demo``); ``trajectory`` holds one step per action (``action``,
``observation``, ``thought``, ``response``, ``state``, ``execution_time``, ``messages``).

Mapping (message id = ``history:<index>``):

* ``system`` / ``user`` messages as they are (``is_demo`` demonstrations keep the flag in
  extra); ``agent`` and ``message_type`` in extra;
* ``assistant`` messages: content as is, ``thought`` in extra (it is the visible text before
  the command, already part of the content - not hidden reasoning, so not ``reasoning``
  unless the content does not hold it). Tool calls: the function-calling variant's
  ``tool_calls`` as they are; otherwise the ``action`` string is one synthesized call,
  id ``<message id>:action``, named by the command's first word, arguments
  ``{"command": action}``; a call id the file reuses (demonstration replays do) is stored
  as ``<id>#<n>`` (``jsonlines.CallIds``; the source ids in ``extra.source_tool_call_ids``);
* the message answering an action - ``role: tool`` with ``tool_call_ids`` (function
  calling), or the next non-demo ``user`` message after an assistant action (the classic
  variant, where SWE-agent sends the observation as user text) - becomes a ``tool`` message
  paired with that call (original role in ``extra.swe_agent_role``). The matching
  ``trajectory`` step's ``state`` and ``execution_time`` go into its extra;
* ``info.model_stats`` (``tokens_sent``, ``tokens_received``, ``api_calls``,
  ``instance_cost``): SWE-agent keeps no per-call counts, so the run's totals are one
  ``usage.record`` (``response_id`` = ``<session id>:model_stats``, ``meta.api_calls``
  says how many calls it sums); totals of zero (replays of recorded actions) record nothing.
Session id: ``swe-agent:<file>:<hash of history up to the first assistant message>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.events import Event, Message, SessionStart, Usage
from quill.ops.importers.jsonlines import (
    CallIds,
    Problem,
    content_session_id,
    make_message,
    make_tool_call,
    member_object,
    shape_problem,
)

FORMAT = "swe-agent"


def looks_like_document(doc: Any) -> bool:
    """True for a SWE-agent trajectory: ``history`` (list of role messages) and
    ``trajectory`` (list of steps with ``action``/``observation``)."""
    if not isinstance(doc, dict):
        return False
    hist, steps = doc.get("history"), doc.get("trajectory")
    return (
        isinstance(hist, list)
        and isinstance(steps, list)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in hist)
        and all(isinstance(s, dict) and "action" in s and "observation" in s for s in steps)
        and bool(hist or steps)
    )


def _tool_calls(m: dict, mid: str, ids: CallIds) -> list[dict]:
    calls = []
    for c in m.get("tool_calls") or []:
        if isinstance(c, dict) and c.get("id"):
            fn = member_object(c, "function")
            calls.append(
                make_tool_call(
                    ids.call(str(c["id"])), fn.get("name") or "", fn.get("arguments") or "{}"
                )
            )
    action = m.get("action")
    if not calls and isinstance(action, str) and action.strip():
        name = action.strip().split()[0]
        calls.append(make_tool_call(f"{mid}:action", name, {"command": action}))
    return calls


def _messages(doc: dict) -> Iterator[dict]:
    hist, steps = doc["history"], doc["trajectory"]
    pending: dict | None = None  # the last assistant call not answered yet (classic variant)
    names: dict[str, str] = {}
    ids = CallIds()
    step = 0
    for n, m in enumerate(hist):
        mid, role = f"history:{n}", m["role"]
        extra: dict[str, Any] = {
            "agent": m.get("agent"),
            "message_type": m.get("message_type"),
            "is_demo": m.get("is_demo"),
        }
        content = m.get("content")
        if role == "assistant":
            calls = _tool_calls(m, mid, ids)
            names.update({c["id"]: c["function"]["name"] for c in calls})
            thought = m.get("thought") if isinstance(m.get("thought"), str) else None
            hidden = thought if thought and thought.strip() not in str(content or "") else None
            extra.update(thought=thought, action=m.get("action"))
            source = [str(c.get("id")) for c in m.get("tool_calls") or [] if isinstance(c, dict)]
            if source and source != [c["id"] for c in calls]:
                extra["source_tool_call_ids"] = source  # a reused id was made unique
            pending = calls[0] if calls and not m.get("is_demo") else None
            yield make_message(
                mid, "assistant", content, tool_calls=calls, reasoning=hidden, extra=extra
            )
            continue
        result_ids = m.get("tool_call_ids") if isinstance(m.get("tool_call_ids"), list) else None
        answer = ids.result(str(result_ids[0])) if result_ids else None
        if answer is None and role == "user" and pending is not None and not m.get("is_demo"):
            answer = pending["id"]
        if answer is not None:
            if step < len(steps):
                s = steps[step]
                extra.update(state=s.get("state"), execution_time=s.get("execution_time"))
            step += 1
            pending = None
            extra.update(swe_agent_role=role, tool_call_ids=result_ids)
            yield make_message(
                mid, "tool", content, tool_call_id=answer, name=names.get(answer), extra=extra
            )
            continue
        yield make_message(mid, role, content, extra=extra)


def stream(path: Path, doc: dict, problems: list[Problem]) -> Iterator[Event]:
    """Events of one SWE-agent trajectory document."""
    hist = doc["history"]
    first = next((i for i, m in enumerate(hist) if m["role"] == "assistant"), len(hist) - 1)
    sid = content_session_id(FORMAT, Path(path).name, hist[: first + 1])
    info = member_object(doc, "info")
    stats = member_object(info, "model_stats")
    cfg = member_object(doc, "replay_config")
    agent = member_object(cfg, "agent")
    model = member_object(agent, "model")
    meta = {
        "source_file": Path(path).name,
        "exit_status": info.get("exit_status"),
        "submission": info.get("submission"),
        "model_stats": stats or None,
        "environment": doc.get("environment"),
        "steps": len(doc["trajectory"]),
    }
    yield SessionStart(
        {
            "session_id": sid,
            "source": FORMAT,
            "title": None,
            "model": model.get("name") if isinstance(model.get("name"), str) else None,
            "cwd": None,
            "started_at": None,
            "meta": {k: v for k, v in meta.items() if v is not None},
        }
    )
    try:
        for msg in _messages(doc):
            yield Message(sid, msg)
    except (TypeError, AttributeError, ValueError) as exc:
        problems.append(Problem(str(path), None, "skipped", f"history: {shape_problem(exc)}"))
    sent, received = stats.get("tokens_sent"), stats.get("tokens_received")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (sent, received)):
        if stats:
            problems.append(
                Problem(str(path), None, "skipped", "model_stats token counts not read")
            )
        return
    if sent or received:
        yield Usage(
            sid,
            {
                "usage": {"input_tokens": sent, "output_tokens": received},
                "task": "turn",
                "source": FORMAT,
                "response_id": f"{sid}:model_stats",
            },
        )
