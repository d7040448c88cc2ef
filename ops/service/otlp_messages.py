"""GenAI semantic-convention messages (as OTLP span attributes or span events) → Quill messages.

Two forms are read, both turned into the current form first so one mapping serves both:

* **attributes** (current conventions): ``gen_ai.input.messages`` / ``gen_ai.output.messages``,
  each a list of ``{role, parts: [{type: text|tool_call|tool_call_response|reasoning|…}],
  finish_reason?}``, as a JSON string or a structured (array / kvlist) attribute value;
  ``gen_ai.system_instructions``: a list of parts or a string;
* **span events** (the older conventions): ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message`` (``content``, ``tool_calls``), ``gen_ai.tool.message``
  (``content``, ``id``) in order, and ``gen_ai.choice`` (``index``, ``finish_reason``,
  ``message``), the outputs.

Message ids make repeated history collapse in the store (``messages.append`` skips ids the
session holds): a chat span repeats the whole conversation so far in its inputs, so the id of
the message at position *i* is a hash chained over the conversation's messages 0..i (role and
parts; ``finish_reason`` left out, as an output is repeated without it as the next span's
input). The same message at the same place in history gets the same id in every span that
carries it, and two equal messages at different places differ. A tool result's id is
``tool:<tool call id>``, whichever span carries it (a chat span's inputs, or the tool-execution
span that ran it), so it is stored once.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue


class GenAIContentError(ValueError):
    """A GenAI attribute or event that is present but unreadable (not JSON, not a list of
    messages): the span is rejected with this message (a partial success), never guessed."""


def value(v: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as plain Python: str, bool, int, float, list, dict, or None
    (unset); bytes become base64 text, as in OTLP JSON."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":  # as OTLP JSON writes bytes: base64 text (a blob part's content)
        return base64.b64encode(v.bytes_value).decode("ascii")
    return getattr(v, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    """A repeated ``KeyValue`` field as ``{key: value}`` (the last of a repeated key wins)."""
    return {kv.key: value(kv.value) for kv in kvs}


def structured(raw: Any, what: str) -> Any:
    """An attribute that holds JSON: a string is decoded, a structured value taken as is.
    Raises ``GenAIContentError`` for a string that is not JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            raise GenAIContentError(f"{what} is not JSON") from None
        except RecursionError:
            raise GenAIContentError(f"{what} is nested too deep to read") from None
    return raw


