"""Turning a producer's message dict (OpenAI chat shape + extras) into a ``messages`` row.

Encoding rules (producers do send double-encoded tool calls and bad clocks):
* ``tool_calls`` given as a JSON string is decoded (at most twice, for a double-encoded
  string) and stored encoded once; an empty value (``None``, ``""``, ``0``, ``False``, ``{}``,
  ``[]``, or a JSON string of one: ``"null"``, ``"{}"``, ``"[]"``) means "no tool calls"
  (column NULL); a single call object becomes a one-element list; any other value (text that
  is not JSON, a number, ``true``, a list holding a non-object) is refused
  (``invalid-field``), never dropped: it carries something the agent sent that no column
  can hold as tool calls;
* NUL characters are removed and lone UTF-16 surrogates replaced by U+FFFD in every string,
  including strings nested in parts, tool calls and unknown fields (SQLite text must be valid
  UTF-8; FTS tokenizers stop at NUL);
* a timestamp outside [2000-01-01, arrival + 1 day] is replaced by the arrival time; order is
  insertion order, never the timestamp;
* every key not listed in ``KNOWN_FIELDS`` is kept verbatim in ``extra``, merged with the
  ``extra`` object the producer gave; a key given in both with different values is refused
  (``invalid-field``), as one would replace the other.
Batch and single appends share this one function, so they store identical rows.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from quill.spool.record import id_size_problem
from quill.store.errors import InvalidOpError

try:
    from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - CPython always ships _json
    _c_make_encoder = None
from json.encoder import encode_basestring as _encode_basestring

#: ``JSONEncoder.default`` of the encoder ``json.dumps`` builds (raises ``TypeError``).
_DEFAULT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).default

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
KNOWN_FIELDS = frozenset(
    {
        "id",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "reasoning",
        "finish_reason",
        "timestamp",
        "extra",
    }
)
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_MIN_TS = 946684800.0  # 2000-01-01T00:00:00Z
_MAX_FUTURE_S = 86400.0
_SURROGATE = re.compile(r"[\ud800-\udfff]")

#: Column order of a normalised row (matches the INSERTs in ``transcript_ops.py``).
ROW_COLUMNS = (
    "ext_id",
    "role",
    "content",
    "parts",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "reasoning",
    "finish_reason",
    "ts",
    "extra",
)
#: The columns that make two rows "byte-identical" for compaction (tail originals, display
#: dedupe): everything the model sees, including the tool fields; not ids, times or extras.
IDENTITY_COLUMNS = ("role", "content", "parts", "tool_calls", "tool_call_id", "tool_name")
#: The columns that make a stored row "the same message" as a re-read one (an import deciding
#: whether a stored session holds the conversation it reads): identity plus reasoning.
COMPARED_COLUMNS = IDENTITY_COLUMNS + ("reasoning",)


def _has_surrogate(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (it cannot be encoded as UTF-8). ASCII and
    a C-speed encode attempt are far cheaper than a regex scan over long tool output."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def scrub(text: str) -> str:
    """Remove NUL characters and replace lone surrogates with U+FFFD (valid UTF-8 out)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    return _SURROGATE.sub("\ufffd", text) if _has_surrogate(text) else text


def scrub_json(value: Any) -> Any:
    """``value`` with ``scrub`` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_json(v) for k, v in value.items()}
    return value


def dumps(value: Any) -> str:
    """The one JSON serializer for stored structured fields (compact, UTF-8, scrubbed).

    Fast path: serialise once and look for the two things ``scrub`` removes — json escapes a
    NUL as ``\\u0000`` and leaves a lone surrogate as the character itself — so the
    recursive ``scrub_json`` walk (a large share of drain CPU when run on every field;
    bench/RESULTS.md) only runs for the rare value that needs it."""
    text = _encode(value)
    if "\\u0000" not in text and not _has_surrogate(text):
        return text
    return _encode(scrub_json(value))


def _encode(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, byte for byte.

    ``json.dumps`` with keyword arguments builds a ``JSONEncoder`` and, through its
    ``iterencode``, the C encoder ``c_make_encoder(markers, default, encode_basestring,
    None, ":", ",", False, False, True)`` on every call; here the same C encoder is built
    with those same arguments directly (about half the cost per value). Same function, same
    arguments, same bytes (tests/test_normalize_dumps.py also compares it with ``json.dumps``
    on generated values and every corpus message); a fresh ``markers`` dict per call keeps
    the circular-reference check (``ValueError``). Without the C accelerator: ``json.dumps``.
    """
    if _c_make_encoder is None:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str):  # JSONEncoder.encode's own shortcut for a bare string
        return _encode_basestring(value)
    return "".join(
        _c_make_encoder({}, _DEFAULT, _encode_basestring, None, ":", ",", False, False, True)(
            value, 0
        )
    )


