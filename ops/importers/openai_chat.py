"""OpenAI chat-completions messages -> Quill sessions.

Accepted shapes (detection is deliberately strict: every message must have a
known ``role`` and only keys an OpenAI chat message can carry):

* a JSON array of messages, or a JSON object ``{"messages": [...]}``
  -> one session "openai-chat:<file name>:<hash of the opening messages>";
* JSONL, one message per line -> one session "openai-chat:<file name>:<hash of the opening>";
* JSONL, one ``{"messages": [...], ...}`` per line -> one session per line,
  "openai-chat:<file name>:<hash of the line's messages>".

The opening (``jsonlines.opening_length``: leading system messages + the first other) does
not change when the file grows by appended messages, so a re-import keeps its id; two files
of the same name hold different conversations, so they get different ids (docs/importers.md,
"Session ids"). The ids older versions gave ("openai-chat:<file name>",
"...:<line>") are offered as ``legacy_id`` for stores that hold them.

Message id = its index in the session ("0", "1", ...). ``tool_calls`` are
normalised (missing ids synthesised as "call_<index>_<k>", arguments made a
JSON string); legacy ``function_call`` becomes a tool call; tool messages get
``name`` from the matching call when absent. A call id the session reuses (some logs number
calls ``call_0``, ``call_1`` afresh each turn) is stored as ``<id>#<n>`` and its results
follow it (``jsonlines.CallIds``): the store keeps one live result per call id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from quill.ops.importers.jsonlines import (
    CallIds,
    ImportedSession,
    Problem,
    content_session_id,
    join_text,
    line_session_id,
    make_message,
    make_tool_call,
    member_object,
    opening_length,
    parse_timestamp,
    shape_problem,
)

FORMAT = "openai-chat"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MESSAGE_KEYS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "function_call",
        "refusal",
        "reasoning",
        "reasoning_content",
        "thinking",
        "annotations",
        "audio",
        "id",
        "timestamp",
        "created_at",
        "weight",
        "metadata",
    }
)
_REASONING_KEYS = ("reasoning", "reasoning_content", "thinking")
_HANDLED = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "function_call",
        "timestamp",
        "created_at",
        *_REASONING_KEYS,
    }
)


def looks_like_message(obj: Any) -> bool:
    """A dict with a known role, only OpenAI message keys, and content or a call."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("role"), str)
        and obj["role"] in ROLES
        and set(obj) <= MESSAGE_KEYS
        and ("content" in obj or "tool_calls" in obj or "function_call" in obj)
    )


def looks_like_conversation(obj: Any) -> bool:
    """``{"messages": [message, ...]}`` with at least one message."""
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    return isinstance(msgs, list) and bool(msgs) and all(looks_like_message(m) for m in msgs)


def looks_like_message_list(obj: Any) -> bool:
    """A non-empty JSON array made only of OpenAI chat messages."""
    return isinstance(obj, list) and bool(obj) and all(looks_like_message(m) for m in obj)


def _content(raw: Any) -> Any:
    if raw is None or isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        return json.dumps(raw, ensure_ascii=False)
    texts, parts, has_media = [], [], False
    for part in raw:
        if isinstance(part, str):
            texts.append(part)
            parts.append({"type": "text", "text": part})
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
            parts.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict):
            has_media = True
            parts.append(part)
        else:
            texts.append(json.dumps(part))
            parts.append({"type": "text", "text": json.dumps(part)})
    return parts if has_media else join_text(texts)


