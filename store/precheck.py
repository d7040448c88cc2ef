"""Checks an op's data can pass *before* it is acknowledged, without a database.

Producers (``quill push``) run this so that a batch the writer would certainly quarantine —
a bad role, a non-list ``messages``, a value no column can hold — is refused with a clear
error instead of acknowledged. It uses the same functions the appliers use, so the two
cannot disagree; checks that need the store's state (rewind targets, title clashes, tool
result duplicates) are left to the writer, and ``ops.wait`` reports their outcome.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any

from quill.spool import OP_KINDS

from .errors import InvalidOpError
from .normalize import message_row
from .op_common import session_id
from .usage import normalize_usage

_MESSAGE_OPS = ("messages.append", "messages.compact", "messages.replace")
_NUMBERS = ("started_at", "ended_at", "message_id", "tail_count", "user_turn", "expect_head_id")
_INT64 = 2**63


def precheck(op: str, data: Any) -> None:
    """Raise ``InvalidOpError`` if ``op``/``data`` can never be applied; return None if it may."""
    if op not in OP_KINDS:
        raise InvalidOpError("unknown-op", f"op {op!r} is not one of {sorted(OP_KINDS)}")
    if not isinstance(data, dict):
        raise InvalidOpError("invalid-data", "op data must be a JSON object")
    if op == "sessions.delete":
        # Imported here: session_delete pulls in the indexer and connection modules, which
        # the producer path (`quill push`, bench/cli.py) must not pay for.
        from .session_delete import check_delete
        check_delete(data)
        _check_json(data)
        return
    if op == "usage.reprice":
        from .usage_reprice import check_reprice
        check_reprice(data)
        _check_json(data)
        return
    session_id(data)
    if op == "session.create":
        from .ops import check_create
        check_create(data)
    for key in _NUMBERS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT64:
            raise InvalidOpError("invalid-field", f"{key!r} does not fit in 64 bits")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidOpError("invalid-field", f"{key!r} must be finite")
    if op == "messages.restore":
        from .restore import check_restore
        _, rows = check_restore(data)
        data = {"messages": [row.get("message") for row in rows]}
    if op in _MESSAGE_OPS or op == "messages.restore":
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise InvalidOpError("invalid-field", f"{op} needs a 'messages' list")  # restore: a list by now
        now = time.time()
        for i, msg in enumerate(messages):
            try:
                message_row(msg, now)
                holder = msg if "usage" in msg or not isinstance(msg.get("extra"), dict) else msg["extra"]
                if op != "messages.restore" and holder.get("usage") is not None:  # restore derives no usage
                    normalize_usage(holder["usage"])
            except InvalidOpError as exc:
                raise InvalidOpError(exc.reason, f"message {i}: {exc.detail}") from None
    if op == "usage.record":
        normalize_usage(data.get("usage"))
    _check_json(data)


def _check_json(data: dict) -> None:
    """``invalid-field`` when ``data`` holds NaN or ±Infinity anywhere: Python's JSON reader
    (``quill push``, the HTTP API) accepts those literals, but JSON cannot carry them and the
    spool refuses them, so a producer would otherwise fail after appending earlier ops of
    the same request. One serialisation of the op, microseconds for a message batch."""
    try:
        json.dumps(data, allow_nan=False, check_circular=False)
    except ValueError:
        raise InvalidOpError("invalid-field", "op data holds NaN or Infinity, which JSON cannot carry") from None
    except (TypeError, RecursionError):
        return  # not JSON-shaped (a Python caller's object): the spool's own check refuses it
