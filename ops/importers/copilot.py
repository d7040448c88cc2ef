"""GitHub Copilot CLI ``events.jsonl`` -> one Quill session.

Input: Copilot CLI's session event log (``~/.copilot/session-state/<session id>/events.jsonl``),
one event a line: ``{type, data, id, parentId, timestamp}``. Mapping (message id = the
event ``id``):

* ``session.start`` -> the session: ``copilot-cli:<data.sessionId>``, ``startTime``, ``cwd``
  and git context from ``data.context``, ``copilotVersion`` in meta;
* ``system.message`` -> a ``system`` message (the prompt the model was given);
* ``user.message`` -> a ``user`` message (``content``; ``transformedContent``, what the model
  was sent, and ``attachments`` in extra);
* ``assistant.message`` -> an ``assistant`` message: ``content``, ``reasoningText`` ->
  ``reasoning``, ``toolRequests`` -> ``tool_calls``; ``model``, ``outputTokens`` and the
  request ids in extra. The log gives no input token count, so no usage row is made from
  ``outputTokens`` alone (an input of zero would be a wrong bill, not a missing one);
* ``tool.execution_complete`` -> a ``tool`` message (``result.content``, or ``error.message``
  when it failed; ``is_error`` in extra), named after ``tool.execution_start``'s
  ``toolName`` (else the request's name);
* ``session.model_change`` -> the session model (first one);
* every other type (``assistant.turn_start/end``, ``tool.execution_start``, ``hook.*``,
  ``permission.*``, ``session.permissions_changed``, ``system.notification``, ``abort``…) is
  bookkeeping: counted in ``meta.record_counts``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.copilot_agents import AGENT_EVENTS, Agents, shutdown_usage
from quill.ops.importers.events import Event, Message, SessionStart
from quill.ops.importers.jsonlines import (
    Problem,
    ShapeError,
    content_session_id,
    iter_jsonl,
    make_message,
    make_tool_call,
    member_object,
    parse_timestamp,
    shape_problem,
)
from quill.ops.importers.source import Source, opened

FORMAT = "copilot-cli"
#: event types that carry the transcript (what detection keys on) -> a ``data`` key each has
CARRIERS = {
    "session.start": "sessionId",
    "user.message": "content",
    "assistant.message": "content",
    "tool.execution_complete": "toolCallId",
}


def looks_like_record(obj: Any) -> bool:
    """True for a Copilot CLI event that carries the transcript: ``{type, data, id}`` with a
    ``type`` of ``CARRIERS`` whose ``data`` object has that type's key."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and obj["type"] in CARRIERS
        and isinstance(obj.get("data"), dict)
        and CARRIERS[obj["type"]] in obj["data"]
        and isinstance(obj.get("id"), str)
    )


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ShapeError(f"content must be a string, got {type(value).__name__}")
    return value


class _State:
    def __init__(self) -> None:
        self.tool_names: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.start: dict | None = None
        self.model: str | None = None
        self.agents = Agents()


def _message(st: _State, ev: dict) -> dict | None:
    """The Quill message of one event, or None for bookkeeping. Raises ShapeError."""
    kind, data, mid = ev["type"], ev["data"], ev["id"]
    ts = parse_timestamp(ev.get("timestamp"))
    if kind == "system.message":
        return make_message(mid, "system", _text(data.get("content")), timestamp=ts)
    if kind == "user.message":
        extra = {k: data.get(k) for k in ("transformedContent", "attachments", "interactionId")}
        return make_message(mid, "user", _text(data.get("content")), timestamp=ts, extra=extra)
    if kind == "assistant.message":
        requests = data.get("toolRequests") or []
        if not isinstance(requests, list):
            raise ShapeError(f"toolRequests must be a list, got {type(requests).__name__}")
        calls = []
        for req in requests:
            if isinstance(req, dict):
                cid = str(req.get("toolCallId") or f"{mid}:call:{len(calls)}")
                st.tool_names.setdefault(cid, req.get("name") or "")
                calls.append(make_tool_call(cid, req.get("name") or "", req.get("arguments") or {}))
        keys = ("model", "outputTokens", "messageId", "requestId", "apiCallId", "turnId")
        return make_message(
            mid,
            "assistant",
            _text(data.get("content")),
            tool_calls=calls,
            reasoning=_text(data.get("reasoningText")),
            timestamp=ts,
            extra={k: data.get(k) for k in keys},
        )
    if kind == "tool.execution_start":
        if isinstance(data.get("toolCallId"), str) and isinstance(data.get("toolName"), str):
            st.tool_names[data["toolCallId"]] = data["toolName"]
        return None
    if kind == "tool.execution_complete":
        cid = str(data.get("toolCallId") or "")
        result, error = data.get("result"), data.get("error")
        content = result.get("content") if isinstance(result, dict) else None
        if content is None and isinstance(error, dict):
            content = error.get("message")
        extra = {"is_error": data.get("success") is False, "error": error}
        if isinstance(result, dict) and result.get("detailedContent") not in (None, content):
            extra["detailedContent"] = result["detailedContent"]
        return make_message(
            mid,
            "tool",
            _text(content),
            tool_call_id=cid,
            name=st.tool_names.get(cid, ""),
            timestamp=ts,
            extra=extra,
        )
    return None


