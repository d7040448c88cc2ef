"""Gemini CLI session files -> one Quill session.

Input: one JSON document ``{sessionId, projectHash, startTime, lastUpdated, summary?,
messages: [...]}`` (Gemini CLI's ``chats/session-*.json``; stored upstream under any name,
so it is sniffed from content). Mapping, per entry of ``messages`` (id = the entry's ``id``):

* ``user`` -> a ``user`` message (``content`` a string or a list of ``{text}`` parts);
* ``gemini`` -> an ``assistant`` message: ``content``; ``thoughts`` (``{subject,
  description}``) joined into ``reasoning``; ``toolCalls`` -> ``tool_calls`` (``args`` as the
  JSON arguments); each call's ``result`` (``functionResponse.response``) -> a ``tool``
  message right after it, id ``<entry id>:<call id>``, named after the call; ``tokens`` and
  ``model`` kept in extra;
* ``info``, ``error``, ``warning`` and unknown entry types are CLI notices, not messages:
  counted in ``meta.entry_counts``.
The title is the document's ``summary`` when present. Session id: "gemini-cli:<sessionId>";
a document without one gets "gemini-cli:<file name>:<hash of its first entry>" (entries are
appended as the chat goes on, so the first one stays), never the bare file name that
same-named files in two folders would share (offered as ``legacy_id`` for older stores).
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
    content_session_id,
    join_text,
    make_message,
    make_tool_call,
    name_in_id,
    parse_timestamp,
    shape_problem,
)

FORMAT = "gemini-cli"
MESSAGE_TYPES = ("user", "gemini")


def looks_like_document(doc: Any) -> bool:
    """True for a Gemini CLI session document (a ``messages`` list of typed entries)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return False
    entries = doc["messages"]
    return all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in entries) and (
        any(m["type"] in MESSAGE_TYPES for m in entries) or (not entries and "sessionId" in doc)
    )


def _text(content: Any) -> Any:
    """Gemini content (a string or ``[{text} | {inlineData} | {fileData}]``) -> text, or
    OpenAI parts when it holds binary data (a ``data:`` URL the store keeps once)."""
    if content is None or isinstance(content, str):
        return content or None
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    texts, files = [], []
    for p in content:
        inline = p.get("inlineData") if isinstance(p, dict) else None
        if isinstance(inline, dict):
            mime = inline.get("mimeType") if isinstance(inline.get("mimeType"), str) else None
            mime = mime or "application/octet-stream"
            url = f"data:{mime};base64,{inline.get('data') or ''}"
            files.append(
                {"type": "image_url", "image_url": {"url": url}}
                if mime.startswith("image/")
                else {"type": "file", "file": {"file_data": url}}
            )
        elif isinstance(p, dict) and isinstance(p.get("text"), str):
            texts.append(p["text"])
        else:
            texts.append(p if isinstance(p, str) else json.dumps(p, ensure_ascii=False))
    text = join_text(texts)
    if not files:
        return text
    return ([{"type": "text", "text": text}] if text else []) + files


def _thoughts(thoughts: Any) -> str | None:
    if not isinstance(thoughts, list):
        return None
    out = []
    for t in thoughts:
        if isinstance(t, dict):
            subject, desc = t.get("subject"), t.get("description")
            out.append(f"{subject}: {desc}" if subject and desc else (subject or desc or ""))
    return join_text(out)


def _result_text(result: Any) -> Any:
    """A tool call's ``result`` list -> text (the response's ``output`` when it has one)."""
    texts = []
    for part in result if isinstance(result, list) else [result]:
        fr = part.get("functionResponse") if isinstance(part, dict) else None
        resp = fr.get("response") if isinstance(fr, dict) else None
        if isinstance(resp, dict) and set(resp) == {"output"} and isinstance(resp["output"], str):
            texts.append(resp["output"])
        elif resp is not None:
            texts.append(json.dumps(resp, ensure_ascii=False))
        elif part is not None:
            texts.append(part if isinstance(part, str) else json.dumps(part, ensure_ascii=False))
    return join_text(texts)


#: Gemini CLI ``tokens`` keys -> the ``usageMetadata`` fields they were copied from
#: (chatRecordingService.recordMessageTokens); the store reads that shape (usage_fields).
TOKEN_KEYS = {
    "input": "promptTokenCount",
    "output": "candidatesTokenCount",
    "cached": "cachedContentTokenCount",
    "thoughts": "thoughtsTokenCount",
    "tool": "toolUsePromptTokenCount",
    "total": "totalTokenCount",
}


def usage_of(tokens: Any) -> dict | None:
    """A ``gemini`` entry's ``tokens`` -> a Gemini ``usageMetadata`` object, or None when the
    entry has none (absent or null: the call's usage was never recorded).

    Raises ShapeError for tokens Quill cannot read (not an object, no known key, a count that
    is not a non-negative integer): the entry is then reported, never counted as zero."""
    if tokens is None:
        return None
    if not isinstance(tokens, dict) or not any(k in tokens for k in TOKEN_KEYS):
        raise ShapeError(f"tokens unreadable: {json.dumps(tokens, default=str)[:200]}")
    usage = {}
    for key, field in TOKEN_KEYS.items():
        value = tokens.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ShapeError(f"tokens.{key} must be a non-negative integer, got {value!r}")
        usage[field] = value
    return usage


