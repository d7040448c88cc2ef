"""``normalize.dumps`` writes exactly what ``json.dumps(ensure_ascii=False, separators=(",", ":"))``
(+ scrub) writes: its encoder is the stdlib's C encoder built once per call instead of through
``json.dumps``, and stored rows must not change by a byte."""

from __future__ import annotations

import json
import math
import time

import pytest
from conftest import CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quill.store.apply import normalize
from quill.store.apply.normalize import dumps, message_row, scrub_json


def _stdlib(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reference_dumps(value):
    """``dumps`` as it was written with ``json.dumps`` (the stored format)."""
    text = _stdlib(value)
    if "\\u0000" not in text and not normalize._has_surrogate(text):
        return text
    return _stdlib(scrub_json(value))


_TEXT = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        ["\x00", "a\x00b", "\ud800", "x\udfffy", "\x7f\x1f\u2028", '"\\/\b\f\n\r\t', "é😀", ""]
    ),
)
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e16, 1e-5, 1.5e-05, 1e-7, -0.0, 1e300, 5e-324, 0.1 + 0.2, 1e22]),
)
_KEYS = st.one_of(_TEXT, st.integers(), st.booleans(), st.none(), _FLOATS)
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=2**63 - 2, max_value=2**70),
        _FLOATS,
        _TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=5),
    ),
    max_leaves=14,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_dumps_equals_the_stdlib_on_generated_values(value):
    assert normalize._encode(value) == _stdlib(value)
    assert dumps(value) == _reference_dumps(value)


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, "plain", "\x00", 10**40, {1.5: 1, True: 2, None: 3}]
)
def test_dumps_equals_the_stdlib_on_edge_values(value):
    assert normalize._encode(value) == _stdlib(value)
    assert dumps(value) == _reference_dumps(value)


def test_dumps_refuses_what_the_stdlib_refuses():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        dumps(loop)
    with pytest.raises(ValueError):  # the circular check still holds after a failed call
        dumps({"a": loop})
    with pytest.raises(TypeError):
        dumps({"a": {1, 2}})
    with pytest.raises(TypeError):
        dumps({(1, 2): 1})
    assert dumps({"a": [1, 2]}) == '{"a":[1,2]}'


@pytest.mark.corpus
def test_message_rows_equal_the_stdlib_rows_on_the_corpus(monkeypatch):
    """Every corpus message: the row with this encoder equals the row ``json.dumps`` makes,
    and the corpus exercises the encoded columns (parts, tool calls, extras)."""
    from quill.ops.importers import iter_transcript_files, parse_file

    NOW = time.time()  # the arrival: every message time is before it  # noqa: N806
    msgs = [
        m
        for p in iter_transcript_files([CORPUS])
        for s in parse_file(p).sessions
        for m in s.messages
    ]
    rows = [message_row(m, NOW) for m in msgs]
    monkeypatch.setattr(normalize, "_encode", _stdlib)
    assert rows == [message_row(m, NOW) for m in msgs]
    assert len(msgs) > 1000
    for col in ("parts", "tool_calls", "extra"):
        assert any(r[normalize.ROW_COLUMNS.index(col)] for r in rows), col
