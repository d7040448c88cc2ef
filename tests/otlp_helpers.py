"""Shared by the OTLP endpoint tests and benchmark: a Pydantic AI agent instrumented with
OpenTelemetry (``run_agent``), the real OTLP/HTTP protobuf exporter (``exporter``), the same
spans POSTed as OTLP JSON (``post_json``), and the transcript the framework's own message
history says Quill should hold (``expected``)."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import httpx
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, InstrumentationSettings, RunContext
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from quill.ops.service.otlp_messages import tool_result_text


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A scripted model: calls ``lookup`` for the latest user prompt, then answers with what
    the tool returned (offline, deterministic)."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"The answer is {returns[-1].content}.")])
    prompt = next(p.content for p in reversed(last.parts) if isinstance(p, UserPromptPart))
    if "delegate" in prompt:
        return ModelResponse(parts=[ToolCallPart("ask_helper", {"question": prompt})])
    return ModelResponse(parts=[ToolCallPart("lookup", {"key": prompt, "n": len(prompt)})])


def helper_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("helper says 42")])


def make_agents(provider: TracerProvider) -> Agent:
    """The main agent (tools ``lookup`` and ``ask_helper``, the latter running a second agent:
    a delegate), both instrumented into ``provider``."""

    def cap():
        return [Instrumentation(InstrumentationSettings(tracer_provider=provider))]

    helper = Agent(FunctionModel(helper_script), name="helper", capabilities=cap())
    agent = Agent(
        FunctionModel(script),
        name="main",
        instructions="You answer briefly.",
        system_prompt="You are a test agent.",
        capabilities=cap(),
    )

    @agent.tool_plain
    def lookup(key: str, n: int) -> dict[str, Any]:
        """Look a key up."""
        return {"key": key, "length": n}

    @agent.tool
    async def ask_helper(ctx: RunContext, question: str) -> str:
        """Ask the helper agent."""
        return (await helper.run(question)).output

    return agent


def capture() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider whose finished spans collect in memory (in end order)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def run_agent(prompts: list[str]) -> tuple[list[ModelMessage], list[ReadableSpan]]:
    """Run the agent once per prompt, continuing one conversation; returns the framework's
    message history and the finished spans."""
    provider, memory = capture()
    agent = make_agents(provider)
    history: list[ModelMessage] = []
    for prompt in prompts:
        history = agent.run_sync(prompt, message_history=history or None).all_messages()
    provider.force_flush()
    return history, list(memory.get_finished_spans())


def exporter(base: str, token: str, gzip_: bool = False) -> OTLPSpanExporter:
    """The real OTLP/HTTP protobuf exporter pointed at ``base``/v1/traces."""
    return OTLPSpanExporter(
        endpoint=f"{base}/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip if gzip_ else Compression.NoCompression,
        timeout=60,
    )


def otlp_json(spans: list[ReadableSpan]) -> dict[str, Any]:
    """The spans as an OTLP JSON document: protobuf's JSON mapping of the exporter's own
    message, with ids in hex as OTLP JSON requires."""
    doc = json_format.MessageToDict(encode_spans(spans))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


def post_json(
    base: str, token: str, spans: list[ReadableSpan], gzip_: bool = False
) -> httpx.Response:
    body = json.dumps(otlp_json(spans)).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gzip_:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return httpx.post(f"{base}/v1/traces", content=body, headers=headers, timeout=60)


def expected(history: list[ModelMessage]) -> list[dict[str, Any]]:
    """The framework's message history in the fields Quill stores (role, content, tool calls,
    tool results)."""
    out: list[dict[str, Any]] = []
    for m in history:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, ToolReturnPart):
                    out.append(
                        {
                            "role": "tool",
                            "content": tool_result_text(p.content),
                            "tool_call_id": p.tool_call_id,
                        }
                    )
                elif isinstance(p, SystemPromptPart):
                    out.append({"role": "system", "content": p.content, "tool_call_id": None})
                elif isinstance(p, UserPromptPart):
                    out.append({"role": "user", "content": p.content, "tool_call_id": None})
        else:
            text = "\n".join(p.content for p in m.parts if isinstance(p, TextPart))
            calls = [
                (p.tool_call_id, p.tool_name, p.args_as_dict())
                for p in m.parts
                if isinstance(p, ToolCallPart)
            ]
            out.append(
                {"role": "assistant", "content": text or None, "tool_call_id": None, "calls": calls}
            )
    return out


def stored(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Quill's stored messages in the fields of ``expected``."""
    out = []
    for m in messages:
        row = {
            "role": m["role"],
            "content": m.get("content"),
            "tool_call_id": m.get("tool_call_id"),
        }
        if m["role"] == "assistant":
            calls = m.get("tool_calls") or []
            if isinstance(calls, str):
                calls = json.loads(calls)
            row["calls"] = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in calls
            ]
        out.append(row)
    return out


def usage_of(history: list[ModelMessage]) -> tuple[int, int, int]:
    """``(calls, input tokens, output tokens)`` of the framework's responses."""
    responses = [m for m in history if isinstance(m, ModelResponse)]
    return (
        len(responses),
        sum(m.usage.input_tokens for m in responses),
        sum(m.usage.output_tokens for m in responses),
    )


def export_twice_as_configured(svc: dict[str, Any], spans: list[ReadableSpan], monkeypatch) -> None:
    """Export ``spans`` with the stock exporter configured as the README says (the two standard
    variables, nothing else), then again: the retried export must be applied once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{svc['base']}/v1/traces")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{svc['tokens']['write']}"
    )
    out = OTLPSpanExporter()
    assert out.export(spans) is SpanExportResult.SUCCESS
    assert out.export(spans) is SpanExportResult.SUCCESS
