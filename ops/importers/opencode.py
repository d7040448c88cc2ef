"""opencode session exports (``opencode export <session id>``) -> one Quill session.

Input: one JSON document ``{info: <session>, messages: [{info: <message>, parts: [...]}]}``
(the shape opencode's storage keeps under ``storage/session``, ``message`` and ``part``,
joined). Mapping (message id = the message ``info.id``):

* ``info`` -> the session ``opencode:<id>``: ``title``, ``directory`` (cwd), ``time.created``
  (ms) as start, ``version``/``projectID``/``slug`` in meta; a ``parentID`` makes it a
  ``delegate`` child of ``opencode:<parentID>`` (opencode's subagent sessions);
* a ``user`` message -> a ``user`` message: its ``text`` parts joined (``synthetic`` ones —
  file contents opencode injected — included, as the model saw them), ``file`` parts in extra;
* an ``assistant`` message -> an ``assistant`` message: ``text`` parts -> content,
  ``reasoning`` parts -> reasoning, ``tool`` parts -> tool calls (``callID``, ``tool``,
  ``state.input``); each tool part whose ``state.status`` is ``completed`` or ``error`` ->
  a ``tool`` message ``<message id>:<callID>`` (``state.output`` or ``state.error``);
  ``modelID``, ``providerID``, ``agent``, ``finish``, ``error``, ``cost`` in extra;
* each ``step-finish`` part (one model call) -> a ``Usage`` (``response_id`` = the part id):
  ``tokens {input, output, reasoning, cache {read, write}}`` where ``input`` excludes the
  cache; whether ``output`` includes ``reasoning`` is read off ``total`` (module ``_usage``);
* ``step-start``, ``patch``, ``snapshot``, ``agent``, ``subtask``, ``compaction`` and unknown
  parts are counted in ``meta.part_counts``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.events import Event, Message, SessionStart, Usage
from quill.ops.importers.jsonlines import (
    Problem,
    ShapeError,
    join_text,
    make_message,
    make_tool_call,
    member_object,
    parse_timestamp,
    shape_problem,
)

FORMAT = "opencode"


def looks_like_document(doc: Any) -> bool:
    """True for an opencode export: ``info`` with a string ``id`` and ``messages`` of
    ``{info: {role}, parts: [...]}``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("info"), dict):
        return False
    msgs = doc.get("messages")
    return (
        isinstance(doc["info"].get("id"), str)
        and isinstance(msgs, list)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("info"), dict)
            and isinstance(m.get("parts"), list)
            for m in msgs
        )
    )


def _count(obj: Any, *path: str) -> int:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    if obj is None:
        return 0
    if isinstance(obj, bool) or not isinstance(obj, int) or obj < 0:
        raise ShapeError(f"tokens.{'.'.join(path)} must be a non-negative integer, got {obj!r}")
    return obj


def _usage(tokens: Any) -> dict:
    """opencode ``tokens`` -> Quill's usage shape. ``input`` excludes cache reads and writes
    (``total`` = input + output + cache, as in every real file); ``output`` includes
    ``reasoning`` unless ``total`` says it was counted beside it. Raises ShapeError."""
    if not isinstance(tokens, dict):
        raise ShapeError(f"tokens must be an object, got {type(tokens).__name__}")
    inp, out, rsn = _count(tokens, "input"), _count(tokens, "output"), _count(tokens, "reasoning")
    read, write = _count(tokens, "cache", "read"), _count(tokens, "cache", "write")
    if tokens.get("total") == inp + out + rsn + read + write and rsn:
        out += rsn  # reasoning reported beside the output
    return {
        "input_tokens": inp + read + write,
        "output_tokens": max(out, rsn),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": rsn,
    }


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return json.dumps(value, ensure_ascii=False)


