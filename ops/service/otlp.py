"""``POST /v1/traces``: OTLP/HTTP trace exports of GenAI spans, stored as transcripts.

Any OpenTelemetry-instrumented agent exports here with the stock OTLP/HTTP exporter
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces``, a bearer token with the
``write`` scope in ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``). Both encodings of the OTLP/HTTP
specification: ``application/x-protobuf`` (the ``opentelemetry-proto`` messages) and
``application/json`` (protobuf's JSON mapping with OTLP's one exception: trace and span ids
are hex, not base64), each plain or ``Content-Encoding: gzip``. The answer is in the
request's encoding.

* 200 ``ExportTraceServiceResponse`` only once every op the export makes is fsync'd in the
  spool (the JSON API's append path, ``api_writes._append``). A span whose GenAI content is
  unreadable, or whose ops the store would refuse (``store.apply.precheck``), is rejected
  alone: ``partial_success.rejected_spans`` counts them and ``error_message`` says why. Spans
  that are not GenAI are accepted and ignored; ``error_message`` counts them with
  ``rejected_spans`` 0 (the specification's warning form) and the log line ``otlp.export``
  does too.
* 400 malformed body, 413 body over ``[http] max_body_bytes`` (compressed or not) or more
  messages than ``[http] max_batch_messages``, 415 another content type or encoding, 503 the
  spool cannot take it (the exporter retries: the retry applies once). Error bodies are
  ``google.rpc.Status`` in the request's encoding, except the shared ones of every route
  (401/403/429 and the body-size middleware's 413), which are the API's JSON error shape.

Mapping: ``otlp_map`` and ``otlp_messages``.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from quill.ops.client.errors import InvalidInputError
from quill.ops.service import otlp_map
from quill.ops.service.api_common import ERRORS
from quill.ops.service.api_writes import _append
from quill.ops.service.auth import require
from quill.ops.service.errors import ApiError
from quill.ops.service.otlp_links import LinksUnavailableError
from quill.ops.service.otlp_messages import GenAIContentError
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

PROTOBUF, JSON = "application/x-protobuf", "application/json"
router = APIRouter()


class OtlpError(Exception):
    """An export refused whole: ``status`` (400, 413, 415, 503) and a message for the
    ``google.rpc.Status`` body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its ``Content-Encoding`` (``gzip`` or ``identity``), at most ``limit``
    bytes once inflated (a small gzip can hold gigabytes)."""
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise OtlpError(415, f"Content-Encoding {encoding!r} is not supported (gzip, identity)")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error:
        raise OtlpError(400, "the body is not valid gzip") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise OtlpError(413, f"the inflated body is over {limit} bytes ([http] max_body_bytes)")
    if not inflater.eof:
        raise OtlpError(400, "the gzip body is cut short")
    return out


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids(doc: Any) -> None:
    """OTLP JSON carries trace and span ids as hex; protobuf's JSON mapping reads bytes as
    base64: rewrite them in place (spans and their links). Raises ``OtlpError`` 400."""
    for rs in _items(doc, "resourceSpans", "resource_spans"):
        for ss in _items(rs, "scopeSpans", "scope_spans"):
            for span in _items(ss, "spans"):
                for holder in [span, *_items(span, "links")]:
                    for key in _ID_KEYS:
                        if isinstance(holder, dict) and isinstance(holder.get(key), str):
                            try:
                                raw = bytes.fromhex(holder[key])
                            except ValueError:
                                raise OtlpError(400, f"{key} is not hex: {holder[key]!r}") from None
                            holder[key] = base64.b64encode(raw).decode()


def _items(doc: Any, *keys: str) -> list:
    if not isinstance(doc, dict):
        return []
    for key in keys:
        if isinstance(doc.get(key), list):
            return doc[key]
    return []


def decode(body: bytes, kind: str, encoding: str, limit: int) -> ExportTraceServiceRequest:
    """An export body (``kind`` ``PROTOBUF`` or ``JSON``) as the protobuf message. Raises
    ``OtlpError`` (400 malformed, 413 inflated over ``limit`` bytes, 415 encoding)."""
    raw = _inflate(body, encoding, limit)
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(raw)
        except DecodeError:
            raise OtlpError(400, "the body is not an ExportTraceServiceRequest") from None
        return request
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise OtlpError(400, "the body is not JSON") from None
    except RecursionError:
        raise OtlpError(400, "the body is nested too deep to read") from None
    _hex_ids(doc)
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError, binascii.Error, RecursionError) as exc:
        raise OtlpError(400, f"the body is not an ExportTraceServiceRequest: {exc}") from None
    return request


def encode(message: Message, kind: str) -> bytes:
    """``message`` in the request's encoding (OTLP JSON: camelCase field names)."""
    if kind == PROTOBUF:
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


def _status(status: int, message: str, kind: str, headers: dict | None = None) -> Response:
    body = encode(Status(code=status, message=message), kind)
    return Response(body, status_code=status, media_type=kind, headers=headers)


