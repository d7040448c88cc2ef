"""`POST /v1/traces` from the OpenAI Agents SDK: its own model classes (`OpenAIResponsesModel`,
the SDK's default, and `OpenAIChatCompletionsModel`) on a scripted model server (the OpenAI
client's httpx transport answers in-process: no network), instrumented with OpenInference's
OpenTelemetry instrumentation for the SDK, exported with the real OTLP/HTTP exporter (and as
OTLP JSON) to a real `quill serve`. The stored transcript equals the SDK's own history
(`RunResult.to_input_list()`): messages, tool calls, tool results, instructions, tools and
usage, in both encodings, after a retried export and in any order."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from typing import Any

import agents
import httpx
import openinference.instrumentation.openai_agents as oi_agents
import pytest
from openai import AsyncOpenAI
from openinference.instrumentation import using_session
from opentelemetry.sdk.trace.export import SpanExportResult
from otlp_helpers import capture, export_twice_as_configured, exporter, post_json, stored
from test_otlp import svc  # noqa: F401  (the module's server fixture)

from quill.ops.client.client import Client

PROMPTS = ["what is x?", "compare x and y", "and z?"]


def _reply(last: dict[str, Any], step: int, run: str) -> tuple[str, list[dict[str, Any]]]:
    """The script: after tool results, an answer quoting them; for "compare", two parallel
    calls; otherwise one call. Returns ``(text or "", calls)``."""
    if last.get("type") == "function_call_output" or last.get("role") == "tool":
        output = last.get("output", last.get("content"))
        return f"The answer is {output}.", []
    prompt = last["content"]
    keys = prompt.split()[1::2] if prompt.startswith("compare") else [prompt]
    calls = [
        {"id": f"{run}_call_{step}_{i}", "name": "lookup", "arguments": json.dumps({"key": k})}
        for i, k in enumerate(keys)
    ]
    return "", calls


def responses_server(run: str):
    """A scripted Responses API: echoes instructions and tools as the real API does."""
    step = itertools.count(1)

    def handle(request: httpx.Request) -> httpx.Response:
        body, n = json.loads(request.content), next(step)
        text, calls = _reply(body["input"][-1], n, run)
        output = [
            {
                "type": "function_call",
                "id": f"fc_{c['id']}",
                "call_id": c["id"],
                "name": c["name"],
                "arguments": c["arguments"],
                "status": "completed",
            }
            for c in calls
        ] or [
            {
                "type": "message",
                "id": f"msg_{run}_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
        usage = {
            "input_tokens": 100 * n,
            "output_tokens": 10 + n,
            "total_tokens": 110 * n + 10,
            "input_tokens_details": {"cached_tokens": 7 * n, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        return httpx.Response(
            200,
            json={
                "id": f"resp_{run}_{n}",
                "object": "response",
                "created_at": 0,
                "model": body["model"],
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": body.get("tools", []),
                "instructions": body.get("instructions"),
                "usage": usage,
            },
        )

    return handle


def chat_server(run: str):
    """A scripted Chat Completions API."""
    step = itertools.count(1)

    def handle(request: httpx.Request) -> httpx.Response:
        body, n = json.loads(request.content), next(step)
        text, calls = _reply(body["messages"][-1], n, run)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else "stop",
        }
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-{run}-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
                "usage": {"prompt_tokens": 100 * n, "completion_tokens": 10 + n},
            },
        )

    return handle


@pytest.fixture(scope="module")
def instrumented():
    """OpenInference's instrumentation of the SDK, into a tracer provider collecting spans in
    memory; the SDK's own exporter (to OpenAI's backend) is taken out for the module."""
    provider, memory = capture()
    agents.set_trace_processors([])
    instrumentor = oi_agents.OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider, memory
    instrumentor.uninstrument()


def run_sdk(instrumented, api: str):
    """Run the SDK's agent over ``PROMPTS`` as one conversation (each prompt a `Runner.run`
    given the history so far, one trace each, one OpenInference session). Returns
    ``(session id, the SDK's history, its raw responses, finished spans)``."""
    provider, memory = instrumented
    memory.clear()
    run = uuid.uuid4().hex[:8]
    server = responses_server(run) if api == "responses" else chat_server(run)
    client = AsyncOpenAI(
        api_key="sk-test",
        base_url="http://model.invalid/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
        max_retries=0,
    )
    model_class = {
        "responses": agents.OpenAIResponsesModel,
        "chat": agents.OpenAIChatCompletionsModel,
    }[api]

    @agents.function_tool
    def lookup(key: str) -> dict[str, Any]:
        """Look a key up."""
        return {"key": key, "length": len(key)}

    agent = agents.Agent(
        name="main",
        instructions="You answer briefly.",
        model=model_class("gpt-4o", client),
        tools=[lookup],
    )
    history: list[Any] = []
    responses = []

    async def conversation():
        nonlocal history
        for prompt in PROMPTS:
            result = await agents.Runner.run(agent, [*history, {"role": "user", "content": prompt}])
            history = result.to_input_list()
            responses.extend(result.raw_responses)

    session = f"agents-{run}"
    with using_session(session):
        asyncio.run(conversation())
    provider.force_flush()
    return session, history, responses, list(memory.get_finished_spans())


def expected(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SDK's history items in the fields of ``otlp_helpers.stored``: a response's function
    calls are one assistant message, as the model gave them."""
    out: list[dict[str, Any]] = []
    for item in history:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = (item["call_id"], item["name"], json.loads(item["arguments"]))
            if out and out[-1]["role"] == "assistant" and out[-1]["content"] is None:
                out[-1]["calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_call_id": None})
                out[-1]["calls"] = [call]
        elif kind == "function_call_output":
            out.append({"role": "tool", "content": item["output"], "tool_call_id": item["call_id"]})
        elif item["role"] == "user":
            out.append({"role": "user", "content": item["content"], "tool_call_id": None})
        else:
            text = "\n".join(p["text"] for p in item["content"] if p["type"] == "output_text")
            row = {"role": "assistant", "content": text, "tool_call_id": None, "calls": []}
            out.append(row)
    return out


def _check(svc, session, history, responses, api) -> None:
    svc["quill"].drain()
    client = Client(home=str(svc["home"]))
    sid = f"otlp:{session}"
    got = client.transcript(sid)
    assert stored(got["messages"]) == expected(history)
    assert sum(1 for m in got["messages"] if m["role"] == "tool") == 4  # x; x and y; z
    assert got["context"]["system_prompt"] == "You answer briefly."
    if api == "responses":  # Chat Completions spans carry no tool definitions
        assert [t["name"] for t in got["context"]["tools"]] == ["lookup"]
    [usage] = client.usage(session_id=sid)
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (
        len(responses),
        sum(r.usage.input_tokens for r in responses),
        sum(r.usage.output_tokens for r in responses),
    )
    if api == "responses":
        cached = sum(r.usage.input_tokens_details.cached_tokens for r in responses)
        assert usage["cache_read_tokens"] == cached > 0


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_protobuf_export_equals_its_history(svc, instrumented, monkeypatch, api):
    session, history, responses, spans = run_sdk(instrumented, api)
    export_twice_as_configured(svc, spans, monkeypatch)  # the README's set-up; a retry
    _check(svc, session, history, responses, api)


def test_agents_sdk_json_export_and_retry(svc, instrumented):
    session, history, responses, spans = run_sdk(instrumented, "responses")
    first = post_json(svc["base"], svc["tokens"]["write"], spans, gzip_=True)
    assert first.status_code == 200, first.text
    # The SDK's CHAIN spans (turns, the workflow) are not GenAI: counted, not rejected.
    assert first.json()["partialSuccess"].get("rejectedSpans", 0) == 0
    assert post_json(svc["base"], svc["tokens"]["write"], spans).status_code == 200
    _check(svc, session, history, responses, "responses")


def test_agents_sdk_spans_one_per_request_last_first(svc, instrumented):
    session, history, responses, spans = run_sdk(instrumented, "responses")
    out = exporter(svc["base"], svc["tokens"]["write"])
    for span in reversed(spans):
        assert out.export([span]) is SpanExportResult.SUCCESS
    _check(svc, session, history, responses, "responses")


def test_openinference_spans_that_cannot_be_read_are_rejected_alone(svc):
    """An LLM span whose tool schema is not JSON is rejected with its reason; a CHAIN span is
    not GenAI (counted, not rejected); a readable LLM span beside them is stored, reasoning and
    image parts included."""
    provider, memory = capture()
    tracer = provider.get_tracer("openinference")
    session = f"oi-{uuid.uuid4().hex[:8]}"
    base = {"openinference.span.kind": "LLM", "session.id": session, "llm.model_name": "gpt-4o"}
    with tracer.start_as_current_span("workflow") as chain:
        chain.set_attribute("openinference.span.kind", "CHAIN")
        with tracer.start_as_current_span("bad") as bad:
            bad.set_attributes(base | {"llm.tools.0.tool.json_schema": "{not json"})
        with tracer.start_as_current_span("good") as good:
            good.set_attributes(
                base
                | {
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.contents.0.message_content.type": "text",
                    "llm.input_messages.0.message.contents.0.message_content.text": "what is it?",
                    "llm.input_messages.0.message.contents.1.message_content.type": "image",
                    "llm.input_messages.0.message.contents.1.message_content.image.image.url": (
                        "https://example.com/a.png"
                    ),
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.contents.0.message_content.type": "reasoning",
                    "llm.output_messages.0.message.contents.0.message_content.text": "a cat?",
                    "llm.output_messages.0.message.contents.1.message_content.type": "text",
                    "llm.output_messages.0.message.contents.1.message_content.text": "A cat.",
                    "llm.token_count.prompt": 12,
                    "llm.token_count.completion": 3,
                }
            )
    resp = post_json(svc["base"], svc["tokens"]["write"], list(memory.get_finished_spans()))
    assert resp.status_code == 200, resp.text
    partial = resp.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    assert "tool.json_schema is not JSON" in partial["errorMessage"]
    assert "1 span(s) without GenAI attributes ignored" in partial["errorMessage"]
    svc["quill"].drain()
    client = Client(home=str(svc["home"]))
    user, answer = client.transcript(f"otlp:{session}")["messages"]
    assert (user["role"], user["content"]) == ("user", "what is it?")
    assert user["parts"] == [
        {"type": "uri", "modality": "image", "uri": "https://example.com/a.png"}
    ]
    assert (answer["content"], answer["reasoning"]) == ("A cat.", "a cat?")
    [usage] = client.usage(session_id=f"otlp:{session}")
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (1, 12, 3)