def _messages(info: dict, parts: list) -> list[dict]:
    mid, role = str(info.get("id")), info.get("role")
    ts = parse_timestamp((info.get("time") or {}).get("created"))
    texts, reasoning, calls, results, files = [], [], [], [], []
    for p in parts:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "text":
            texts.append(p.get("text"))
        elif kind == "reasoning":
            reasoning.append(p.get("text"))
        elif kind == "file":
            files.append({k: p.get(k) for k in ("filename", "mime", "url")})
        elif kind == "tool":
            cid, name = str(p.get("callID") or p.get("id")), p.get("tool") or ""
            state = member_object(p, "state")
            calls.append(make_tool_call(cid, name, state.get("input") or {}))
            if state.get("status") in ("completed", "error"):
                end = (state.get("time") or {}).get("end") if isinstance(state, dict) else None
                results.append(
                    make_message(
                        f"{mid}:{cid}",
                        "tool",
                        _json_text(state.get("output") or state.get("error")),
                        tool_call_id=cid,
                        name=name,
                        timestamp=parse_timestamp(end) or ts,
                        extra={
                            "is_error": state.get("status") == "error",
                            "title": state.get("title"),
                        },
                    )
                )
    if role == "user":
        return [make_message(mid, "user", join_text(texts), timestamp=ts, extra={"files": files})]
    if role != "assistant":
        raise ShapeError(f"role must be user or assistant, got {role!r}")
    keys = ("modelID", "providerID", "agent", "mode", "finish", "error", "cost", "parentID")
    main = make_message(
        mid,
        "assistant",
        join_text(texts),
        tool_calls=calls,
        reasoning=join_text(reasoning),
        timestamp=ts,
        extra={k: info.get(k) for k in keys} | ({"files": files} if files else {}),
    )
    return [main, *results]


def _calls(sid: str, info: dict, parts: list) -> Iterator[Usage]:
    for p in parts:
        if isinstance(p, dict) and p.get("type") == "step-finish" and "tokens" in p:
            yield Usage(
                sid,
                {
                    "usage": _usage(p["tokens"]),
                    "response_id": f"{sid}:{p.get('id')}",
                    "model": info.get("modelID"),
                    "provider": info.get("providerID"),
                    "ts": parse_timestamp((info.get("time") or {}).get("completed"))
                    or parse_timestamp((info.get("time") or {}).get("created")),
                },
            )


def stream(path: Path, doc: dict, problems: list[Problem]) -> Iterator[Event]:
    """Events of one opencode export document."""
    info = doc["info"]
    sid = f"{FORMAT}:{info['id']}"
    counts: dict[str, int] = {}
    meta: dict[str, Any] = {"source_file": Path(path).name, "part_counts": counts}
    for key in ("version", "projectID", "slug", "summary"):
        if info.get(key) is not None:
            meta[key] = info[key]
    model = next(
        (
            m["info"]["modelID"]
            for m in doc["messages"]
            if isinstance(m["info"].get("modelID"), str)
        ),
        None,
    )
    session = {
        "session_id": sid,
        "source": FORMAT,
        "title": info.get("title") if isinstance(info.get("title"), str) else None,
        "model": model,
        "cwd": info.get("directory"),
        "started_at": parse_timestamp((info.get("time") or {}).get("created")),
        "meta": meta,
    }
    if isinstance(info.get("parentID"), str):
        session["parent_id"] = f"{FORMAT}:{info['parentID']}"
        session["parent_kind"] = "delegate"
    for m in doc["messages"]:
        for p in m["parts"]:
            kind = str(p.get("type")) if isinstance(p, dict) else "not an object"
            counts[kind] = counts.get(kind, 0) + 1
    yield SessionStart(session)
    for n, m in enumerate(doc["messages"]):
        try:
            out = _messages(m["info"], m["parts"])
        except (TypeError, AttributeError, ValueError) as exc:
            problems.append(
                Problem(str(path), None, "skipped", f"messages[{n}]: {shape_problem(exc)}")
            )
            continue
        for msg in out:
            yield Message(sid, msg)
        try:  # a call whose tokens cannot be read is reported, never counted as zero
            yield from list(_calls(sid, m["info"], m["parts"]))
        except ShapeError as exc:
            problems.append(
                Problem(str(path), None, "skipped", f"messages[{n}]: usage not recorded: {exc}")
            )
