"""OTLP trace export ack latency and throughput next to Quill's own API:
``python -m bench.otlp [--n 200] [--turns 4] [--clients 8] [--large 50] [--large-n 6]
[--baseline REV] [--json]``.

One conversation of ``turns`` chat turns is made as real OpenTelemetry spans (the SDK, GenAI
attributes: each chat span carries the history so far, its output and its token counts, as
instrumented agents export them) and encoded as the OTLP/HTTP exporter encodes them
(``encode_spans``, protobuf). The baseline is a plain ``POST /api/v1/sessions/{id}/messages``
of the same conversation's messages (usage on the assistant messages), to the same real
`quill serve` subprocess in the same run, the two series interleaved so machine load hits
both alike. Each request is a new conversation (new trace and conversation id), so every
export stores its messages (no duplicate short-cut). Reported: p50 / p95 / p99 ack latency
(ms) of each with one client, spans/s and messages/s accepted with ``clients`` concurrent
clients, and the ratios OTLP ÷ plain.

``--large K``: also ``--large-n`` exports of ``K`` conversations each in one request (ack
p50/p99 and spans/s). ``--baseline REV``: a second `quill serve` running git revision ``REV``
(``git archive``) in the same run takes the same single-conversation exports (interleaved
with the rest) and the large exports: ratios this tree ÷ the baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

import httpx

from .common import pct, ratio, revision_tree, tempdir
from .http_ack import _port, _serve, _summary


def conversation(turns: int) -> tuple[bytes, list[dict[str, Any]]]:
    """``(OTLP protobuf body of the conversation's chat spans, the same messages for the
    plain API)``; a fresh conversation id each call."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans, plain = conversation_spans(turns)
    return encode_spans(spans).SerializeToString(), plain


def large_export(conversations: int, turns: int) -> bytes:
    """One OTLP protobuf body holding ``conversations`` fresh conversations' spans (what a
    batching exporter sends after a busy period)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = [s for _ in range(conversations) for s in conversation_spans(turns)[0]]
    return encode_spans(spans).SerializeToString()


def conversation_spans(turns: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """``(the finished spans of one fresh conversation, its messages for the plain API)``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    conv = str(uuid.uuid4())
    history: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    with tracer.start_as_current_span("invoke_agent bench") as root:
        root.set_attributes(
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": conv}
        )
        for turn in range(turns):
            ask = f"turn {turn}: where is the config parsed? " * 5
            answer = f"turn {turn}: in settings.py, function load " * 10
            history.append({"role": "user", "parts": [{"type": "text", "content": ask}]})
            out = {"role": "assistant", "parts": [{"type": "text", "content": answer}]}
            with tracer.start_as_current_span("chat gpt-4o") as span:
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.conversation.id": conv,
                        "gen_ai.request.model": "gpt-4o",
                        "gen_ai.provider.name": "openai",
                        "gen_ai.input.messages": json.dumps(history),
                        "gen_ai.output.messages": json.dumps([out]),
                        "gen_ai.usage.input_tokens": 100 + 50 * turn,
                        "gen_ai.usage.output_tokens": 40,
                    }
                )
            history.append(out)
            usage = {"input_tokens": 100 + 50 * turn, "output_tokens": 40}
            plain += [
                {"role": "user", "content": ask, "id": f"u{turn}"},
                {"role": "assistant", "content": answer, "id": f"a{turn}", "usage": usage},
            ]
    provider.force_flush()
    return list(memory.get_finished_spans()), plain