def _entry(sid: str, n: int, m: dict, mid: str | None = None) -> list[dict]:
    """Messages of one ``user``/``gemini`` entry: the entry's own message, then a ``tool``
    message per tool call that has a result. ``mid``: the Quill id (default the entry's
    ``id``); ``tokens`` stay in extra (the call's usage: ``call_usage``). Raises ShapeError
    on a malformed entry."""
    mid = mid or str(m.get("id") or f"entry:{n}")
    ts = parse_timestamp(m.get("timestamp"))
    if m["type"] == "user":
        return [make_message(mid, "user", _text(m.get("content")), timestamp=ts)]
    calls, results = [], []
    tool_calls = m.get("toolCalls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise ShapeError(f"toolCalls must be a list, got {type(tool_calls).__name__}")
    for k, call in enumerate(tool_calls or []):
        if not isinstance(call, dict):
            continue
        cid = str(call.get("id") or f"{mid}:call:{k}")
        name = call.get("name") or ""
        calls.append(
            make_tool_call(cid, name, call.get("args") if call.get("args") is not None else {})
        )
        if call.get("result") is not None or call.get("status") not in (None, "success"):
            extra = {
                k2: call.get(k2) for k2 in ("status", "displayName", "resultDisplay", "timestamp")
            }
            results.append(
                make_message(
                    f"{mid}:{cid}",
                    "tool",
                    _result_text(call.get("result")),
                    tool_call_id=cid,
                    name=name,
                    timestamp=parse_timestamp(call.get("timestamp")) or ts,
                    extra=extra,
                )
            )
    extra = {k: m.get(k) for k in ("model", "tokens")}
    if m.get("thoughts"):
        extra["thoughts"] = m["thoughts"]
    main = make_message(
        mid,
        "assistant",
        _text(m.get("content")),
        tool_calls=calls,
        reasoning=_thoughts(m.get("thoughts")),
        timestamp=ts,
        extra=extra,
    )
    return [main, *results]


def call_usage(
    path: Path, sid: str, m: dict, eid: str, problems: list[Problem], where: str
) -> Iterator[Event]:
    """The ``Usage`` of a ``gemini`` entry's model call: its ``tokens`` as Gemini
    ``usageMetadata``, ``response_id`` ``<session id>:<entry id eid>`` (every copy of an entry —
    re-appended, carried by a compaction, in a ``.json`` and its ``.jsonl`` — is one call). A
    usage record, not a field of the message, so tokens that arrive after the message was
    imported are recorded by the next import. Unreadable tokens are reported, no call made."""
    if m.get("type") != "gemini":
        return
    try:
        usage = usage_of(m.get("tokens"))
    except ShapeError as exc:
        problems.append(Problem(str(path), None, "skipped", f"{where}: usage not recorded: {exc}"))
        return
    if usage is not None:
        data = {"usage": usage, "response_id": f"{sid}:{eid}", "task": "turn"}
        if isinstance(m.get("model"), str):
            data["model"] = m["model"]
        if parse_timestamp(m.get("timestamp")) is not None:
            data["ts"] = parse_timestamp(m.get("timestamp"))
        yield Usage(sid, data)


def stream(path: Path, doc: dict, problems: list[Problem]) -> Iterator[Event]:
    """Events of one Gemini CLI session document."""
    entries = doc.get("messages") or []
    sid = (
        doc.get("sessionId") if isinstance(doc.get("sessionId"), str) and doc["sessionId"] else None
    )
    counts: dict[str, int] = {}
    for m in entries:
        counts[m["type"]] = counts.get(m["type"], 0) + 1
    meta: dict[str, Any] = {"source_file": Path(path).name, "entry_counts": counts}
    for key in ("projectHash", "lastUpdated"):
        if doc.get(key) is not None:
            meta[key] = doc[key]
    legacy, opening = None, []
    if sid is None:
        meta["session_id_synthesized"] = True
        legacy = f"{FORMAT}:{name_in_id(Path(path).name)}"
        session_id = content_session_id(FORMAT, Path(path).name, entries[:1])
        problems.append(
            Problem(
                str(path),
                None,
                "repaired",
                "no sessionId; session id made from file name and first entry",
            )
        )
        first = next((m for m in entries if m["type"] in MESSAGE_TYPES), None)
        try:
            opening = (
                _entry(session_id, entries.index(first), first)[:1] if first is not None else []
            )
        except (TypeError, AttributeError, ValueError):
            opening = []
    else:
        session_id = f"{FORMAT}:{sid}"
    model = next(
        (
            m.get("model")
            for m in entries
            if m["type"] == "gemini" and isinstance(m.get("model"), str)
        ),
        None,
    )
    yield SessionStart(
        {
            "session_id": session_id,
            "source": FORMAT,
            "title": doc.get("summary") if isinstance(doc.get("summary"), str) else None,
            "model": model,
            "cwd": None,
            "started_at": parse_timestamp(doc.get("startTime")),
            "meta": meta,
        },
        legacy,
        opening,
    )
    for n, m in enumerate(entries):
        if m["type"] not in MESSAGE_TYPES:
            continue
        try:
            msgs = _entry(session_id, n, m)
        except (TypeError, AttributeError, ValueError) as exc:
            problems.append(
                Problem(
                    str(path), None, "skipped", f"messages[{n}] ({m['type']}): {shape_problem(exc)}"
                )
            )
            continue
        for msg in msgs:
            yield Message(session_id, msg)
        eid = str(m.get("id") or f"entry:{n}")
        yield from call_usage(path, session_id, m, eid, problems, f"messages[{n}]")