def _message(i: int, m: dict, names: dict[str, str], ids: CallIds) -> dict:
    role = "tool" if m.get("role") == "function" else str(m.get("role"))
    calls = []
    for k, call in enumerate(m.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        fn = member_object(call, "function")
        cid = ids.call(str(call.get("id") or f"call_{i}_{k}"))  # unique in the session
        name = fn.get("name") or call.get("name") or ""
        names[cid] = name
        args = fn.get("arguments", call.get("arguments"))
        calls.append(make_tool_call(cid, name, args if args is not None else {}))
    fc = m.get("function_call")
    if isinstance(fc, dict):
        cid = f"call_{i}_{len(calls)}"
        names[cid] = fc.get("name") or ""
        calls.append(make_tool_call(cid, fc.get("name") or "", fc.get("arguments") or {}))
    tcid = m.get("tool_call_id")
    tcid = ids.result(str(tcid)) if tcid is not None else None
    name = m.get("name") if isinstance(m.get("name"), str) else None
    if role == "tool" and name is None and tcid:
        name = names.get(tcid)
    reasoning = next((m[k] for k in _REASONING_KEYS if isinstance(m.get(k), str) and m[k]), None)
    extra = {k: v for k, v in m.items() if k not in _HANDLED}
    if m.get("role") == "function":
        extra["original_role"] = "function"
    ts = parse_timestamp(m.get("timestamp", m.get("created_at")))
    return make_message(
        str(i),
        role,
        _content(m.get("content")),
        tool_calls=calls,
        tool_call_id=tcid,
        name=name,
        reasoning=reasoning,
        timestamp=ts,
        extra=extra,
    )


def _growing_session(
    path: Path, msgs: list, meta: dict, problems: list[Problem], model: Any = None
) -> ImportedSession:
    """The one session of a whole file (it may grow by appended messages): its id hashes
    the opening messages as found in the file."""
    name = Path(path).name
    n = opening_length([m.get("role") if isinstance(m, dict) else None for m in msgs])
    session = _session(
        content_session_id(FORMAT, name, msgs[:n]), msgs, meta, path, None, problems, model
    )
    session.legacy_id, session.opening = f"{FORMAT}:{name}", [str(i) for i in range(n)]
    return session


def _session(
    sid: str,
    msgs: list,
    meta: dict,
    path: Path,
    line: int | None,
    problems: list[Problem],
    model: Any = None,
) -> ImportedSession:
    names: dict[str, str] = {}
    ids = CallIds()
    out = []
    for i, m in enumerate(msgs):
        if not looks_like_message(m):
            problems.append(
                Problem(str(path), line, "skipped", f"message {i} is not an OpenAI chat message")
            )
            continue
        try:
            out.append(_message(i, m, names, ids))
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
            problems.append(
                Problem(str(path), line, "skipped", f"message {i}: {shape_problem(exc)}")
            )
    times = [m["timestamp"] for m in out if m.get("timestamp") is not None]
    session = {
        "session_id": sid,
        "source": FORMAT,
        "title": None,
        "model": model if isinstance(model, str) else None,
        "cwd": None,
        "started_at": min(times) if times else None,
        "meta": meta,
    }
    return ImportedSession(session=session, messages=out)


def parse_document(path: Path, doc: Any, problems: list[Problem]) -> list[ImportedSession]:
    """A whole-file JSON array of messages, or an object with ``messages``."""
    name = Path(path).name
    meta: dict[str, Any] = {"source_file": name, "variant": "json-array"}
    if isinstance(doc, dict):
        meta.update({k: v for k, v in doc.items() if k not in ("messages", "model")})
        meta["variant"] = "json-object"
        return [_growing_session(path, doc.get("messages") or [], meta, problems, doc.get("model"))]
    return [_growing_session(path, doc, meta, problems)]


def parse_records(
    path: Path, records: Iterable[tuple[int | None, Any]], problems: list[Problem]
) -> list[ImportedSession]:
    """JSONL: either one message per line (one session) or one conversation per line."""
    name = Path(path).name
    records = list(records)
    if any(isinstance(r, dict) and "messages" in r for _, r in records):
        sessions, seen = [], {}
        for line, rec in records:
            if not looks_like_conversation(rec):
                problems.append(
                    Problem(str(path), line, "skipped", "not a {messages: [...]} conversation")
                )
                continue
            legacy = line_session_id(FORMAT, name, line, seen)
            meta = {key: v for key, v in rec.items() if key not in ("messages", "model")}
            meta.update({"source_file": name, "line": line, "variant": "jsonl-conversations"})
            session = _session(
                content_session_id(FORMAT, name, rec["messages"]),
                rec["messages"],
                meta,
                path,
                line,
                problems,
                rec.get("model"),
            )
            session.legacy_id = legacy
            sessions.append(session)
        return sessions
    msgs = []
    for line, rec in records:
        if not looks_like_message(rec):
            problems.append(Problem(str(path), line, "skipped", "not an OpenAI chat message"))
            continue
        msgs.append(rec)
    if not msgs:
        return []
    return [
        _growing_session(path, msgs, {"source_file": name, "variant": "jsonl-messages"}, problems)
    ]
