"""OpenInference spans → the GenAI semantic conventions' attributes, so one mapping
(``otlp_map``) serves both (docs/importers.md, "OpenInference").

OpenInference (Arize Phoenix's conventions) is what the OpenAI Agents SDK's OpenTelemetry
instrumentation (``openinference-instrumentation-openai-agents``), LlamaIndex, DSPy, CrewAI,
smolagents and others emit. A span is OpenInference when it has ``openinference.span.kind``;
its messages are flattened attributes::

    llm.input_messages.<i>.message.role / .content / .name / .tool_call_id
    llm.input_messages.<i>.message.contents.<j>.message_content.type / .text / .image.image.url
    llm.input_messages.<i>.message.tool_calls.<k>.tool_call.id / .function.name
                                                         / .function.arguments
    (llm.output_messages.* the same)

Read as: ``LLM`` → ``chat`` (``gen_ai.input.messages`` / ``output.messages`` as structured
lists of ``{role, parts}``; leading ``system`` inputs → ``gen_ai.system_instructions``;
``llm.tools.<i>.tool.json_schema`` → ``gen_ai.tool.definitions``; ``llm.token_count.*`` →
``gen_ai.usage.*``; ``llm.model_name`` and ``llm.provider`` / ``llm.system``), ``TOOL`` →
``execute_tool`` (a result only with a call id: ``tool.id`` / ``tool_call.id``), ``AGENT`` →
``invoke_agent`` (``agent.name``), ``EMBEDDING`` → ``embeddings``. Other kinds (``CHAIN``,
``RETRIEVER`` …) are not GenAI spans.

Consecutive assistant messages that hold only tool calls are one message: the Responses API
lists each call as its own item (and its instrumentation writes them so in inputs) but groups
a response's calls in one output message, so both forms must chain to the same ids.
"""

from __future__ import annotations

import json
import re
from typing import Any

from quill.ops.service.otlp_messages import GenAIContentError

KIND = "openinference.span.kind"
OPERATIONS = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
OPERATIONS["EMBEDDING"] = "embeddings"
USAGE = {
    "llm.token_count.prompt": "gen_ai.usage.input_tokens",
    "llm.token_count.completion": "gen_ai.usage.output_tokens",
    "llm.token_count.prompt_details.cache_read": "gen_ai.usage.cache_read.input_tokens",
    "llm.token_count.prompt_details.cache_write": "gen_ai.usage.cache_creation.input_tokens",
    "llm.token_count.completion_details.reasoning": "gen_ai.usage.reasoning.output_tokens",
}
_MESSAGE = re.compile(r"(\d+)\.message\.(.+)")
_PART = re.compile(r"contents\.(\d+)\.message_content\.(.+)")
_CALL = re.compile(r"tool_calls\.(\d+)\.tool_call\.(.+)")


def is_genai(attrs: dict[str, Any]) -> bool:
    """Whether ``attrs`` are an OpenInference span of a kind Quill reads."""
    return attrs.get(KIND) in OPERATIONS