def _session(path: Path, st: _State, first: Any) -> dict:
    data = (st.start or {}).get("data") or {}
    context = member_object(data, "context")
    meta: dict[str, Any] = {"source_file": Path(path).name, "record_counts": dict(st.counts)}
    for key in ("copilotVersion", "producer", "version"):
        if data.get(key) is not None:
            meta[key] = data[key]
    for key in ("branch", "headCommit", "gitRoot"):
        if context.get(key) is not None:
            meta[key] = context[key]
    sid = data.get("sessionId")
    if isinstance(sid, str) and sid:
        session_id = f"{FORMAT}:{sid}"
    else:
        meta["session_id_synthesized"] = True
        session_id = content_session_id(FORMAT, Path(path).name, first)
    return {
        "session_id": session_id,
        "source": FORMAT,
        "title": None,
        "model": st.model,
        "cwd": context.get("cwd"),
        "started_at": parse_timestamp(data.get("startTime") or (st.start or {}).get("timestamp")),
        "meta": meta,
    }


def stream(path: Path | Source, problems: list[Problem]) -> Iterator[Event]:
    """Events of one Copilot CLI events.jsonl (a ``Source``: one version, or a path opened
    once). Pass 1 reads the session header, model and counts (the header can come late in a
    resumed log); pass 2 emits the messages; both read the same descriptor."""
    with opened(path) as src:
        yield from _stream(src, problems)


def _stream(src: Source, problems: list[Problem]) -> Iterator[Event]:
    path = src.path
    st, first = _State(), None
    for _line, ev in iter_jsonl(src, []):
        if first is None:
            first = ev
        if not isinstance(ev, dict) or not isinstance(ev.get("type"), str):
            continue
        st.counts[ev["type"]] = st.counts.get(ev["type"], 0) + 1
        data = member_object(ev, "data")
        if ev["type"] == "session.start" and st.start is None:
            st.start = ev
        elif ev["type"] == "session.model_change" and st.model is None:
            st.model = data.get("newModel") if isinstance(data.get("newModel"), str) else None
        elif ev["type"] in AGENT_EVENTS:
            st.agents.note(ev, data)
        elif ev["type"] == "assistant.message" and st.model is None and not st.agents.of(ev):
            st.model = data.get("model") if isinstance(data.get("model"), str) else None
    session = _session(path, st, first)
    sid = session["session_id"]
    yield SessionStart(session)
    started: set[str] = set()
    for line, ev in iter_jsonl(src, problems):
        if not (isinstance(ev, dict) and isinstance(ev.get("type"), str)):
            problems.append(Problem(str(path), line, "skipped", "not an event object"))
            continue
        if not isinstance(ev.get("data"), dict) or not isinstance(ev.get("id"), str):
            problems.append(Problem(str(path), line, "skipped", "event without data object or id"))
            continue
        try:
            msg = _message(st, ev)
            if ev["type"] == "session.shutdown":
                yield from shutdown_usage(sid, ev)
        except (TypeError, AttributeError, ValueError) as exc:
            problems.append(
                Problem(str(path), line, "skipped", f"{ev['type']}: {shape_problem(exc)}")
            )
            continue
        if msg is None:
            continue
        agent = st.agents.of(ev)
        if agent is None:
            yield Message(sid, msg)
            continue
        child = f"{sid}:agent:{agent}"
        if agent not in started:  # a delegate child, started at its first message
            started.add(agent)
            yield SessionStart(st.agents.session(agent, child, session))
        yield Message(child, msg)
