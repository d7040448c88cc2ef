"""The readable and training export formats of ``quill export`` (``ops/transfer/export.py``
has the lossless ``quill`` one): ``markdown`` (the display view, tool calls and results
folded), ``openai`` (the model view with the stored system prompt and tools) and ``sharegpt``
(the model view, reasoning as ``<think>`` blocks). One session per call.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any, TypeVar

from quill.store.read.reader import Reader

_Missing = TypeVar("_Missing", str, None)


def _fenced(text: str, info: str = "") -> list[str]:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in
    it (CommonMark: a fence closes only on a run at least as long), so tool output holding
    its own fences cannot close the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def _part_text(part: Any, missing: _Missing) -> str | _Missing:
    """A content part's text for a flat export: its ``text`` when that is a string, a bare
    string part as is, else ``missing`` (``[type]``-style placeholder or None to drop it).
    Parts are stored verbatim, so ``text`` may be any JSON value (null, a number, an object)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return part["text"]
    return missing


def _function(call: Any) -> dict[str, Any]:
    """A stored tool call's ``function`` object, or ``{}`` when the call or its ``function``
    is not an object (tool calls are stored verbatim: ``function`` may be any JSON value)."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def markdown(r: Reader, sid: str) -> str:
    """One session's display transcript as Markdown; tool calls and results folded."""
    session = r.get_session(sid) or {"id": sid}
    out = [
        f"# {session.get('title') or sid}",
        "",
        f"- session: `{sid}`"
        + (f" · source: {session['source']}" if session.get("source") else "")
        + (f" · model: {session['model']}" if session.get("model") else ""),
        "",
    ]
    for m in r.get_messages(sid, "display"):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(
                _part_text(p, f"[{p.get('type')}]" if isinstance(p, dict) else json.dumps(p))
                for p in content
            )
        if m["role"] in ("tool", "function"):
            out += [
                "<details><summary>tool result"
                f"{' · ' + html.escape(m['name']) if m.get('name') else ''}</summary>",
                "",
                *_fenced(str(content or "")),
                "",
                "</details>",
                "",
            ]
            continue
        out += [f"## {m['role']}", ""]
        if m.get("reasoning"):
            out += [
                "<details><summary>reasoning</summary>",
                "",
                m["reasoning"],
                "",
                "</details>",
                "",
            ]
        if content:
            out += [str(content), ""]
        for call in m.get("tool_calls") or []:
            fn = _function(call)
            out += [
                f"<details><summary>tool call · {html.escape(str(fn.get('name')))}</summary>",
                "",
                *_fenced(str(fn.get("arguments", "")), "json"),
                "",
                "</details>",
                "",
            ]
    return "\n".join(out)


def openai_chat(r: Reader, sid: str) -> dict[str, Any]:
    """``{"messages": model view, "tools": [...]}`` (OpenAI chat fine-tuning shape, no Quill
    keys): the session's stored system prompt (store/apply/context.py) leads the messages unless
    the transcript already starts with a system or developer message; its tool array, when
    one was sent, is ``tools``."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    with r.snapshot():
        messages = [{k: m[k] for k in keep if k in m} for m in r.get_messages(sid, "model")]
        context = r.context(sid)
    if context["system_prompt"] is not None and not (
        messages and messages[0]["role"] in ("system", "developer")
    ):
        messages.insert(0, {"role": "system", "content": context["system_prompt"]})
    return {
        "messages": messages,
        **({"tools": context["tools"]} if context["tools"] is not None else {}),
    }


_SHAREGPT_ROLE = {
    "system": "system",
    "developer": "system",
    "user": "human",
    "assistant": "gpt",
    "tool": "tool",
    "function": "tool",
}


def _arguments(fn: dict[str, Any]) -> Any:
    """A call's arguments as Hermes-style ShareGPT writes them: the JSON object itself, not
    OpenAI's JSON text of it; text that is not a JSON object stays text."""
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return args
        return parsed if isinstance(parsed, dict) else args
    return args


def sharegpt(r: Reader, sid: str) -> dict[str, Any]:
    """``{"id", "conversations": [{"from", "value"}]}`` from the model view; reasoning leads its
    turn as a ``<think>`` block and tool calls follow as ``<tool_call>`` JSON blocks, as
    Hermes-style ShareGPT does (and as the ShareGPT importer reads them back)."""
    turns = []
    for m in r.get_messages(sid, "model"):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(
                t
                for t in (_part_text(p, None) for p in content if isinstance(p, dict))
                if t is not None
            )
        value = content or ""
        if m.get("reasoning"):
            value = f"<think>\n{m['reasoning']}\n</think>\n{value}"
        for call in m.get("tool_calls") or []:
            fn = _function(call)
            call_json = json.dumps({"name": fn.get("name"), "arguments": _arguments(fn)})
            value += f"\n<tool_call>\n{call_json}\n</tool_call>"
        turns.append({"from": _SHAREGPT_ROLE.get(m["role"], m["role"]), "value": value.strip()})
    return {"id": sid, "conversations": turns}
