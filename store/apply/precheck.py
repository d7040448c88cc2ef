"""Checks an op's data can pass *before* it is acknowledged, without a database.

Producers (``quill.Client``, ``quill push``, the HTTP API) run this so that a batch the
writer would certainly quarantine for its content — a bad role, a non-list ``messages``, a
field of the wrong type, a value no column can hold — is refused with a clear error instead
of acknowledged. It runs the op kind's check from ``store.apply.checks.CHECKS``, the very
function its applier runs first, so the two cannot disagree on a reason. Checks that need
the store's state (rewind targets, title clashes, tool result duplicates, restore order,
whether a message is already held) are left to the writer, and ``ops.client.wait`` reports their
outcome.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from quill.spool import OP_KINDS
from quill.spool.record import (
    HUGE_INT,
    MAX_NESTING,
    NOT_PLAIN,
    PLAIN,
    TOO_DEEP,
    id_size_problem,
    scan,
)
from quill.store.apply.checks import CHECKS
from quill.store.errors import InvalidOpError


def precheck(op: str, data: Any, batch_id: Any = None) -> bool:
    """Raise ``InvalidOpError`` if ``op``/``data`` (with the producer's ``batch_id``; None or
    empty: the spool makes one) can never be applied. Returns whether ``data`` is plain JSON
    (``spool.record.plain_json``), for ``Spool.append(plain=...)``: the spool then need not
    walk it again.

    Reasons: ``unknown-op``, ``invalid-batch`` (a batch id that is not a string or is over
    the id limits, ``spool.record.MAX_ID_CHARS``/``MAX_ID_BYTES``, which also bound every id
    inside ``data``: no backend can key a row by a longer one), ``invalid-data`` (not an
    object), the kind's content reasons
    (``op_checks.CHECKS[op]``: ``invalid-field``, ``invalid-session-id``, ``invalid-role``,
    ``invalid-message``, ``invalid-usage``, ``title-too-long``, ``self-parent``,
    ``no-such-turn``), and ``invalid-field`` for NaN/Infinity or a value that is not JSON (a
    set, datetime, bytes) anywhere in ``data``, an integer too long to write as text
    (``spool.record.scan``), or nesting deeper than ``spool.record.MAX_NESTING``."""
    if not isinstance(op, str) or op not in OP_KINDS:  # a list op is unhashable: not a TypeError
        raise InvalidOpError("unknown-op", f"op {op!r} is not one of {sorted(OP_KINDS)}")
    if batch_id:  # None or "": the spool makes one
        if not isinstance(batch_id, str):
            raise InvalidOpError("invalid-batch", "a batch id must be a string")
        problem = id_size_problem(batch_id, "batch id")
        if problem:
            raise InvalidOpError("invalid-batch", problem)
    if not isinstance(data, dict):
        raise InvalidOpError("invalid-data", "op data must be a JSON object")
    # One walk for the nesting limit, plain JSON and integers too long to write; before the
    # kind's checks, which recurse. A plain value (the usual case: what a JSON decoder gives)
    # always serialises, so only another is serialised to find what JSON cannot carry.
    found = scan(data)
    if found == TOO_DEEP:
        raise InvalidOpError(
            "invalid-field", f"op data nests objects/arrays more than {MAX_NESTING} levels deep"
        )
    if found == NOT_PLAIN:
        _check_json(data)
    if found == HUGE_INT:
        raise InvalidOpError(
            "invalid-field",
            f"op data holds an integer of more than {sys.get_int_max_str_digits()} digits, "
            "which cannot be written as JSON here",
        )
    CHECKS[op](data)
    return found == PLAIN


def _check_json(data: dict) -> None:
    """``invalid-field`` when ``data`` holds NaN or ±Infinity anywhere: Python's JSON reader
    (``quill push``, the HTTP API) accepts those literals, but JSON cannot carry them and the
    spool refuses them, so a producer would otherwise fail after appending earlier ops of
    the same request. One serialisation of the op, microseconds for a message batch."""
    try:
        json.dumps(data, allow_nan=False, check_circular=False)
    except ValueError:
        raise InvalidOpError(
            "invalid-field", "op data holds NaN or Infinity, which JSON cannot carry"
        ) from None
    except TypeError as exc:  # a Python caller's set, datetime, bytes or other object
        raise InvalidOpError(
            "invalid-field", f"op data holds a value JSON cannot carry ({exc})"
        ) from None
