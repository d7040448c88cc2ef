"""The content rules of the ops that carry or name messages (``messages.append``,
``compact``, ``replace``, ``rewind``, ``restore``): one check function per kind, listed with
every other kind's in ``store.apply.checks.CHECKS``, whose module doc gives the contract (the
writer's applier and the producer's precheck call the same function; ``InvalidOpError``).

Imports stay light (no SQLite connection, indexer or msgspec): ``quill push`` loads this.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from quill.store.apply.normalize import check_message, message_row
from quill.store.apply.order import stated_keys
from quill.store.apply.rules import no_nul, opt, session_id
from quill.store.apply.usage_fields import (
    carries_usage,
    check_call,
    usage_holder,  # where a message keeps its usage attributes
)
from quill.store.errors import InvalidOpError

#: Row states a ``messages.restore`` may carry.
STATES = ("live", "compacted", "superseded", "rewound")
_REWIND_TARGETS = "messages.rewind needs exactly one of message_id, ext_id, user_turn, ext_ids"


#: ``rows(messages) -> rows``: how a message op's messages become rows. Precheck uses the
#: default, ``checked_messages`` (the normaliser's checks alone, no rows built); the writer
#: passes ``message_rows._rows``, the normaliser plus the blob store, so a message is
#: normalised once per apply.
RowsFn = Callable[[list], list]


def message_rows(messages: list) -> list[tuple]:
    """``normalize.message_row`` of each message (arrival = now), its index in the error."""
    return _each(messages, message_row)


def checked_messages(messages: list) -> list[None]:
    """``message_rows``' checks alone (``normalize.check_message``): raises the very
    ``InvalidOpError`` ``message_rows`` raises, and returns one None per message instead of
    its row."""
    return _each(messages, check_message)


def _each(messages: list, one: Callable[[object, float], tuple | None]) -> list:
    now = time.time()
    out = []
    for i, msg in enumerate(messages):
        try:
            out.append(one(msg, now))
        except InvalidOpError as exc:
            raise InvalidOpError(exc.reason, f"message {i}: {exc.detail}") from None
    return out


def _target_fields(data: dict, id_key: str, ext_key: str) -> tuple[int | None, str | int | None]:
    """A message named by store id ``id_key`` or producer id ``ext_key`` (one, or neither)."""
    mid, ext = opt(data, id_key, int), opt(data, ext_key, (str, int))
    if mid is not None and ext is not None:
        raise InvalidOpError("invalid-field", f"give {id_key!r} or {ext_key!r}, not both")
    return mid, ext


def _messages(data: dict, rows: RowsFn, *, allow_empty: bool = True) -> list:
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise InvalidOpError("invalid-field", "this op needs a 'messages' list")
    if not messages and not allow_empty:
        raise InvalidOpError("invalid-field", "'messages' must not be empty")
    return rows(messages)


def check_usage_of(messages: list) -> None:
    """The usage rules (``usage.check_call``) of each message carrying a ``usage``, on it or
    in its ``extra``. Raises ``InvalidOpError`` (``invalid-usage``, ``invalid-field``)."""
    for i, msg in enumerate(messages):
        if carries_usage(msg):
            try:
                check_call(usage_holder(msg))
            except InvalidOpError as exc:
                raise InvalidOpError(exc.reason, f"message {i}: {exc.detail}") from None


def check_append(data: dict, rows: RowsFn = checked_messages, *, usage: bool = True) -> list:
    """``messages.append``: a ``messages`` list of valid messages, ``order_keys`` absent or one
    key per message (``order.stated_keys``), ``source`` a string, ``revise`` a boolean (not
    with ``order_keys``: the last copy against the earliest place and time), the usage each
    message carries. Returns what ``rows`` returns (the writer's rows; one None per message
    for precheck's default). ``usage=False`` (the writer) leaves usage to the
    applier, which checks it on the messages it inserts: one whose producer id the session
    already holds (or an earlier message of the batch has) is skipped whole, and which ones
    the session holds only the store knows — so precheck, checking every message, is at
    most stricter, and only for such a message."""
    session_id(data)
    out = _messages(data, rows)
    stated = stated_keys(data, len(out))
    opt(data, "source", str)
    if opt(data, "revise", bool) and stated is not None:
        raise InvalidOpError(
            "invalid-field", "revise and order_keys do not go together (last copy vs earliest)"
        )
    no_nul(data, "source")
    if usage:
        check_usage_of(data["messages"])
    return out


def check_compact(data: dict, rows: RowsFn = checked_messages) -> tuple[list, int]:
    """``messages.compact``: a non-empty ``messages`` list of valid messages, ``tail_count``
    in 0..len(messages), ``watermark`` (store id) or ``watermark_ext_id``, not both. Usage on
    these messages is not recorded (they are copies), so it is not checked. Returns ``(rows,
    tail_count)`` (``rows``: what ``rows`` returns, as for ``check_append``).
    ``unknown-session``, ``unknown-message`` and ``tail-mismatch`` need the store."""
    session_id(data)
    out = _messages(data, rows, allow_empty=False)
    tail_count = opt(data, "tail_count", int) or 0
    if not 0 <= tail_count <= len(out):
        raise InvalidOpError("invalid-field", f"tail_count must be between 0 and {len(out)}")
    _target_fields(data, "watermark", "watermark_ext_id")
    return out, tail_count


def check_replace(data: dict, rows: RowsFn = checked_messages) -> list:
    """``messages.replace``: a ``messages`` list of valid messages, ``from_message_id`` or
    ``from_ext_id`` (not both), ``expect_head_id`` an integer or ``expect_head_ext_id`` a
    producer id (not both), ``source`` a string, the usage each message carries (all are
    inserted). Returns what ``rows`` returns (as for ``check_append``)."""
    session_id(data)
    out = _messages(data, rows)
    _target_fields(data, "from_message_id", "from_ext_id")
    _target_fields(data, "expect_head_id", "expect_head_ext_id")
    opt(data, "source", str)
    no_nul(data, "source")
    check_usage_of(data["messages"])
    return out


def check_rewind(data: dict) -> None:
    """``messages.rewind``: exactly one target — ``message_id`` (integer), ``ext_id``
    (string or integer), ``user_turn`` (integer, not 0: ``no-such-turn``), or ``ext_ids`` (a
    non-empty list of string/integer ids) — and ``expect_head_id`` an integer or
    ``expect_head_ext_id`` a producer id (not both). Raises
    ``InvalidOpError`` (``invalid-field``, ``no-such-turn``); whether the target exists, is
    a live user message, and the head matches needs the store."""
    session_id(data)
    if "ext_ids" in data:
        ids = data["ext_ids"]
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in ids)
        ):
            raise InvalidOpError("invalid-field", "ext_ids must be a non-empty list of message ids")
        if any(k in data for k in ("message_id", "ext_id", "user_turn")):
            raise InvalidOpError("invalid-field", _REWIND_TARGETS)
    else:
        turn = opt(data, "user_turn", int)
        mid, ext = _target_fields(data, "message_id", "ext_id")
        if (mid is None and ext is None) == (turn is None):
            raise InvalidOpError("invalid-field", _REWIND_TARGETS)
        if turn == 0:
            raise InvalidOpError(
                "no-such-turn", "user_turn 0 names no turn (1 = the first, -1 = the last)"
            )
    _target_fields(data, "expect_head_id", "expect_head_ext_id")


def check_restore(data: dict, rows: RowsFn = checked_messages) -> tuple[int, list[dict], list]:
    """``messages.restore``: ``offset`` ≥ 0, a non-empty ``rows`` list of ``{message, state,
    origin}`` (a state in ``STATES``, origin an earlier position or null), ``started_at`` a
    number, ``source`` a string, ``blob_refs`` a list of hashes, each message valid. Its
    usage is not checked: restore derives none (the export carries usage as
    ``usage.record``). Returns ``(offset, items, message rows)``. ``restore-out-of-order`` and
    ``missing-blob`` need the store."""
    session_id(data)
    offset = opt(data, "offset", int)
    items = data.get("rows")
    if offset is None or offset < 0 or not isinstance(items, list) or not items:
        raise InvalidOpError(
            "invalid-field", "messages.restore needs offset (≥ 0) and a non-empty rows list"
        )
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("state") not in STATES:
            raise InvalidOpError(
                "invalid-field", f"rows[{i}] needs a message and a state in {STATES}"
            )
        origin = item.get("origin")
        if origin is not None and (
            not isinstance(origin, int) or isinstance(origin, bool) or not 0 <= origin < offset + i
        ):
            raise InvalidOpError("invalid-field", f"rows[{i}].origin must be an earlier position")
    opt(data, "started_at", (int, float))
    opt(data, "source", str)
    no_nul(data, "source")
    restore_blob_refs(data)
    return offset, items, rows([item.get("message") for item in items])


def restore_blob_refs(data: dict) -> list[str]:
    """A restore's ``blob_refs``: the blob hashes (64 lowercase hex characters each) its rows
    hold as references rather than inline, at most one per row's worth of references; ``[]``
    when absent. Raises ``InvalidOpError('invalid-field')``. Whether each is stored needs the
    store (``missing-blob``, store/apply/restore.py)."""
    refs = data.get("blob_refs", [])
    if not isinstance(refs, list) or not all(
        isinstance(r, str) and len(r) == 64 and all(c in "0123456789abcdef" for c in r)
        for r in refs
    ):
        raise InvalidOpError(
            "invalid-field", "blob_refs must be a list of SHA-256 hashes (64 lowercase hex)"
        )
    return refs