def _refusal(group: otlp_map.SpanOps, client: Any, checked: dict[str, set[str]]) -> str | None:
    """Why the store would refuse one of the span's ops (its first), or None. ``checked``:
    the message ids of each session that earlier accepted spans of the export passed; an
    append is checked for its other messages only (what ``collapse`` leaves of it), so a long
    conversation's spans cost what they add. The ids pass on when the whole span does."""
    passed = []
    for op, data, batch in group.ops:
        if op == "messages.append":
            held = checked.get(data["session_id"], set())
            kept = [i for i, m in enumerate(data["messages"]) if m["id"] not in held]
            if not kept:
                continue
            data = {
                **data,
                "messages": [data["messages"][i] for i in kept],
                "order_keys": [data["order_keys"][i] for i in kept],
            }
            passed.append(data)
        try:
            batch = batch or otlp_map.placeholder_batch(group.span, op)
            precheck(op, data, batch)
            client.fits(op, data, batch_id=batch)
        except InvalidOpError as exc:
            return f"span {group.span.span}: {op}: {exc.reason}: {exc.detail}"
        except InvalidInputError as exc:
            return f"span {group.span.span}: {op}: {exc.reason}"
    for data in passed:
        checked.setdefault(data["session_id"], set()).update(m["id"] for m in data["messages"])
    return None


def _export(request: Request, body: bytes, kind: str, encoding: str) -> Response:
    state = request.app.state
    try:
        export = decode(body, kind, encoding, state.cfg.http_max_body_bytes)
    except OtlpError as exc:
        return _status(exc.status, exc.message, kind)
    groups, ignored, rejected = [], 0, []
    chains: dict = {}  # conversations walked by this export's spans (otlp_messages)
    checked: dict[str, set[str]] = {}
    spans = otlp_map.spans_of(export)
    for span in spans:
        if not span.genai:
            ignored += 1
            continue
        if len(span.trace) != 32 or len(span.span) != 16 or span.trace.strip("0") == "":
            # OTLP: a 16-byte trace id and an 8-byte span id, never all zero. Without one a
            # span has no identity: conversations would merge, retries would not dedupe.
            rejected.append(f"span {span.span or '?'}: invalid trace or span id")
            continue
        try:
            group = otlp_map.span_ops(span, chains)
        except GenAIContentError as exc:
            rejected.append(f"span {span.span}: {exc}")
            continue
        problem = _refusal(group, state.client, checked)
        if problem:
            rejected.append(problem)
        else:
            groups.append(group)
    accepted = {id(g.span) for g in groups}
    try:
        links = state.otlp_links.links([s for s in spans if not s.genai or id(s) in accepted])
    except LinksUnavailableError as exc:  # retried by the exporter; nothing appended yet
        state.log.warning("otlp.links_unavailable", error=str(exc))
        return _status(503, str(exc), kind, headers={"Retry-After": "1"})
    ops = otlp_map.collapse(
        links + groups, state.cfg.max_record_bytes // 2
    )  # links first: a session keeps its first meta
    if ops:
        try:
            # Each chat span repeats its conversation's history, which the store already
            # holds: the message count limit of JSON appends would refuse every turn of a long
            # conversation (and exporters do not retry a 413). The body limit still bounds it.
            _append(request, ops, count_messages=False)  # returns once every record is fsync'd
        except ApiError as exc:
            retry = exc.status in (503, 507)
            return _status(
                503 if retry else exc.status,
                exc.detail,
                kind,
                headers={"Retry-After": "1"} if retry else None,
            )
    state.log.info(
        "otlp.export",
        spans=len(groups) + ignored + len(rejected),
        accepted=len(groups),
        ignored=ignored,
        rejected=len(rejected),
        ops=len(ops),
    )
    answer = ExportTraceServiceResponse()
    if rejected or ignored:
        notes = rejected[:5] + ([f"… {len(rejected) - 5} more"] if len(rejected) > 5 else [])
        if ignored:
            notes.append(f"{ignored} span(s) without GenAI attributes ignored")
        answer.partial_success.rejected_spans = len(rejected)
        answer.partial_success.error_message = "; ".join(notes)
    return Response(encode(answer, kind), media_type=kind)


def _status_doc(description: str) -> dict[str, Any]:
    schema = {"type": "object", "description": "google.rpc.Status"}
    return {
        "description": description,
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": schema},
        },
    }


@router.post(
    "/v1/traces",
    dependencies=[Depends(require("write"))],
    response_class=Response,
    responses={
        200: {
            "description": "ExportTraceServiceResponse, once every record is fsync'd",
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        },
        400: _status_doc("malformed export"),
        413: _status_doc("body (or inflated body) or message count over the API's limits"),
        415: _status_doc("not application/x-protobuf or application/json, or not gzip"),
        **{code: ERRORS[code] for code in (401, 403, 429)},
        503: _status_doc("the spool cannot take it now; retry"),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        }
    },
)
async def export_traces(request: Request) -> Response:
    """OTLP/HTTP trace export (``ExportTraceServiceRequest``, protobuf or JSON, optionally
    gzip): GenAI spans become sessions, messages, tool results and usage
    (docs/importers.md). 200 once fsync'd; partial success names rejected spans."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        return _status(415, f"Content-Type must be {PROTOBUF} or {JSON}", JSON)
    encoding = request.headers.get("content-encoding", "").strip().lower()
    body = await request.body()
    return await run_in_threadpool(_export, request, body, media, encoding)
