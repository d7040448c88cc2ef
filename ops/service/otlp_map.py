"""OTLP trace exports → spool ops: which spans are GenAI spans, which session each belongs to,
and the ops each one makes (docs/importers.md, "OpenTelemetry GenAI traces").

* **Session**: ``otlp:<gen_ai.conversation.id>`` (or ``session.id``, on the span or its
  resource) when present, else ``otlp:<trace id>``. Decided from the span alone, so a span
  exported twice, or in another request, lands in the same session.
* **chat** spans (``gen_ai.operation.name`` ``chat`` / ``text_completion`` /
  ``generate_content``, or any span carrying messages): ``session.create`` (``model``,
  ``system_prompt`` from ``gen_ai.system_instructions``), ``messages.append`` of inputs then
  outputs (``otlp_messages``: chained ids collapse repeated history), and ``usage.record``
  (one call per span: ``response_id`` = ``gen_ai.response.id``, else ``otlp:<trace>:<span>``).
* **execute_tool** spans: the ``tool`` message of ``gen_ai.tool.call.id`` with
  ``gen_ai.tool.call.result``.
* **invoke_agent** / **create_agent** spans: ``session.create`` (agent name in ``meta``); an
  agent span whose parent span belongs to another session is a ``delegate`` child of it
  (``otlp_links.DelegateLinks``), ``meta.parent_tool_call_id`` = the parent tool span's call id. A
  session keeps the first ``meta`` it is given, so a link goes before the other ops of an
  export, and carries the agent name too.
* **embeddings** spans: ``usage.record`` with ``task`` ``embedding``.
* OpenInference spans (``openinference.span.kind``) are read as the GenAI attributes they
  mean (``otlp_openinference``).
* Spans with no ``gen_ai.*`` attribute or event are not GenAI: ignored and counted.

Order: each message an append carries is keyed ``[span start µs, Span.tie, index in the
span]`` (``order_keys``), and the store keeps every message at the earliest key and time any
span gives it (store/apply/placed.py), so the spans of a conversation give the same
transcript in any order and grouping into requests; an export's spans are taken in key
order, so one request stores what the keys say.

Every op's batch id is derived from the trace id, span id and a digest of the op, so a
retried export is a duplicate the store skips, and the same span in another batching (after
``collapse``) never reuses a batch id with other content.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from quill.ops.service import otlp_messages as gm
from quill.ops.service import otlp_openinference as oi

SOURCE = "otlp"
CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent"})
#: ``gen_ai.usage.*`` attribute → Quill usage field (docs/ops.md "Usage").
USAGE_FIELDS = {
    "gen_ai.usage.input_tokens": "input_tokens",
    "gen_ai.usage.output_tokens": "output_tokens",
    "gen_ai.usage.cache_read.input_tokens": "cache_read_tokens",
    "gen_ai.usage.cache_creation.input_tokens": "cache_write_tokens",
    "gen_ai.usage.reasoning.output_tokens": "reasoning_tokens",
}

Op = tuple[str, dict[str, Any], str]  # (op kind, data, batch id)


@dataclass
class Span:
    """One span of an export, decoded: ids as lowercase hex, times in epoch ns."""

    trace: str
    span: str
    parent: str
    name: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    events: Any  # the protobuf's repeated Span.Event
    resource: dict[str, Any]

    @property
    def operation(self) -> str | None:
        op = self.attrs.get("gen_ai.operation.name")
        return op if isinstance(op, str) else None

    @property
    def genai(self) -> bool:
        return (
            any(k.startswith("gen_ai.") for k in self.attrs)
            or any(e.name.startswith("gen_ai.") for e in self.events)
            or oi.is_genai(self.attrs)
        )

    @property
    def tie(self) -> int:
        """The span's tie-break between spans that start in the same microsecond: the top 63
        bits of BLAKE2b-64 of ``<trace>:<span>``."""
        digest = hashlib.blake2b(f"{self.trace}:{self.span}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") >> 1

    def order_key(self, index: int) -> list[int] | None:
        """The order key (``store.apply.order``) of the ``index``-th message this span
        delivers: ``[start in µs, tie, index]``; None for a span without a start time (its
        messages then take their op's own key)."""
        return [self.start_ns // 1000, self.tie, index] if self.start_ns else None

    @property
    def session_id(self) -> str:
        for source in (self.attrs, self.resource):
            for key in ("gen_ai.conversation.id", "session.id"):
                if isinstance(source.get(key), str) and source[key].strip():
                    return f"{SOURCE}:{source[key].strip()}"
        return f"{SOURCE}:{self.trace}"


@dataclass
class SpanOps:
    """The ops one GenAI span makes, in order (empty: a GenAI span with nothing to store)."""

    span: Span
    ops: list[Op] = field(default_factory=list)


def spans_of(request: Any) -> list[Span]:
    """Every span of an ``ExportTraceServiceRequest``, decoded, in start order (µs, then
    ``Span.tie``)."""
    out = []
    for rs in request.resource_spans:
        resource = gm.attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        trace=s.trace_id.hex(),
                        span=s.span_id.hex(),
                        parent=s.parent_span_id.hex(),
                        name=s.name,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attrs=gm.attributes(s.attributes),
                        events=s.events,
                        resource=resource,
                    )
                )
    # The order keys' order (start µs, tie): the order one request stores spans in is the
    # order their messages' keys give in any other split of the spans into requests.
    return sorted(out, key=lambda s: (s.start_ns // 1000, s.tie, s.start_ns))


def batch_id(span: Span, op: str, data: dict[str, Any]) -> str:
    """``otlp:<trace>:<span>:<op>:<digest>``: the same op of the same span, the same id."""
    digest = hashlib.sha256(json.dumps([op, data], sort_keys=True).encode()).hexdigest()[:16]
    return f"{SOURCE}:{span.trace}:{span.span}:{op.split('.')[-1]}:{digest}"


def _op(span: Span, op: str, data: dict[str, Any]) -> Op:
    return (op, data, batch_id(span, op, data))


def _text_attr(span: Span, *keys: str) -> str | None:
    for key in keys:
        if isinstance(span.attrs.get(key), str) and span.attrs[key]:
            return span.attrs[key]
    return None


def _usage(span: Span, task: str) -> Op | None:
    """The span's ``usage.record`` (None without token counts). Raises
    ``GenAIContentError`` for a count that is not a whole number ≥ 0 (never read as 0)."""
    usage = {}
    for key, name in USAGE_FIELDS.items():
        raw = span.attrs.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise gm.GenAIContentError(f"{key} is not a whole number ≥ 0: {raw!r}")
        usage[name] = raw
    if not usage:
        return None
    data = {
        "session_id": span.session_id,
        "source": SOURCE,
        "task": task,
        "response_id": _text_attr(span, "gen_ai.response.id")
        or f"{SOURCE}:{span.trace}:{span.span}",
        "usage": usage,
    }
    model = _text_attr(span, "gen_ai.response.model", "gen_ai.request.model")
    provider = _text_attr(span, "gen_ai.provider.name", "gen_ai.system")
    if model:
        data["model"] = model
    if provider:
        data["provider"] = provider
    if span.end_ns:
        data["ts"] = span.end_ns / 1e9
    return _op(span, "usage.record", data)


def _chat(span: Span, chains: dict | None) -> list[Op]:
    inputs = gm.message_list(span.attrs.get("gen_ai.input.messages"), "gen_ai.input.messages")
    outputs = gm.message_list(span.attrs.get("gen_ai.output.messages"), "gen_ai.output.messages")
    if not inputs and not outputs:
        inputs, outputs = gm.event_messages(span.events)
    sid = span.session_id
    # A chat span's instructions and tools hold for the whole conversation it carries: in
    # force from the start even when a tool span's result arrived first (store/apply/context).
    create: dict[str, Any] = {"session_id": sid, "source": SOURCE, "context_from_start": True}
    model = _text_attr(span, "gen_ai.request.model", "gen_ai.response.model")
    prompt = gm.instructions(span.attrs.get("gen_ai.system_instructions"))
    if model:
        create["model"] = model
    if prompt:
        create["system_prompt"] = prompt
    tools = gm.structured(span.attrs.get("gen_ai.tool.definitions"), "gen_ai.tool.definitions")
    if isinstance(tools, list) and tools:
        create["tools"] = tools
    ops = [_op(span, "session.create", create)]
    if inputs or outputs:
        ops.append(_append(span, sid, _stamp_outputs(span, inputs, outputs, chains)))
    usage = _usage(span, "turn")
    return ops + ([usage] if usage else [])


def _stamp_outputs(span: Span, inputs: list, outputs: list, chains: dict | None) -> list:
    """The span's messages with the span's times: those made from its inputs carry its start
    (they were sent before the call began; the arrival of a late export is no time of theirs),
    those made from its outputs its end. A message delivered by several spans keeps the
    earliest time any of them gives it (``collapse`` within a request, the store across
    requests: store/apply/placed.py)."""
    everything, carried = gm.conversation(inputs + outputs, len(inputs), chains, span.session_id)
    for i, m in enumerate(everything):
        if i >= carried and span.end_ns:
            m["timestamp"] = span.end_ns / 1e9
        elif i < carried and span.start_ns and "timestamp" not in m:
            m["timestamp"] = span.start_ns / 1e9
    return everything


def _append(span: Span, sid: str, messages: list[dict[str, Any]]) -> Op:
    """A ``messages.append`` without its batch id (None): ``collapse`` names the append it
    becomes (a span's carries its whole history; most of it is left out). Each message is
    keyed by the span's start and its index in the span (``Span.order_key``): the store puts
    a message at the earliest place and time any delivery gives it (store/apply/placed.py),
    so spans delivered in any order and grouping give the transcript of one request."""
    keys = [span.order_key(i) for i in range(len(messages))]
    data = {"session_id": sid, "source": SOURCE, "messages": messages, "order_keys": keys}
    return ("messages.append", data, None)


def _tool(span: Span) -> list[Op]:
    call_id = span.attrs.get("gen_ai.tool.call.id")
    if not isinstance(call_id, str) or "gen_ai.tool.call.result" not in span.attrs:
        return []
    raw = span.attrs["gen_ai.tool.call.result"]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)  # a structured result recorded as JSON text
        except ValueError:
            pass  # a plain text result
    msg = gm.tool_message(call_id, span.attrs.get("gen_ai.tool.name"), raw)
    if span.end_ns:
        msg["timestamp"] = span.end_ns / 1e9
    return [_append(span, span.session_id, [msg])]


def _agent(span: Span) -> list[Op]:
    data: dict[str, Any] = {"session_id": span.session_id, "source": SOURCE}
    name = _text_attr(span, "gen_ai.agent.name")
    if name and not span.parent:  # under a parent: the link names it (a session keeps 1 meta)
        data["meta"] = {"agent": name}
    if span.start_ns:
        data["started_at"] = span.start_ns / 1e9
    return [_op(span, "session.create", data)]


def span_ops(span: Span, chains: dict | None = None) -> SpanOps:
    """The ops of one GenAI span (module doc); ``chains``: one dict per export, shared by its
    spans (``otlp_messages.conversation``). Raises ``GenAIContentError`` when its GenAI
    content is unreadable (the span is rejected whole)."""
    span.attrs = oi.to_genai(span.attrs)  # OpenInference spans: read as what they mean
    op = span.operation
    if op == "execute_tool":
        ops = _tool(span)
    elif op in AGENT_OPERATIONS:
        ops = _agent(span)
    elif op == "embeddings":
        usage = _usage(span, "embedding")
        ops = [usage] if usage else []
    elif (
        op in CHAT_OPERATIONS
        or "gen_ai.input.messages" in span.attrs
        or "gen_ai.output.messages" in span.attrs
        or any(e.name == "gen_ai.choice" or e.name in gm.EVENT_ROLES for e in span.events)
    ):
        ops = _chat(span, chains)
    else:
        usage = _usage(span, "turn")
        ops = [usage] if usage else []
    return SpanOps(span, ops)


def collapse(groups: list[SpanOps], max_bytes: int) -> list[Op]:
    """The ops of accepted spans, in order, with what one request repeats taken out (the
    store would skip it; fewer ops are fewer fsyncs before the ack):

    * a message already carried by an earlier span of the same session is left out (its
      first copy takes the earlier of their times and a finish reason it lacks, as the
      store would; spans come in key order, so the first copy has the earliest key);
    * a ``session.create`` equal to the session's previous one in the request is dropped
      (it would fill nothing);
    * appends to one session with no ``session.create`` of it between them (a system prompt
      in force from a point on) are merged, up to ``max_bytes`` of message and key JSON.

    A changed op gets the batch id of its new content: the same export gives the same ops
    again (a retry is a duplicate), another batching other ids whose messages the store skips.
    """
    seen: dict[str, dict[str, dict]] = {}  # session -> message id -> its first copy
    creates: dict[str, dict[str, Any]] = {}
    merging: dict[str, tuple[int, int]] = {}  # session -> (index in out, message bytes)
    out: list[Op] = []
    by: dict[int, Span] = {}  # index in out of an append -> the span that last added to it
    for group in groups:
        for op, data, batch in group.ops:
            sid = data["session_id"]
            if op == "session.create":
                if creates.get(sid) != data:
                    creates[sid] = data
                    merging.pop(sid, None)
                    out.append((op, data, batch))
                continue
            if op != "messages.append":
                out.append((op, data, batch))
                continue
            held = seen.setdefault(sid, {})
            fresh, keys = [], []
            for m, key in zip(data["messages"], data["order_keys"]):
                first = held.get(m["id"])
                if first is None:
                    held[m["id"]] = m
                    fresh.append(m)
                    keys.append(key)
                else:  # the store's rules (store/apply/placed.py): the earliest time, and
                    # a finish reason (an output's; its repeat as an input has none)
                    if m.get("timestamp", math.inf) < first.get("timestamp", math.inf):
                        first["timestamp"] = m["timestamp"]
                    if "finish_reason" in m and "finish_reason" not in first:
                        first["finish_reason"] = m["finish_reason"]
            if not fresh:
                continue
            size = sum(len(json.dumps(m)) + len(json.dumps(k)) for m, k in zip(fresh, keys))
            at, had = merging.get(sid, (-1, 0))
            if at >= 0 and had + size <= max_bytes:
                out[at][1]["messages"].extend(fresh)
                out[at][1]["order_keys"].extend(keys)
                merging[sid] = (at, had + size)
            else:
                merging[sid] = (len(out), size)
                merged = {"session_id": sid, "source": SOURCE, "messages": fresh}
                out.append((op, {**merged, "order_keys": keys}, None))
            by[merging[sid][0]] = group.span
    # Batch ids once every merge is done: hashing a merged list at each merge was quadratic.
    return [
        (op, data, batch or batch_id(by[i], op, data)) for i, (op, data, batch) in enumerate(out)
    ]


def placeholder_batch(span: Span, op: str) -> str:
    """A batch id of the length ``batch_id`` gives ``op`` of ``span``, for checks of an op
    whose id is decided later (``collapse``)."""
    return f"{SOURCE}:{span.trace}:{span.span}:{op.split('.')[-1]}:{'0' * 16}"
