"""A producer's precheck runs the writer's message rules without building rows
(``normalize.check_message``) and walks an op's data once (``spool.record.scan``), so an
append costs less CPU; it refuses exactly what it refused before, with the same error.

* ``check_message`` raises what ``message_row`` raises (reason and detail) on generated
  messages, hand-picked bad ones and every corpus message (where both pass);
* ``scan`` answers what ``nesting_ok`` and ``plain_json`` answer, on generated values;
* an integer too long to write as text is refused at the append with a classified error
  (``invalid-field``; it used to escape as a bare ``ValueError``), nothing appended;
* a ``tool_calls`` string holding such a number is refused (``invalid-field``) like any
  other value that is not tool calls, not a bare ``ValueError``.
"""

from __future__ import annotations

import time

import pytest
from conftest import CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quill import Client
from quill.ops.client.errors import InvalidInputError
from quill.spool import SpoolReader
from quill.spool.record import (
    HUGE_INT,
    NOT_PLAIN,
    PLAIN,
    TOO_DEEP,
    nesting_ok,
    plain_json,
    scan,
)
from quill.store.apply.normalize import KNOWN_FIELDS, check_message, message_row
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

NOW = time.time()
HUGE = 10**5000  # more digits than Python writes as text (4300 by default)

_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\x00", "\ud800", "2024-01-01T00:00:00Z", "1700000000", "x" * 600]),
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=5), inner, max_size=3),
        st.tuples(inner),
    ),
    max_leaves=12,
)
#: Messages mixing every known field, any JSON type in each, with unknown fields too.
_MESSAGE = st.one_of(
    st.dictionaries(
        st.sampled_from(sorted(KNOWN_FIELDS) + ["role", "role", "extra_key"]),
        st.one_of(
            _VALUE,
            st.sampled_from(["user", "assistant", "tool", "robot", 1.7e12, 1e30, -5]),
        ),
        max_size=6,
    ),
    _VALUE,
)


def _outcome(fn, msg):
    try:
        return ("ok", fn(msg, NOW) is None)
    except InvalidOpError as exc:
        return ("refused", exc.reason, exc.detail)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_MESSAGE)
def test_check_message_refuses_what_message_row_refuses(msg):
    row = _outcome(message_row, msg)
    checked = _outcome(check_message, msg)
    if row[0] == "ok":
        assert checked == ("ok", True)  # no row built
    else:
        assert checked == row


@pytest.mark.parametrize(
    "msg",
    [
        "not a message",
        {"content": "no role"},
        {"role": ["user"], "content": "x"},
        {"role": "user", "id": True},
        {"role": "user", "content": 5},
        {"role": "user", "content": "x", "id": "i" * 600},
        {"role": "tool", "content": "x", "tool_call_id": 7},
        {"role": "tool", "content": "x", "tool_call_id": "c" * 600},
        {"role": "user", "content": "x", "name": ["n"]},
        {"role": "user", "content": "x", "reasoning": {}},
        {"role": "user", "content": "x", "finish_reason": 1},
        {"role": "user", "content": "x", "timestamp": "yesterday"},
        {"role": "user", "content": "x", "timestamp": 1.0},
        {"role": "user", "content": 5, "timestamp": "yesterday"},  # the first check wins
    ],
)
def test_check_message_gives_the_same_error_on_each_rule(msg):
    expected = _outcome(message_row, msg)
    assert expected[0] == "refused"
    assert _outcome(check_message, msg) == expected


def test_check_message_passes_corpus_messages():
    """The first 3,000 messages the importers read from the shared corpus (every agent's
    files come early in its order)."""
    from quill.ops.importers import iter_transcript_files, parse_file

    msgs: list = []
    for p in iter_transcript_files([CORPUS]):
        msgs += [m for s in parse_file(p).sessions for m in s.messages]
        if len(msgs) > 3000:
            break
    assert len(msgs) > 1000
    for m in msgs:
        assert check_message(m, NOW) is None and message_row(m, NOW)


@settings(max_examples=150, deadline=None)
@given(_VALUE, st.integers(min_value=1, max_value=4))
def test_scan_answers_what_the_two_walks_answer(value, limit):
    found = scan(value, limit)
    if not nesting_ok(value, limit):
        assert found == TOO_DEEP
    else:
        assert found == (PLAIN if plain_json(value) else NOT_PLAIN)


def test_scan_finds_too_deep_nesting_and_huge_integers():
    deep: list = []
    for _ in range(300):
        deep = [deep]
    assert scan({"x": deep}) == TOO_DEEP
    assert scan({"x": [1, {"y": HUGE}]}) == HUGE_INT
    assert scan({"x": [-HUGE]}) == HUGE_INT
    assert scan({"x": 10**4299}) == PLAIN  # 4300 digits: writable
    assert scan(HUGE) == HUGE_INT and scan(float("nan")) == NOT_PLAIN and scan("s") == PLAIN


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "x", "meta": HUGE},
        {"role": "user", "content": [{"type": "text", "text": "a", "n": HUGE}]},
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "n": HUGE}]},
    ],
)
def test_an_integer_too_long_to_write_is_refused_at_the_append(tmp_path, message):
    with pytest.raises(InvalidOpError) as refused:
        precheck("messages.append", {"session_id": "s", "messages": [message]})
    assert refused.value.reason == "invalid-field" and "digits" in refused.value.detail
    client = Client(tmp_path / "home")
    client.append("s", [{"role": "user", "content": "before"}])
    end = SpoolReader(client.config.spool_dir).end()
    with pytest.raises(InvalidInputError) as public:
        client.append("s", [message])
    assert public.value.reason == "invalid-field"
    assert SpoolReader(client.config.spool_dir).end() == end  # nothing appended


def test_a_tool_calls_string_too_long_to_convert_is_refused(tmp_path):
    """Python refuses to convert a JSON number of more than 4300 digits (``ValueError``, not
    ``JSONDecodeError``): such a ``tool_calls`` string is not JSON Quill can read, refused at
    the append with a classified error (``invalid-field``), nothing appended."""
    message = {"role": "assistant", "content": "answer", "tool_calls": "1" * 5000}
    with pytest.raises(InvalidOpError) as refused:
        precheck("messages.append", {"session_id": "s", "messages": [message]})
    assert refused.value.reason == "invalid-field" and "tool_calls" in refused.value.detail
    client = Client(tmp_path / "home")
    client.append("s", [{"role": "user", "content": "before"}])
    end = SpoolReader(client.config.spool_dir).end()
    with pytest.raises(InvalidInputError) as public:
        client.append("s", [message, {"role": "user", "content": "after"}])
    assert public.value.reason == "invalid-field"
    assert SpoolReader(client.config.spool_dir).end() == end  # nothing appended