def _flat(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``{i: {"fields": {...}, "parts": {j: {...}}, "calls": {k: {...}}}}`` of one flattened
    message list (``prefix`` ``llm.input_messages`` or ``llm.output_messages``)."""
    out: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, raw in attrs.items():
        if not key.startswith(start):
            continue
        m = _MESSAGE.fullmatch(key[len(start) :])
        if m is None:
            continue
        msg = out.setdefault(int(m[1]), {"fields": {}, "parts": {}, "calls": {}})
        rest = m[2]
        if part := _PART.fullmatch(rest):
            msg["parts"].setdefault(int(part[1]), {})[part[2]] = raw
        elif call := _CALL.fullmatch(rest):
            msg["calls"].setdefault(int(call[1]), {})[call[2]] = raw
        else:
            msg["fields"][rest] = raw
    return out


def _part(fields: dict[str, Any]) -> dict[str, Any]:
    kind = fields.get("type")
    if kind in ("text", "reasoning"):
        return {"type": kind, "content": fields.get("text", "")}
    if kind == "image" and isinstance(fields.get("image.image.url"), str):
        return {"type": "uri", "modality": "image", "uri": fields["image.image.url"]}
    return {"type": kind if isinstance(kind, str) else "unknown", **fields}


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    """One flattened OpenInference message as a GenAI ``{role, parts}`` message."""
    fields = flat["fields"]
    role = fields.get("role")
    if not isinstance(role, str):
        raise GenAIContentError("an OpenInference message has no role")
    content = fields.get("content")
    if role == "tool" and isinstance(fields.get("tool_call_id"), str):
        part = {"type": "tool_call_response", "id": fields["tool_call_id"], "response": content}
        if isinstance(fields.get("name"), str):
            part["name"] = fields["name"]
        return {"role": role, "parts": [part]}
    parts = [_part(flat["parts"][j]) for j in sorted(flat["parts"])]
    if not parts and content not in (None, ""):
        parts = [{"type": "text", "content": content}]
    for k in sorted(flat["calls"]):
        call = flat["calls"][k]
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("function.name"),
                "arguments": call.get("function.arguments", "{}"),
            }
        )
    return {"role": role, "parts": parts}


def _calls_only(msg: dict[str, Any]) -> bool:
    parts = msg["parts"]
    return (
        msg["role"] == "assistant" and bool(parts) and all(p["type"] == "tool_call" for p in parts)
    )


def messages(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The message list under ``prefix``, in index order, consecutive tool-call-only assistant
    messages merged (module doc). Raises ``GenAIContentError`` for a message without a
    role."""
    flat = _flat(attrs, prefix)
    out: list[dict[str, Any]] = []
    for i in sorted(flat):
        msg = _message(flat[i])
        if out and _calls_only(msg) and _calls_only(out[-1]):
            out[-1] = {"role": "assistant", "parts": out[-1]["parts"] + msg["parts"]}
        else:
            out.append(msg)
    return out


def _tools(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    tools = []
    found = sorted(
        (int(m[1]), raw)
        for key, raw in attrs.items()
        if (m := re.fullmatch(r"llm\.tools\.(\d+)\.tool\.json_schema", key))
    )
    for _, raw in found:
        try:
            schema = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise GenAIContentError("llm.tools: a tool.json_schema is not JSON") from None
        if not isinstance(schema, dict):
            raise GenAIContentError("llm.tools: a tool.json_schema is not an object")
        fn = schema.get("function")
        fn = fn if isinstance(fn, dict) else schema
        tool = {"type": "function", "name": fn.get("name")}
        tool |= {k: fn[k] for k in ("description", "parameters") if k in fn}
        tools.append(tool)
    return tools


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    return next((attrs[k] for k in keys if isinstance(attrs.get(k), str) and attrs[k]), None)


def to_genai(attrs: dict[str, Any]) -> dict[str, Any]:
    """An OpenInference span's attributes with the GenAI attributes they mean added (module
    doc); ``attrs`` that already carry ``gen_ai.*`` keys are returned unchanged (the
    instrumentation says it in the conventions Quill reads first). Raises
    ``GenAIContentError`` for unreadable messages or tool schemas."""
    if any(k.startswith("gen_ai.") for k in attrs) or not is_genai(attrs):
        return attrs
    kind = attrs[KIND]
    out = dict(attrs)
    out["gen_ai.operation.name"] = OPERATIONS[kind]
    provider = _first(attrs, "llm.provider", "llm.system")
    if provider:
        out["gen_ai.provider.name"] = provider
    if kind in ("LLM", "EMBEDDING"):
        model = _first(attrs, "llm.model_name", "embedding.model_name")
        request = _first(attrs, "llm.request.model_name") or model
        response = _first(attrs, "llm.response.model_name") or model
        out |= {"gen_ai.request.model": request, "gen_ai.response.model": response}
        out |= {USAGE[k]: v for k, v in attrs.items() if k in USAGE}
    if kind == "LLM":
        inputs = messages(attrs, "llm.input_messages")
        system = []
        while inputs and inputs[0]["role"] == "system":
            system.extend(p for p in inputs.pop(0)["parts"] if p["type"] == "text")
        out["gen_ai.input.messages"] = inputs
        out["gen_ai.output.messages"] = messages(attrs, "llm.output_messages")
        if system:
            out["gen_ai.system_instructions"] = system
        tools = _tools(attrs)
        if tools:
            out["gen_ai.tool.definitions"] = tools
    elif kind == "TOOL":
        out["gen_ai.tool.name"] = attrs.get("tool.name")
        call = _first(attrs, "tool.id", "tool_call.id")
        if call and "output.value" in attrs:
            out |= {"gen_ai.tool.call.id": call, "gen_ai.tool.call.result": attrs["output.value"]}
    elif kind == "AGENT" and _first(attrs, "agent.name"):
        out["gen_ai.agent.name"] = attrs["agent.name"]
    return {k: v for k, v in out.items() if v is not None}