def _opt_str(msg: dict, key: str) -> str | None:
    value = msg.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidOpError(
            "invalid-field", f"message field {key!r} must be a string, got {type(value).__name__}"
        )
    return scrub(value)


def _id(value: str | None, key: str) -> str | None:
    """``value`` (a message's id or tool-call id) unless it is over the id limits
    (``spool.record.id_size_problem``): then ``InvalidOpError('invalid-field')``."""
    problem = None if value is None else id_size_problem(value, f"message field {key!r}")
    if problem:
        raise InvalidOpError("invalid-field", problem)
    return value


def _int_id(value: int) -> str:
    """An integer message id as text; ``invalid-field`` when it has too many digits to convert
    (Python refuses over 4300), which is over the id limit anyway."""
    try:
        return str(value)
    except ValueError:
        raise InvalidOpError("invalid-field", "message field 'id' is over the id limit") from None


def tool_calls_value(value: Any) -> list | None:
    """A producer's ``tool_calls`` value as a non-empty list of call objects, or None for an
    empty value ("no calls"; the module doc lists them). Raises
    ``InvalidOpError('invalid-field')`` for a value that is neither: it would otherwise be
    acknowledged and then found nowhere (not in the row, the export or the quarantine)."""
    given = value
    for _ in range(2):  # a JSON string, or a JSON string of a JSON string (double-encoded)
        if not isinstance(value, str) or not value:
            break
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # malformed, or an integer too long to convert
            raise _bad_calls(given, "is not JSON") from None
    if not value:  # None, 0, False, {}, [], "" (given, or decoded from "null", "{}", "[]")
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise _bad_calls(given, "is not a list of call objects (or one call object)")
    return value


def _bad_calls(value: Any, why: str) -> InvalidOpError:
    shown = json.dumps(value, ensure_ascii=False, default=repr)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InvalidOpError("invalid-field", f"message field 'tool_calls' {shown} {why}")


def tool_calls_json(value: Any) -> str | None:
    """``tool_calls_value`` encoded once (a JSON array), or None for "no calls". Raises
    ``InvalidOpError('invalid-field')`` as ``tool_calls_value`` does."""
    calls = tool_calls_value(value)
    return None if calls is None else dumps(calls)


def _check_extra_clash(msg: dict, given_extra: dict) -> None:
    """``invalid-field`` when a key outside ``KNOWN_FIELDS`` is given both at the top level of
    ``msg`` and in its ``extra`` object with different values: both go to the one ``extra``
    column, where one would silently replace the other."""
    for key in given_extra.keys() - KNOWN_FIELDS:
        if key in msg and msg[key] != given_extra[key]:
            raise InvalidOpError(
                "invalid-field",
                f"message field {str(key)[:60]!r} is given both as a field and in 'extra', "
                "with different values: one would be lost",
            )


def _check_content(content: Any) -> None:
    """``invalid-field`` unless ``content`` is a string, a list of parts, one part or None."""
    if content is not None and not isinstance(content, (str, dict, list)):
        raise InvalidOpError(
            "invalid-field",
            "message content must be a string, a list of parts or null, got "
            f"{type(content).__name__}",
        )


def content_columns(content: Any) -> tuple[str | None, str | None]:
    """``(text, parts_json)`` for a content value: a string, a list of parts (or one part),
    or None. Raises ``InvalidOpError('invalid-field')`` for any other value."""
    _check_content(content)
    if content is None:
        return None, None
    if isinstance(content, str):
        return scrub(content), None
    if isinstance(content, dict):
        content = [content]
    texts = [
        p.get("text")
        for p in content
        if isinstance(p, dict)
        and isinstance(p.get("type"), str)
        and p["type"] in TEXT_PART_TYPES
        and isinstance(p.get("text"), str)
    ]
    texts += [p for p in content if isinstance(p, str)]
    text = scrub("\n".join(texts)) if texts else None
    return text, dumps(content)


#: Epoch numbers by magnitude: below each bound, the unit it is read in (divisor to seconds).
#: Present-day times are ~1.8e9 s, ~1.8e12 ms, ~1.8e15 µs, ~1.8e18 ns: the bounds sit three
#: orders of magnitude apart, so no time after 2000 in one unit is read as another.
_EPOCH_UNITS = ((1e11, 1.0), (1e14, 1e3), (1e17, 1e6), (1e20, 1e9))


