"""ShareGPT / Hermes-Agent trajectory JSONL -> one Quill session per line.

Each line is ``{conversations: [{from, value}], timestamp, model, ...}``.
Session id = "sharegpt:<file name>:<hash of the line's conversations>" (a line is a whole
conversation; "sharegpt:<file name>:<line>", the id older versions gave, is offered as
``legacy_id``: same-named files in two folders shared it). Message id = "<turn index>" (or
"<turn>:<k>" when one ``tool`` turn holds several responses). Mapping:

* ``from``: system -> system, human/user -> user, gpt/assistant -> assistant,
  tool/function_response/observation -> tool;
* ``<think>...</think>`` in assistant text -> ``reasoning``;
* ``<tool_call>{"name", "arguments"}</tool_call>`` blocks -> ``tool_calls`` with
  synthesised ids "sharegpt_<turn>_<k>" (the source has none);
* ``<tool_response>{"tool_call_id", "name", "content"}</tool_response>`` ->
  one tool message each, linked to the pending call with the same name (else
  the oldest pending call); the source's own tool_call_id is kept in extra.
* the trajectory ``timestamp`` (naive local time, read as UTC) is given to
  every message.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from quill.ops.importers.jsonlines import (
    ImportedSession,
    Problem,
    content_session_id,
    line_session_id,
    make_message,
    make_tool_call,
    parse_timestamp,
    shape_problem,
)

FORMAT = "sharegpt"
_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "tool": "tool",
    "function_response": "tool",
    "observation": "tool",
    "function_call": "assistant",
}
_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_RESP = re.compile(r"<tool_response>(.*?)(?:</tool_response>|\Z)", re.S)


def looks_like_record(obj: Any) -> bool:
    """True for ``{"conversations": [{"from": ..., "value": ...}, ...]}``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        return False
    turns = obj["conversations"]
    return bool(turns) and all(isinstance(t, dict) and "from" in t and "value" in t for t in turns)