def message_list(raw: Any, what: str) -> list[dict[str, Any]]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` as a list of message objects
    (``[]`` when absent). Raises ``GenAIContentError`` when it is not a list of objects with a
    string ``role``."""
    if raw is None:
        return []
    got = structured(raw, what)
    if not isinstance(got, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in got
    ):
        raise GenAIContentError(f"{what} is not a list of messages with a role")
    for m in got:
        parts = m.get("parts")
        if parts is not None and (
            not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts)
        ):
            raise GenAIContentError(f"{what}: a message's parts are not a list of objects")
    return got


def instructions(raw: Any) -> str | None:
    """``gen_ai.system_instructions`` (a list of parts, one part, or a string) as text, or None
    when absent or without text."""
    if raw is None:
        return None
    got = structured(raw, "gen_ai.system_instructions") if isinstance(raw, str) else raw
    if isinstance(got, str):
        return got
    parts = got if isinstance(got, list) else [got]
    texts = [
        p["content"] for p in parts if isinstance(p, dict) and isinstance(p.get("content"), str)
    ]
    if not texts and parts:
        raise GenAIContentError("gen_ai.system_instructions holds no text part")
    return "\n".join(texts) or None


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def tool_result_text(result: Any) -> str:
    """A tool's result as message text: a string as is, anything else as compact JSON."""
    return (
        result
        if isinstance(result, str)
        else json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    )


def tool_message(call_id: str, name: Any, result: Any) -> dict[str, Any]:
    """The ``tool`` message for one tool call's result (id ``tool:<call id>``)."""
    msg = {"id": f"tool:{call_id}", "role": "tool", "tool_call_id": call_id}
    if isinstance(name, str):
        msg["name"] = name
    msg["content"] = tool_result_text(result)
    return msg


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def to_quill(msg: dict[str, Any], message_id: str) -> list[dict[str, Any]]:
    """One GenAI message → Quill messages: its ``tool_call_response`` parts become ``tool``
    messages (first, as a provider sends them), the rest one message with id ``message_id``:
    text parts joined into ``content``, ``tool_call`` parts into ``tool_calls``, ``reasoning``
    parts into ``reasoning``, other parts (blobs, URIs, unknown types) kept in ``parts``."""
    texts, calls, reasoning, other, out = [], [], [], [], []
    for part in msg.get("parts") or []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(_text(part.get("content", "")))
        elif kind == "tool_call":
            calls.append(
                {
                    "id": part.get("id"),
                    "type": "function",
                    "function": {
                        "name": part.get("name"),
                        "arguments": _arguments(part.get("arguments")),
                    },
                }
            )
        elif kind == "tool_call_response" and isinstance(part.get("id"), str):
            result = part["response"] if "response" in part else part.get("result")
            out.append(tool_message(part["id"], part.get("name"), result))
        elif kind == "reasoning":
            reasoning.append(_text(part.get("content", "")))
        else:
            other.append(part)
    if texts or calls or reasoning or other or not out:
        main: dict[str, Any] = {"id": message_id, "role": msg["role"]}
        main["content"] = "\n".join(texts) if texts else None
        if calls:
            main["tool_calls"] = calls
        if reasoning:
            main["reasoning"] = "\n".join(reasoning)
        if other:
            main["parts"] = other
        if isinstance(msg.get("finish_reason"), str):
            main["finish_reason"] = msg["finish_reason"]
        out.append(main)
    return out


def conversation(
    genai: list[dict[str, Any]], carried: int = 0, chains: dict | None = None, key: str = ""
) -> tuple[list[dict[str, Any]], int]:
    """A span's GenAI messages in conversation order (inputs, then outputs) → ``(Quill
    messages with chained ids (module doc), how many of them come from the first
    ``carried`` GenAI messages)``.

    ``chains`` (one dict per export, ``key`` the session) remembers the last conversation
    walked for each key: a span repeating it reuses each message's id and Quill form while its
    messages compare equal, so a long conversation's spans cost what they add, not their whole
    history each (the messages returned are copies: callers stamp them)."""
    last = chains.get(key, []) if chains is not None else []
    chain, out, entries, n_carried, same = hashlib.sha256(), [], [], 0, True
    for i, msg in enumerate(genai):
        part = {"role": msg.get("role"), "parts": msg.get("parts")}
        same = same and i < len(last) and last[i][0] == part
        if same and last[i][3] == msg:
            entry = last[i]
        else:
            if same:
                chain = last[i][1]
            else:
                chain = chain.copy()  # entries keep their own state: never update a kept one
                chain.update(json.dumps(part, sort_keys=True, separators=(",", ":")).encode())
                chain.update(b"\n")
            entry = (part, chain, to_quill(msg, "m:" + chain.hexdigest()[:32]), msg)
        chain = entry[1]
        entries.append(entry)
        out.extend(dict(m) for m in entry[2])
        if i < carried:
            n_carried = len(out)
    if chains is not None:
        chains[key] = entries
    return out, n_carried


#: Older-form message event name → role.
EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _event_message(role: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One older-form event's fields (``content``, ``tool_calls``, ``id``) as a current-form
    message."""
    content = fields.get("content")
    if isinstance(content, str) and content[:1] in "[{":
        try:
            content = json.loads(content)
        except ValueError:
            pass  # a text that starts with a bracket: kept as the text it is
    if role == "tool":
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": fields.get("id"), "response": content}],
        }
    parts: list[dict[str, Any]] = []
    if content not in (None, ""):
        parts.append({"type": "text", "content": content})
    calls = structured(fields.get("tool_calls"), "tool_calls") or []
    for call in calls if isinstance(calls, list) else [calls]:
        if not isinstance(call, dict):
            raise GenAIContentError("a tool call is not an object")
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def event_messages(events: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The older event form of a span's ``events`` → ``(inputs, outputs)`` as current-form
    messages (``gen_ai.choice`` events are the outputs, by ``index``). Raises
    ``GenAIContentError`` for an unreadable ``message`` or ``tool_calls``."""
    inputs, choices = [], []
    for event in events:
        fields = attributes(event.attributes)
        if event.name in EVENT_ROLES:
            role = (
                fields.get("role")
                if isinstance(fields.get("role"), str)
                else EVENT_ROLES[event.name]
            )
            inputs.append(_event_message(role, fields))
        elif event.name == "gen_ai.choice":
            body = structured(fields.get("message"), "gen_ai.choice message") or {}
            if not isinstance(body, dict):
                raise GenAIContentError("gen_ai.choice message is not an object")
            msg = _event_message(body.get("role") or "assistant", body)
            if isinstance(fields.get("finish_reason"), str):
                msg["finish_reason"] = fields["finish_reason"]
            index = fields.get("index")
            choices.append((index if isinstance(index, int) else 0, msg))
    return inputs, [m for _, m in sorted(choices, key=lambda c: c[0])]