def run(
    n: int = 200,
    turns: int = 4,
    clients: int = 8,
    baseline: str | None = None,
    large: int = 50,
    large_n: int = 6,
) -> dict[str, Any]:
    """Measure and return the figures (see the module doc)."""
    bodies = [conversation(turns) for _ in range(n)]
    spans_per = turns + 1  # the chat spans and the agent span
    otlp_head = {"Content-Type": "application/x-protobuf"}
    with contextlib.ExitStack() as stack:
        procs, bases = {}, {}
        trees = {"this": None}
        if baseline:
            trees["baseline"] = stack.enter_context(revision_tree(baseline))
        for name, tree in trees.items():
            home, port = stack.enter_context(tempdir(f"otlp-{name}")), _port()
            env = dict(os.environ, PYTHONPATH=tree) if tree else None
            procs[name] = _serve(home, port, env)
            stack.callback(_stop, procs[name])
            bases[name] = f"http://127.0.0.1:{port}"
        base = bases["this"]
        otlp, plain, otlp_base = [], [], []
        with httpx.Client(timeout=600) as http:
            for i, (body, messages) in enumerate(bodies):  # interleaved
                t = time.perf_counter()
                r = http.post(f"{base}/v1/traces", content=body, headers=otlp_head)
                otlp.append(time.perf_counter() - t)
                assert r.status_code == 200 and r.content == b"", r.content
                if baseline:  # the same export, a fresh conversation for that store
                    t = time.perf_counter()
                    r = http.post(f"{bases['baseline']}/v1/traces", content=body, headers=otlp_head)
                    otlp_base.append(time.perf_counter() - t)
                    assert r.status_code == 200, r.content
                t = time.perf_counter()
                r = http.post(
                    f"{base}/api/v1/sessions/plain-{i}/messages", json={"messages": messages}
                )
                plain.append(time.perf_counter() - t)
                assert r.status_code == 202, r.text
            large_acks: dict[str, list[float]] = {name: [] for name in bases}
            for _ in range(large_n):  # one large export each, interleaved
                body = large_export(large, turns)
                for name, url in bases.items():
                    t = time.perf_counter()
                    r = http.post(f"{url}/v1/traces", content=body, headers=otlp_head)
                    large_acks[name].append(time.perf_counter() - t)
                    assert r.status_code == 200, r.content
        fresh = [conversation(turns) for _ in range(n)]

        def load(kind: str) -> float:
            """Seconds for ``clients`` clients to send the ``fresh`` conversations."""
            lock, queue = threading.Lock(), list(enumerate(fresh))

            def client() -> None:
                with httpx.Client(timeout=60) as http:
                    while True:
                        with lock:
                            if not queue:
                                return
                            i, (body, messages) = queue.pop()
                        if kind == "otlp":
                            r = http.post(f"{base}/v1/traces", content=body, headers=otlp_head)
                        else:
                            url = f"{base}/api/v1/sessions/load-{i}/messages"
                            r = http.post(url, json={"messages": messages})
                        assert r.status_code in (200, 202), r.text

            threads = [threading.Thread(target=client) for _ in range(clients)]
            began = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            return time.perf_counter() - began

        otlp_wall, plain_wall = load("otlp"), load("plain")
    messages = 2 * turns
    out = {
        "otlp_1_client": _summary(otlp),
        "plain_1_client": _summary(plain),
        f"otlp_{clients}_clients": {
            "spans_per_s": round(n * spans_per / otlp_wall, 1),
            "messages_per_s": round(n * messages / otlp_wall, 1),
        },
        f"plain_{clients}_clients": {"messages_per_s": round(n * messages / plain_wall, 1)},
    }
    for name, acks in large_acks.items():
        out[f"large_export_{name}"] = {
            "spans": large * spans_per,
            **_summary(acks),
            "spans_per_s": round(large * spans_per * len(acks) / sum(acks), 1),
        }
    out["ratios"] = {
        "otlp_p50_over_plain_p50": ratio(pct(otlp, 50), pct(plain, 50)),
        "otlp_p99_over_plain_p99": ratio(pct(otlp, 99), pct(plain, 99)),
        "otlp_msgs_per_s_over_plain": ratio(plain_wall, otlp_wall),
    }
    if baseline:
        out["otlp_1_client_baseline"] = _summary(otlp_base)
        out["ratios"] |= {
            "otlp_p50_over_baseline": ratio(pct(otlp, 50), pct(otlp_base, 50)),
            "otlp_p99_over_baseline": ratio(pct(otlp, 99), pct(otlp_base, 99)),
            "large_export_p50_over_baseline": ratio(
                pct(large_acks["this"], 50), pct(large_acks["baseline"], 50)
            ),
        }
    return out


def _stop(proc: Any) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="conversations per series")
    parser.add_argument("--turns", type=int, default=4, help="chat turns per conversation")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--baseline", metavar="REV", help="also serve git revision REV (same run, interleaved)"
    )
    parser.add_argument("--large", type=int, default=50, help="conversations per large export")
    parser.add_argument("--large-n", type=int, default=6, help="large exports per server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    res = run(args.n, args.turns, args.clients, args.baseline, args.large, args.large_n)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for name, row in res.items():
        print(f"{name:<18} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