def _loads_loose(text: str) -> Any:
    """json.loads, falling back to a Python literal (single-quoted dicts occur)."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _split_assistant(value: str) -> tuple[str, str | None, list[str]]:
    """-> (remaining text, reasoning, raw tool_call bodies)."""
    thoughts = [m.strip() for m in _THINK.findall(value)]
    rest = _THINK.sub("", value)
    if "</think>" in rest and "<think>" not in rest:  # opening tag omitted by the model
        head, _, rest = rest.partition("</think>")
        thoughts.insert(0, head.strip())
    calls = _CALL.findall(rest)
    rest = _CALL.sub("", rest).strip()
    reasoning = "\n\n".join(t for t in thoughts if t) or None
    return rest, reasoning, calls


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class _Conversation:
    """Builds the messages of one trajectory (instance state only)."""

    def __init__(self, path: Path, line: int | None, ts: float | None, problems: list[Problem]):
        self.path, self.line, self.ts, self.problems = path, line, ts, problems
        self.messages: list[dict] = []
        self.pending: list[tuple[str, str]] = []  # (synthetic call id, tool name)

    def problem(self, turn: int, reason: str) -> None:
        self.problems.append(
            Problem(str(self.path), self.line, "repaired", f"turn {turn}: {reason}")
        )

    def assistant(self, i: int, value: str, extra: dict, is_call_turn: bool) -> None:
        bodies: list[str]
        if is_call_turn:  # LLaMA-Factory style: the whole value is one call
            text, reasoning, bodies = "", None, [value]
        else:
            text, reasoning, bodies = _split_assistant(value)
        calls, kept = [], []
        for k, body in enumerate(bodies):
            obj = _loads_loose(body)
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                kept.append(f"<tool_call>{body}</tool_call>")
                self.problem(i, "unparseable <tool_call> kept as text")
                continue
            cid = f"sharegpt_{i}_{k}"
            args = obj.get("arguments", obj.get("parameters", {}))
            calls.append(make_tool_call(cid, obj["name"], args if args is not None else {}))
            self.pending.append((cid, obj["name"]))
        content = "\n\n".join(x for x in [text, *kept] if x) or None
        self.messages.append(
            make_message(
                str(i),
                "assistant",
                content,
                tool_calls=calls,
                reasoning=reasoning,
                timestamp=self.ts,
                extra=extra,
            )
        )

    def match(self, name: str | None) -> tuple[str, str] | None:
        for n, (_, cname) in enumerate(self.pending):
            if name is not None and cname == name:
                return self.pending.pop(n)
        return self.pending.pop(0) if self.pending else None

    def tool(self, i: int, value: str, extra: dict) -> None:
        bodies = _RESP.findall(value)
        if not bodies:
            hit = self.match(None)
            self.messages.append(
                make_message(
                    str(i),
                    "tool",
                    value,
                    tool_call_id=hit and hit[0],
                    name=hit and hit[1],
                    timestamp=self.ts,
                    extra=extra,
                )
            )
            return
        for k, body in enumerate(bodies):
            obj = _loads_loose(body)
            ex = dict(extra)
            if isinstance(obj, dict):
                name = obj.get("name") if isinstance(obj.get("name"), str) else None
                content = _as_text(obj.get("content", obj.get("result")))
                if obj.get("tool_call_id") is not None:
                    ex["source_tool_call_id"] = obj["tool_call_id"]
            else:
                name, content = None, body.strip()
            hit = self.match(name)
            mid = str(i) if len(bodies) == 1 else f"{i}:{k}"
            self.messages.append(
                make_message(
                    mid,
                    "tool",
                    content if content is not None else body.strip(),
                    tool_call_id=hit[0] if hit else ex.get("source_tool_call_id"),
                    name=name or (hit and hit[1]),
                    timestamp=self.ts,
                    extra=ex,
                )
            )


def _turn(conv: _Conversation, i: int, turn: dict) -> None:
    src = str(turn.get("from"))
    role = _ROLES.get(src.lower(), "user")
    value = turn.get("value")
    value = value if isinstance(value, str) else _as_text(value)
    extra = {k: v for k, v in turn.items() if k not in ("from", "value")}
    if src.lower() not in ("system", "human", "gpt", "tool"):
        extra["from"] = src
    if role == "assistant":
        conv.assistant(i, value or "", extra, src.lower() == "function_call")
    elif role == "tool":
        conv.tool(i, value or "", extra)
    else:
        conv.messages.append(make_message(str(i), role, value, timestamp=conv.ts, extra=extra))


def parse_records(
    path: Path, records: Iterable[tuple[int | None, Any]], problems: list[Problem]
) -> list[ImportedSession]:
    """One session per trajectory record; non-trajectory records are skipped."""
    sessions: list[ImportedSession] = []
    seen: dict[int | None, int] = {}
    name = Path(path).name
    for line, rec in records:
        if not looks_like_record(rec):
            problems.append(
                Problem(str(path), line, "skipped", "not a {conversations: [{from, value}]} record")
            )
            continue
        legacy = line_session_id(FORMAT, name, line, seen)
        sid = content_session_id(FORMAT, name, rec["conversations"])
        ts = parse_timestamp(rec.get("timestamp"))
        conv = _Conversation(path, line, ts, problems)
        for i, turn in enumerate(rec["conversations"]):
            try:
                _turn(conv, i, turn)
            except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
                problems.append(
                    Problem(str(path), line, "skipped", f"turn {i}: {shape_problem(exc)}")
                )
        meta = {k: v for k, v in rec.items() if k not in ("conversations", "model")}
        meta.update({"source_file": name, "line": line})
        if (
            isinstance(rec.get("timestamp"), str)
            and ts is not None
            and not re.search(r"(Z|[+-]\d\d:?\d\d)$", rec["timestamp"].strip())
        ):
            meta["timestamp_naive_read_as_utc"] = True
        session = {
            "session_id": sid,
            "source": FORMAT,
            "title": None,
            "model": rec.get("model") if isinstance(rec.get("model"), str) else None,
            "cwd": None,
            "started_at": ts,
            "meta": meta,
        }
        sessions.append(ImportedSession(session=session, messages=conv.messages, legacy_id=legacy))
    return sessions
