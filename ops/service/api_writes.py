"""The append routes of the JSON API: ``POST /api/v1/ops`` and
``POST /api/v1/sessions/{id}/messages``, and their request and response models.

Appends take the CLI's path exactly: ``quill.store.apply.precheck`` on every op first (a
batch the writer would certainly quarantine is refused with 422 and its ``reason``, and
nothing of the request is appended), then ``quill.Client.submit`` per op (the spool append),
which returns only after the record is fsync'd — so a 202 carries the batch id and spool
position of a durable record.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from quill.ops.client.errors import InvalidInputError, OverloadedError, QuillError
from quill.ops.client.errors import SpoolFullError as QuillSpoolFull
from quill.ops.client.fence import stamp_ops
from quill.ops.service.api_common import ERRORS
from quill.ops.service.auth import require
from quill.ops.service.errors import ApiError, overloaded
from quill.spool import OP_KINDS
from quill.store.apply.normalize import ROLES
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

router = APIRouter()

#: What a write may answer besides ``ERRORS``: each with the shaped error body.
WRITE_ERRORS = {
    400: ERRORS[422] | {"description": "the body is not UTF-8 (bad-request)"},
    408: ERRORS[422] | {"description": "the body did not arrive in time (body-timeout)"},
    413: ERRORS[422] | {"description": "body or batch too large"},
}
BATCH_ID = r"^[0-9A-Za-z][0-9A-Za-z._:-]{0,127}$"


OpKind = Literal[tuple(sorted(OP_KINDS))]  # type: ignore[valid-type]  # the spool's op kinds


class OpIn(BaseModel):
    """One spool op: ``op`` is an op kind (``messages.append``, ``session.create`` …)."""

    op: OpKind
    data: dict[str, Any]
    batch: str | None = Field(
        default=None,
        pattern=BATCH_ID,
        description="idempotency key: a batch id is applied once (retry with the same one)",
    )


class OpsIn(BaseModel):
    ops: list[OpIn] = Field(min_length=1)


#: What a message is (the schema generated clients build from; the store's checks,
#: ``store.apply.normalize.message_row``, decide): a ``role``, and the known fields' types.
#: Other keys are kept as the message's extra fields.
MESSAGE_SCHEMA = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": sorted(ROLES)},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object"}},
                {"type": "null"},
            ],
            "description": "text, or content parts ({type: text|image_url|…})",
        },
        "id": {"anyOf": [{"type": "string", "maxLength": 512}, {"type": "integer"}]},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string", "maxLength": 512},
        "name": {"type": "string"},
        "reasoning": {"type": "string"},
        "finish_reason": {"type": "string"},
        "timestamp": {
            "anyOf": [{"type": "number"}, {"type": "string"}],
            "description": "epoch seconds (s, ms, µs or ns) or ISO 8601",
        },
    },
    "additionalProperties": True,
}


class MessagesIn(BaseModel):
    messages: list[dict[str, Any]] = Field(
        min_length=1, json_schema_extra={"items": MESSAGE_SCHEMA}
    )
    batch: str | None = Field(default=None, pattern=BATCH_ID)


class AckOut(BaseModel):
    op: str
    batch: str
    position: str = Field(description="spool position SEGMENT:OFFSET of the fsync'd record")
    unfenced: str | None = Field(
        default=None,
        description="set when this op on an existing session was appended without "
        "deletions_seen because the store could not be read: why (docs/ops.md)",
    )


class AcksOut(BaseModel):
    acks: list[AckOut]


def _append(
    request: Request, ops: list[tuple[str, Any, str | None]], *, count_messages: bool = True
) -> AcksOut:
    app = request.app.state
    messages = sum(
        len(d.get("messages") or [])
        for _, d, _ in ops
        if isinstance(d, dict) and isinstance(d.get("messages"), list)
    )
    if count_messages and messages > app.cfg.http_max_batch_messages:
        raise ApiError(
            413,
            "batch-too-large",
            f"{messages} messages in one request; the limit is "
            f"{app.cfg.http_max_batch_messages} ([http] max_batch_messages)",
        )
    # Ops on a session the store holds carry deletions_seen, as the client's (ops.client.fence).
    stamped = stamp_ops(app.cfg, ops)
    ops = stamped.ops
    # Every op is checked before any is appended, so a refused request appends nothing; the
    # appends below do not check again (``_append_many_checked``).
    plain: list[bool] = []
    for index, (op, data, batch) in enumerate(ops):
        try:
            plain.append(precheck(op, data, batch))
        except InvalidOpError as exc:
            raise ApiError(
                422,
                exc.reason,
                f"op {index}: {exc.detail}; nothing was appended",
                extra={"op_index": index},
            ) from None
        if len(ops) > 1:  # a single op is measured by the append itself (no second encode)
            try:
                app.client.fits(op, data, batch_id=batch)
            except InvalidInputError as exc:
                raise _refused(index, exc) from None

    def done(exc: Exception) -> list[dict[str, Any]]:
        """The acks of the ops made durable before ``exc`` (a prefix of the request)."""
        durable = getattr(exc, "acks", [])
        return [_ack_out(op, a).model_dump() for (op, _, _), a in zip(ops, durable)]

    try:
        # One fdatasync covers every record of the request; returns once they are durable.
        acks = app.client._append_many_checked(ops, plain)
    except QuillSpoolFull as exc:
        raise ApiError(
            507,
            "spool-full",
            "the spool's disk is full; retry later with the same batch ids",
            extra={"acks": done(exc)},
        ) from None
    except InvalidInputError as exc:
        # Only a single op's record can be too large here: ``fits`` measured each of several.
        raise _refused(0, exc) from None
    except OverloadedError as exc:  # no descriptor for a segment: the rest was not appended
        busy = overloaded("the spool")
        busy.extra = {"acks": done(exc)}
        raise busy from None
    except QuillError as exc:
        app.log.error("http.spool_error", error_type=type(exc).__name__)
        raise ApiError(
            503,
            "spool-unavailable",
            "the spool refused the append; retry with the same batch ids",
            extra={"acks": done(exc)},
        ) from None
    if stamped.unfenced:  # appended all the same (never block an agent), and said
        app.log.warning("http.unfenced", ops=len(stamped.unfenced), why=stamped.why)
    return AcksOut(
        acks=[
            _ack_out(op, a, stamped.why if i in stamped.unfenced else None)
            for i, ((op, _, _), a) in enumerate(zip(ops, acks))
        ]
    )


def _ack_out(op: str, ack: Any, unfenced: str | None = None) -> AckOut:
    return AckOut(op=op, batch=ack.batch_id, position=str(ack.position), unfenced=unfenced)


def _refused(index: int, exc: InvalidInputError) -> ApiError:
    """The answer for op ``index`` refused by the spool before anything was appended: 413
    ``record-too-large`` (``[spool] max_record_bytes``), else 422 with the refusal's reason."""
    too_large = exc.reason == "record-too-large"
    return ApiError(
        413 if too_large else 422,
        exc.reason if too_large else "invalid-data",
        f"op {index}: {exc.message}",
        extra={"op_index": index},
    )


@router.post(
    "/ops",
    status_code=202,
    response_model=AcksOut,
    dependencies=[Depends(require("write"))],
    responses=WRITE_ERRORS,
)
def append_ops(body: OpsIn, request: Request) -> AcksOut:
    """Append ops, in order. 202 once every record is fsync'd into the spool; the writer applies
    them shortly after (``GET /api/v1/sessions/{id}`` shows them)."""
    return _append(request, [(o.op, o.data, o.batch) for o in body.ops])


@router.post(
    "/sessions/{session_id:sid}/messages",
    status_code=202,
    response_model=AcksOut,
    dependencies=[Depends(require("write"))],
    responses=WRITE_ERRORS,
)
def append_messages(session_id: str, body: MessagesIn, request: Request) -> AcksOut:
    """Append messages to a session (one ``messages.append`` op; the session is created if new)."""
    return _append(
        request,
        [("messages.append", {"session_id": session_id, "messages": body.messages}, body.batch)],
    )