def timestamp(value: Any, arrived_at: float) -> float:
    """Epoch seconds from ``value``: a number in seconds, milliseconds, microseconds or
    nanoseconds (told apart by magnitude, ``_EPOCH_UNITS``), a numeric string, or an ISO-8601
    string (no zone = UTC). Absent (None or "") → ``arrived_at``. Raises
    ``InvalidOpError('invalid-field')`` for a value that is present but not such a time, or
    outside [2000-01-01, ``arrived_at`` + 1 day]: a time Quill cannot read is refused, never
    silently replaced by the arrival time."""
    kind = type(value)
    if (kind is float or kind is int) and _MIN_TS <= value < _EPOCH_UNITS[0][0]:
        # The usual case, epoch seconds in range: what the rules below give, without them.
        if value <= arrived_at + _MAX_FUTURE_S:
            return float(value)
    if value is None or value == "":
        return arrived_at
    ts: float | None = None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            try:
                parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                parsed = None
            if parsed is not None:
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=dt.UTC)
                ts = parsed.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            size = abs(float(value))
            ts = next((float(value) / div for bound, div in _EPOCH_UNITS if size < bound), None)
        except OverflowError:
            ts = None
    if ts is None or ts != ts or ts < _MIN_TS or ts > arrived_at + _MAX_FUTURE_S:
        raise InvalidOpError(
            "invalid-field",
            f"timestamp {str(value)[:60]!r} is not a time after 2000-01-01 and at most a day "
            "ahead (epoch s, ms, µs or ns, or ISO-8601)",
        )
    return ts


def message_row(msg: Any, arrived_at: float) -> tuple:
    """Validate one message dict and return its row values in ``ROW_COLUMNS`` order.

    Raises ``InvalidOpError`` for a non-object, a missing or unknown role, or a field of the
    wrong type. Nothing is written; callers apply a batch all-or-nothing.
    """
    row = _message(msg, arrived_at, build=True)
    assert row is not None  # built
    return row


def check_message(msg: Any, arrived_at: float) -> None:
    """``message_row``'s checks alone, in its order: raises the very ``InvalidOpError``
    (reason and detail) ``message_row`` raises for ``msg``, and returns None where it would
    return a row. For a producer's precheck, which needs the verdict, not the row: the
    JSON encodings of parts, tool calls and extras are skipped (they cannot fail on a value
    that is JSON, which precheck establishes first); tool calls are still decoded and
    checked."""
    _message(msg, arrived_at, build=False)


def _message(msg: Any, arrived_at: float, *, build: bool) -> tuple | None:
    """``message_row`` (``build``) or ``check_message``: one body, so the checks and their
    order cannot differ. Every check runs either way; ``build=False`` skips only what
    cannot raise: the text of parts, the JSON encodings and the ``extra`` object."""
    if not isinstance(msg, dict):
        raise InvalidOpError(
            "invalid-message", f"a message must be a JSON object, got {type(msg).__name__}"
        )
    role = msg.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a dict/list role is unhashable
        roles = ", ".join(sorted(ROLES))
        if role is None:
            raise InvalidOpError("invalid-role", f"message has no role; give one of {roles}")
        raise InvalidOpError(
            "invalid-role", f"message role {json.dumps(role, default=repr)} is not one of {roles}"
        )
    ext_id = msg.get("id")
    if ext_id is not None and (not isinstance(ext_id, (str, int)) or isinstance(ext_id, bool)):
        raise InvalidOpError("invalid-field", "message id must be a string or an integer")
    given_extra = msg.get("extra")
    if isinstance(given_extra, dict):
        _check_extra_clash(msg, given_extra)
    if build:
        text, parts = content_columns(msg.get("content"))
        extra = {k: v for k, v in msg.items() if k not in KNOWN_FIELDS}
        if isinstance(given_extra, dict):
            extra = {**given_extra, **extra}
        elif given_extra is not None:
            extra["extra"] = given_extra
    else:
        _check_content(msg.get("content"))
    if ext_id is not None:
        ext_id = _id(scrub(str(ext_id)) if isinstance(ext_id, str) else _int_id(ext_id), "id")
    calls = msg.get("tool_calls")
    if calls is not None:  # most messages carry none: skip the call
        calls = tool_calls_value(calls)
    tool_calls = dumps(calls) if build and calls is not None else None
    tool_call_id = _id(_opt_str(msg, "tool_call_id"), "tool_call_id")
    name = _opt_str(msg, "name")
    reasoning = _opt_str(msg, "reasoning")
    finish_reason = _opt_str(msg, "finish_reason")
    ts = timestamp(msg.get("timestamp"), arrived_at)
    if not build:
        return None
    return (
        ext_id,
        role,
        text,
        parts,
        tool_calls,
        tool_call_id,
        name,
        reasoning,
        finish_reason,
        ts,
        dumps(extra) if extra else None,
    )


def identity(row: tuple) -> tuple:
    """The ``IDENTITY_COLUMNS`` values of a row in ``ROW_COLUMNS`` order."""
    return tuple(row[ROW_COLUMNS.index(c)] for c in IDENTITY_COLUMNS)
