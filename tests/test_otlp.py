"""`POST /v1/traces`: a real agent framework (Pydantic AI, offline with a scripted
FunctionModel) instrumented with OpenTelemetry exports with the real OTLP/HTTP exporter (and as
OTLP JSON) to a real `quill serve`; the stored transcript equals the framework's own history.
"""

from __future__ import annotations

import random

import pytest
from conftest import QuillCLI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult
from otlp_helpers import (
    expected,
    export_twice_as_configured,
    exporter,
    post_json,
    run_agent,
    stored,
    usage_of,
)
from service_helpers import served

from quill.ops.client.client import Client
from quill.ops.service.tokens import TokenStore

PROMPTS = ["what is x?", "please delegate this", "and y?"]


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """One data dir and one `quill serve`, a write token and a read-only one."""
    home = tmp_path_factory.mktemp("otlp") / "home"
    home.mkdir()
    (home / "config.toml").write_text("[http]\nmax_body_bytes = 200000\n")
    store = TokenStore(home / "tokens.db")
    toks = {s: store.create(s, [s])[0] for s in ("read", "write")}
    q = QuillCLI(home)
    with served(q) as base:
        yield {"quill": q, "home": home, "base": base, "tokens": toks}


def _check(svc, history, spans) -> None:
    """The main conversation holds the framework's history, its instructions and its usage;
    the helper agent is a delegate child of it, named by the tool call that ran it."""
    svc["quill"].drain()
    client = Client(home=str(svc["home"]))
    conv = next(s.attributes["gen_ai.conversation.id"] for s in spans if s.name.startswith("chat"))
    sid = f"otlp:{conv}"
    got = client.transcript(sid)
    assert stored(got["messages"]) == expected(history)
    assert got["context"]["system_prompt"] == "You answer briefly."
    assert [t["name"] for t in got["context"]["tools"]] == ["lookup", "ask_helper"]
    calls, tokens_in, tokens_out = usage_of(history)
    [usage] = client.usage(session_id=sid)
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (
        calls,
        tokens_in,
        tokens_out,
    )
    helper_conv = next(
        s.attributes["gen_ai.conversation.id"]
        for s in spans
        if s.attributes.get("gen_ai.agent.name") == "helper"
    )
    child = client.transcript(f"otlp:{helper_conv}")
    assert child["session"]["parent_id"] == sid
    assert child["session"]["parent_kind"] == "delegate"
    ask = next(
        c
        for m in history
        for c in getattr(m, "parts", [])
        if getattr(c, "tool_name", "") == "ask_helper"
    )
    assert child["session"]["meta"] == {"agent": "helper", "parent_tool_call_id": ask.tool_call_id}
    assert [(m["role"], m["content"]) for m in child["messages"]] == [
        ("user", "please delegate this"),
        ("assistant", "helper says 42"),
    ]


def test_protobuf_export_stores_the_frameworks_history_once(svc, monkeypatch):
    history, spans = run_agent(PROMPTS)
    export_twice_as_configured(svc, spans, monkeypatch)  # the README's set-up; a retry
    _check(svc, history, spans)


def test_json_export_gzip_and_plain_retry(svc):
    history, spans = run_agent(PROMPTS)
    first = post_json(svc["base"], svc["tokens"]["write"], spans, gzip_=True)
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    assert first.json() == {}  # full success: no partial_success
    again = post_json(svc["base"], svc["tokens"]["write"], spans)
    assert again.status_code == 200, again.text
    _check(svc, history, spans)


@pytest.mark.parametrize("order", ["finished", "reversed"])
def test_spans_across_requests_in_any_order_give_the_same_transcript(svc, order):
    history, spans = run_agent(PROMPTS)
    out = exporter(svc["base"], svc["tokens"]["write"], gzip_=True)
    # Every span in its own request: as each finished (a child agent before the tool span
    # that ran it), or last finished first; then a shuffled JSON re-send.
    for span in spans if order == "finished" else reversed(spans):
        assert out.export([span]) is SpanExportResult.SUCCESS
    shuffled = list(spans)
    random.Random(7).shuffle(shuffled)
    for i in range(0, len(shuffled), 3):
        assert (
            post_json(svc["base"], svc["tokens"]["write"], shuffled[i : i + 3]).status_code == 200
        )
    _check(svc, history, spans)


def test_protobuf_answer_is_an_export_response(svc):
    history, spans = run_agent(PROMPTS[:1])
    import httpx
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    resp = httpx.post(
        f"{svc['base']}/v1/traces",
        content=encode_spans(spans).SerializeToString(),
        headers={
            "Authorization": f"Bearer {svc['tokens']['write']}",
            "Content-Type": "application/x-protobuf",
        },
    )
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-protobuf"
    answer = ExportTraceServiceResponse.FromString(resp.content)
    assert not answer.HasField("partial_success")
