"""OpenHands event trajectories -> Quill sessions.

Input (sniffed from content): a JSON array of OpenHands events (a saved trajectory, e.g.
``tests/runtime/trajs/*.json``), or evaluation output - JSON lines (or one JSON object) of
``{instance_id, instruction, metadata, history: [events], metrics, test_result, error}``, one
session per instance. An event is ``{id, timestamp, source: user|agent|environment, message,
action + args | observation + content + extras, cause, tool_call_metadata}``.

Mapping (one event at most one message; id = ``event:<id>``):

* action ``system`` -> ``system`` message (``args.content``); ``message`` -> ``user`` or
  ``assistant`` by ``source`` (``args.content``, image urls in extra);
* an action with ``tool_call_metadata`` -> an ``assistant`` message carrying every tool call
  of its ``model_response`` (``choices[0].message.tool_calls``; content = that message's
  text, ``reasoning_content`` -> reasoning) and the response's ``usage`` (``response_id`` =
  the response id, so actions of one multi-call response count it once). Later actions of
  the same response add no message; a call id that comes again in the session is stored as
  ``<id>#<n>`` (``jsonlines.CallIds``) and its results follow it;
* an observation with ``tool_call_metadata`` -> a ``tool`` message (``tool_call_id``, name =
  ``function_name``, ``extras``/``success``/``cause`` in extra); one without it that answers
  a tool-call action through ``cause`` is linked the same way;
* ``recall`` observations (workspace context, microagent knowledge), ``error``
  observations no action answers and ``condense`` observations (a condensation summary) ->
  ``user`` messages (OpenHands sends them to the model as user text), marked
  ``extra.openhands_observation``;
* a ``condensation`` action -> a compaction: what the model is fed from then on (the events
  no condensation forgot, the latest summary as a ``user`` message) is the compacted set
  (``openhands_condense``); ``condensation_request`` actions leave the model's view;
* a ``delegate`` action's run (the events the delegate agent added to the stream before the
  closing ``delegate`` observation) -> a ``delegate`` child session
  ``<session id>:delegate:<action event id>`` (``openhands_delegates``);
* ``change_agent_state``, ``recall`` actions, ``null`` and ``agent_state_changed``
  observations and unknown shapes -> no message; every event type is counted in
  ``meta.event_counts``.
Usage shapes are litellm's ChatCompletion usage (``prompt_tokens`` with, for Anthropic models,
``cache_creation_input_tokens``/``cache_read_input_tokens`` beside it), mapped to Quill's
shape (``usage_quill``); a usage with neither prompt nor completion counts is not recorded
(a ``skipped`` problem), never as zero. Session ids are content-derived
(``jsonlines.content_session_id`` over the first event, plus ``instance_id`` for evaluation
output).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers import openhands_condense as condense
from quill.ops.importers import openhands_delegates as delegates
from quill.ops.importers.events import Event, Message, SessionStart
from quill.ops.importers.jsonlines import (
    CallIds,
    Problem,
    ShapeError,
    content_session_id,
    make_message,
    make_tool_call,
    member_object,
    parse_timestamp,
    shape_problem,
)

FORMAT = "openhands"
SOURCES = ("user", "agent", "environment")
#: Observations OpenHands turns into user text for the model when no tool call answers them.
USER_OBSERVATIONS = ("recall", "error", "condense")


def looks_like_event(value: Any) -> bool:
    """True for one OpenHands event (an ``action`` or ``observation`` with a known source)."""
    return (
        isinstance(value, dict)
        and value.get("source") in SOURCES
        and "id" in value
        and (isinstance(value.get("action"), str) or isinstance(value.get("observation"), str))
    )


def looks_like_events(values: list[Any]) -> bool:
    """True for a non-empty list whose every element is an OpenHands event."""
    return bool(values) and all(looks_like_event(v) for v in values)


def looks_like_instance(value: Any) -> bool:
    """True for one evaluation-output record: ``{instance_id, history: [events]}``."""
    return (
        isinstance(value, dict)
        and "instance_id" in value
        and isinstance(value.get("history"), list)
        and looks_like_events(value["history"])
    )


def usage_quill(raw: Any) -> dict | None:
    """litellm ChatCompletion usage -> Quill's usage shape, or None when it holds no
    ``prompt_tokens``/``completion_tokens`` (unreadable: not recorded). Anthropic cache counts
    ride beside ``prompt_tokens``, which already includes them (litellm adds them in)."""
    if not isinstance(raw, dict) or not ({"prompt_tokens", "completion_tokens"} & raw.keys()):
        return None
    pdet = member_object(raw, "prompt_tokens_details")
    cdet = member_object(raw, "completion_tokens_details")
    return {
        "input_tokens": raw.get("prompt_tokens") or 0,
        "output_tokens": raw.get("completion_tokens") or 0,
        "cache_read_tokens": raw.get("cache_read_input_tokens") or pdet.get("cached_tokens") or 0,
        "cache_write_tokens": raw.get("cache_creation_input_tokens") or 0,
        "reasoning_tokens": cdet.get("reasoning_tokens") or 0,
    }


def _kind(ev: dict) -> str:
    return f"action:{ev['action']}" if "action" in ev else f"observation:{ev['observation']}"


class _Session:
    """Mapping state of one event list."""

    def __init__(self, path: Path, sid: str, problems: list[Problem]):
        self.path, self.sid, self.problems = path, sid, problems
        self.responses: set[str] = set()  # model responses already emitted
        self.calls: dict[Any, tuple[str, str]] = {}  # action event id -> (call id, name)
        self.ids = CallIds()  # stored call ids, unique in the session

    def action(self, ev: dict) -> list[dict]:
        args = member_object(ev, "args")
        mid, ts, act = f"event:{ev['id']}", parse_timestamp(ev.get("timestamp")), ev["action"]
        base = {"openhands_event": {"id": ev["id"], "source": ev["source"], "kind": act}}
        tcm = ev.get("tool_call_metadata")
        if isinstance(tcm, dict):
            return self._tool_action(ev, tcm, args, mid, ts, base)
        if act == "system":
            rest = {k: v for k, v in args.items() if k != "content"}
            return [
                make_message(
                    mid, "system", args.get("content"), timestamp=ts, extra={**base, "args": rest}
                )
            ]
        if act == "message":
            role = "user" if ev["source"] == "user" else "assistant"
            content = (
                args.get("content") if isinstance(args.get("content"), str) else ev.get("message")
            )
            extra = {**base, "image_urls": args.get("image_urls") or None}
            return [make_message(mid, role, content, timestamp=ts, extra=extra)]
        return []

    def _tool_action(self, ev, tcm, args, mid, ts, base) -> list[dict]:
        resp = member_object(tcm, "model_response")
        cid, name = str(tcm.get("tool_call_id") or f"{mid}:call"), tcm.get("function_name") or ""
        rid = resp.get("id")
        if isinstance(rid, str) and rid in self.responses:
            self.calls[ev["id"]] = (self.ids.result(cid), name)
            return []  # another call of a response already stored with all its calls
        choice = (resp.get("choices") or [{}])[0] if isinstance(resp.get("choices"), list) else {}
        msg = choice.get("message") if isinstance(choice, dict) else None
        msg = msg if isinstance(msg, dict) else {}
        source = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict) and c.get("id")]
        if cid not in {str(c["id"]) for c in source}:  # no model response: the action's own call
            rest = {k: v for k, v in args.items() if k != "thought"}
            source.append({"id": cid, "function": {"name": name, "arguments": rest}})
        calls = [
            make_tool_call(
                self.ids.call(str(c["id"])),
                (c.get("function") or {}).get("name") or "",
                (c.get("function") or {}).get("arguments") or "{}",
            )
            for c in source
        ]
        self.calls[ev["id"]] = (self.ids.result(cid), name)
        content = msg.get("content") if isinstance(msg.get("content"), str) else args.get("thought")
        extra: dict[str, Any] = {**base, "model": resp.get("model")}
        if isinstance(rid, str):
            self.responses.add(rid)
            usage = usage_quill(resp.get("usage"))
            if usage is not None:
                extra.update(usage=usage, response_id=rid)
            elif resp.get("usage") is not None:
                extra["unread_usage"] = resp["usage"]
                self.problems.append(
                    Problem(
                        str(self.path),
                        None,
                        "skipped",
                        f"event {ev['id']}: usage shape not read, not recorded",
                    )
                )
        return [
            make_message(
                mid,
                "assistant",
                content or None,
                tool_calls=calls,
                reasoning=msg.get("reasoning_content")
                if isinstance(msg.get("reasoning_content"), str)
                else None,
                timestamp=ts,
                extra=extra,
            )
        ]

    def observation(self, ev: dict) -> list[dict]:
        obs, mid, ts = ev["observation"], f"event:{ev['id']}", parse_timestamp(ev.get("timestamp"))
        tcm = ev.get("tool_call_metadata")
        link = (
            (self.ids.result(str(tcm.get("tool_call_id"))), tcm.get("function_name") or "")
            if isinstance(tcm, dict) and tcm.get("tool_call_id")
            else self.calls.get(ev.get("cause"))
        )
        extra = {
            "openhands_event": {"id": ev["id"], "source": ev["source"], "kind": obs},
            "cause": ev.get("cause"),
            "extras": ev.get("extras") or None,
            "success": ev.get("success"),
        }
        content = ev.get("content") if isinstance(ev.get("content"), str) else ev.get("message")
        if link is not None:
            return [
                make_message(
                    mid,
                    "tool",
                    content,
                    tool_call_id=link[0],
                    name=link[1],
                    timestamp=ts,
                    extra=extra,
                )
            ]
        if obs in USER_OBSERVATIONS:
            extra["openhands_observation"] = obs
            return [make_message(mid, "user", content, timestamp=ts, extra=extra)]
        return []


def _check(ev: dict) -> None:
    """Raise ``ShapeError`` naming the first field of ``ev`` whose JSON type cannot be read."""
    for key in ("id", "cause"):
        v = ev.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            raise ShapeError(f"{key} must be a number or a string, got {type(v).__name__}")
    for key in ("args", "extras", "tool_call_metadata"):
        if ev.get(key) is not None and not isinstance(ev[key], dict):
            raise ShapeError(f"{key} must be an object, got {type(ev[key]).__name__}")
    tcm = ev.get("tool_call_metadata") or {}
    for key, types in (
        ("tool_call_id", (str, int)),
        ("function_name", str),
        ("model_response", dict),
    ):
        if tcm.get(key) is not None and not isinstance(tcm[key], types):
            raise ShapeError(f"tool_call_metadata.{key} has type {type(tcm[key]).__name__}")
    resp = tcm.get("model_response") or {}
    if resp.get("id") is not None and not isinstance(resp["id"], str):
        raise ShapeError(f"model_response.id must be a string, got {type(resp['id']).__name__}")
    choices = resp.get("choices")
    if choices is not None and not (
        isinstance(choices, list) and all(isinstance(c, dict) for c in choices)
    ):
        raise ShapeError("model_response.choices must be a list of objects")
    msg = (choices or [{}])[0].get("message") if choices else None
    if msg is not None and not isinstance(msg, dict):
        raise ShapeError(f"model_response message must be an object, got {type(msg).__name__}")
    calls = (msg or {}).get("tool_calls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(isinstance(c, dict) and isinstance(c.get("function") or {}, dict) for c in calls)
    ):
        raise ShapeError("model_response tool_calls must be a list of {id, function} objects")


def _events(path: Path, sid: str, events: list[dict], problems: list[Problem]) -> Iterator[Event]:
    st, view = _Session(path, sid, problems), condense.View(sid)
    for n, ev in enumerate(events):
        try:
            _check(ev)
            msgs = st.action(ev) if "action" in ev else st.observation(ev)
            compact = view.add(ev, msgs)
        except (TypeError, AttributeError, ValueError) as exc:
            problems.append(Problem(str(path), None, "skipped", f"event {n}: {shape_problem(exc)}"))
            continue
        for m in msgs:
            yield Message(sid, m)
        if compact is not None:
            yield compact


def _with_runs(path: Path, sid: str, evs: list, problems: list[Problem]) -> Iterator[Event]:
    """The main agent's messages, then each delegate run with messages as a ``delegate``
    child session ``<sid>:delegate:<action event id>`` (``openhands_delegates``)."""
    main, runs = delegates.split(evs)
    yield from _events(path, sid, main, problems)
    children: dict[int, str] = {}
    for run in runs:
        child = sid + run.session_suffix()
        msgs = list(_events(path, child, run.events, problems))
        if not msgs:
            continue  # a parent's own history: the action and its result, nothing between
        children[id(run)] = child
        start = _session(path, child, run.events, {"delegate": run.meta()}, None)
        start.session["parent_id"] = children.get(id(run.parent), sid) if run.parent else sid
        start.session["parent_kind"] = "delegate"
        if "parent_tool_call_id" in run.meta():
            start.session["meta"]["parent_tool_call_id"] = run.meta()["parent_tool_call_id"]
        yield start
        yield from msgs


def _session(
    path: Path, sid: str, events: list[dict], meta: dict, title: str | None
) -> SessionStart:
    counts: dict[str, int] = {}
    for ev in events:
        counts[_kind(ev)] = counts.get(_kind(ev), 0) + 1
    model = next(
        (
            ev["tool_call_metadata"]["model_response"].get("model")
            for ev in events
            if isinstance(ev.get("tool_call_metadata"), dict)
            and isinstance(ev["tool_call_metadata"].get("model_response"), dict)
        ),
        None,
    )
    return SessionStart(
        {
            "session_id": sid,
            "source": FORMAT,
            "title": title,
            "model": model,
            "cwd": None,
            "started_at": parse_timestamp(events[0].get("timestamp")) if events else None,
            "meta": {"source_file": Path(path).name, "event_counts": counts, **meta},
        }
    )


def stream_events(path: Path, events: list[Any], problems: list[Problem]) -> Iterator[Event]:
    """Events of one saved trajectory (a JSON array of OpenHands events)."""
    evs = [e for e in events if looks_like_event(e)]
    sid = content_session_id(FORMAT, Path(path).name, evs[:1])
    yield _session(path, sid, evs, {}, None)
    yield from _with_runs(path, sid, evs, problems)


def stream_instances(
    path: Path, records: Iterable[tuple[int | None, Any]], problems: list[Problem]
) -> Iterator[Event]:
    """Events of evaluation output: one session per ``{instance_id, history}`` record."""
    for line, rec in records:
        if not looks_like_instance(rec):
            problems.append(Problem(str(path), line, "skipped", "not an OpenHands instance record"))
            continue
        evs = rec["history"]
        sid = content_session_id(FORMAT, Path(path).name, [rec["instance_id"], evs[:1]])
        metrics, metadata, result = (
            member_object(rec, k) for k in ("metrics", "metadata", "test_result")
        )
        meta = {
            "instance_id": rec["instance_id"],
            "error": rec.get("error"),
            "agent_class": metadata.get("agent_class"),
            "accumulated_token_usage": metrics.get("accumulated_token_usage"),
            "git_patch": result.get("git_patch"),
        }
        yield _session(
            path,
            sid,
            evs,
            {k: v for k, v in meta.items() if v is not None},
            str(rec["instance_id"]),
        )
        yield from _with_runs(path, sid, evs, problems)
