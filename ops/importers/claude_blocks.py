"""Claude Code content blocks -> Quill message dicts (one record at a time).

Mapping (see docs/importers.md): ``text`` blocks joined into ``content``; ``thinking`` ->
``reasoning`` (signatures kept in extra); ``tool_use`` / ``server_tool_use`` ->
``tool_calls`` (arguments = json.dumps(input)); ``image`` -> an ``image_url`` part with a
``data:`` URL (stored once by the store's blob table); a user record made only of
``tool_result`` blocks -> one ``tool`` message per block (id = uuid, or uuid + ":" + n when
there are several), named after its call. Other blocks are kept in ``extra.other_blocks``.
``sess`` is the per-thread emitter (``claude_code.Emitter``): it supplies ``extra()`` and the
tool-name map.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from quill.ops.importers.jsonlines import (
    join_text,
    make_message,
    make_tool_call,
    mark_injected,
)

if TYPE_CHECKING:
    from quill.ops.importers.claude_code import Emitter


BINARY_BLOCKS = ("image", "document")


def _image_part(block: dict) -> dict:
    """An ``image`` or ``document`` block -> an OpenAI ``image_url`` / ``file`` part whose
    base64 payload is a ``data:`` URL (the store keeps one copy per distinct payload)."""
    src = block.get("source") or {}
    if src.get("type") == "base64":
        url = (
            f"data:{src.get('media_type', 'application/octet-stream')};base64,{src.get('data', '')}"
        )
    elif src.get("type") == "text" and isinstance(src.get("data"), str):
        url = f"data:{src.get('media_type', 'text/plain')},{src['data']}"
    else:
        url = src.get("url") or src.get("file_id") or ""
    if block.get("type") == "document":
        part: dict = {"type": "file", "file": {"file_data": url}}
        if block.get("title"):
            part["file"]["filename"] = block["title"]
        return part
    return {"type": "image_url", "image_url": {"url": url}}


def _content(texts: list[str], images: list[dict]) -> Any:
    text = join_text(texts)
    if not images:
        return text
    parts = [{"type": "text", "text": text}] if text else []
    return parts + images


def _tool_result_content(raw: Any) -> Any:
    if isinstance(raw, str) or raw is None:
        return raw
    if not isinstance(raw, list):
        return json.dumps(raw, ensure_ascii=False)
    texts, images = [], []
    for block in raw:
        if not isinstance(block, dict):
            texts.append(str(block))
        elif block.get("type") == "text":
            texts.append(block.get("text") or "")
        elif block.get("type") in BINARY_BLOCKS:
            images.append(_image_part(block))
        else:
            texts.append(json.dumps(block, ensure_ascii=False))
    return _content(texts, images)


def assistant(sess: Emitter, rec: dict, msg: dict, mid: str, ts: float | None) -> dict:
    raw = msg.get("content")
    texts, images, thinking, calls, sigs, other = [], [], [], [], [], []
    for block in raw if isinstance(raw, list) else []:
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "text":
            texts.append(block.get("text") or "")
        elif btype == "thinking":
            thinking.append(block.get("thinking") or "")
            if block.get("signature"):
                sigs.append(block["signature"])
        elif btype in ("tool_use", "server_tool_use"):
            cid = str(block.get("id") or f"{mid}:call:{len(calls)}")
            sess.tool_names[cid] = block.get("name") or ""
            calls.append(make_tool_call(cid, block.get("name") or "", block.get("input") or {}))
        elif btype in BINARY_BLOCKS:
            images.append(_image_part(block))
        else:
            other.append(block)
    if isinstance(raw, str):
        texts.append(raw)
    extra = sess.extra(rec, msg)
    if isinstance(msg.get("usage"), dict):  # one API response spans several records: count it once
        extra["response_id"] = msg.get("id") or rec.get("requestId")
    if sigs:
        extra["thinking_signatures"] = sigs
    if other:
        extra["other_blocks"] = other
    return make_message(
        mid,
        "assistant",
        _content(texts, images),
        tool_calls=calls,
        reasoning=join_text(thinking),
        timestamp=ts,
        extra=extra,
    )


def _user(msg: dict) -> dict:
    """A user message marked ``INJECTED`` when Claude Code wrote it rather than the user: an
    ``isMeta`` record (a slash command's expanded prompt, a caveat, hook feedback). Text
    that is only tag blocks (``<command-name>``, ``<system-reminder>`` …) is marked for
    every format (``events.Message``)."""
    if (msg.get("extra") or {}).get("isMeta") is True:
        mark_injected(msg)
    return msg


def user(sess: Emitter, rec: dict, msg: dict, mid: str, ts: float | None) -> list[dict]:
    raw = msg.get("content")
    if not isinstance(raw, list):
        text = raw if isinstance(raw, str) else (None if raw is None else json.dumps(raw))
        return [_user(make_message(mid, "user", text, timestamp=ts, extra=sess.extra(rec, msg)))]
    results = [b for b in raw if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = [b for b in raw if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    out: list[dict] = []
    if rest or not results:
        texts, images = [], []
        for block in rest:
            btype = block.get("type") if isinstance(block, dict) else None
            if btype == "text":
                texts.append(block.get("text") or "")
            elif btype in BINARY_BLOCKS:
                images.append(_image_part(block))
            else:
                texts.append(
                    block if isinstance(block, str) else json.dumps(block, ensure_ascii=False)
                )
        out.append(
            _user(
                make_message(
                    mid, "user", _content(texts, images), timestamp=ts, extra=sess.extra(rec, msg)
                )
            )
        )
    several = len(results) > 1 or bool(out)
    for n, block in enumerate(results):
        cid = str(block.get("tool_use_id") or "")
        extra = (
            sess.extra(rec, msg)
            if n == 0
            else {"uuid": rec.get("uuid"), "parentUuid": rec.get("parentUuid")}
        )
        if "is_error" in block:
            extra["is_error"] = block["is_error"]
        out.append(
            make_message(
                f"{mid}:{n}" if several else mid,
                "tool",
                _tool_result_content(block.get("content")),
                tool_call_id=cid or None,
                name=sess.tool_names.get(cid),
                timestamp=ts,
                extra=extra,
            )
        )
    return out
