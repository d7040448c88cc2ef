"""The spool's fast JSON path (msgspec) writes and reads exactly what the stdlib
path would: every value decodes to what the producer passed, and every line decodes as
``json.loads`` decodes it."""

from __future__ import annotations

import json
import math
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quill.spool import record
from quill.spool.errors import DamagedRecordError

TRICKY = [
    {"s": "plain", "u": "é中🚀", "ctl": 'a\nb\t"q"\\\x01', "empty": "", "none": None},
    {
        "ints": [
            0,
            -1,
            2**53 + 1,
            2**63 - 1,
            2**63,
            2**64 - 1,
            2**64,
            -(2**63),
            -(2**63) - 1,
            10**30,
        ]
    },
    {"floats": [0.1, -0.0, 1e-05, 1e300, 5e-324, 123456789.123456789, 1.0, 2.5e-8]},
    {"tuple": (1, 2, ("x",)), "bools": [True, False], "nested": {"a": [{"b": [{}]}]}},
    # True == 1 as a dict key, so the bool keys need a dict of their own to reach the encoder
    {"keys": {1: "int key", 2.5: "float key", None: "none key"}},
    {"bool keys": {True: "true key", False: "false key"}},
    {"surrogate": "caf\udce9", "key\udcff": "v"},
]


def _body(data: dict) -> dict:
    return {
        "v": record.VERSION,
        "op": "messages.append",
        "batch": "b",
        "producer": "p",
        "seq": 1,
        "ts": 1764412345.125,
        "data": data,
    }


@pytest.mark.parametrize("data", TRICKY)
def test_encoded_records_decode_to_what_the_stdlib_path_writes(data):
    body = _body(data)
    line = record.encode(body)
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    stdlib = json.loads(record._SURROGATE.sub("\ufffd", raw))  # what the stdlib path writes
    assert record.decode(line) == stdlib
    body_bytes = line[: -record.CRC_SUFFIX_LEN] + b"}"
    assert zlib.crc32(body_bytes) & 0xFFFFFFFF == int(line[-11:-3], 16)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), {"x": [float("nan")]}])
def test_non_finite_floats_are_refused_not_written_as_null(bad):
    with pytest.raises(ValueError):
        record.encode(_body({"x": bad}))


@pytest.mark.parametrize("data", [{1j: 1}, {"x": object()}, {"x": {1, 2}}])
def test_values_json_cannot_hold_are_refused(data):
    with pytest.raises((TypeError, ValueError)):
        record.encode(_body(data))


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":NaN,"b":Infinity,"c":-Infinity}',
        b'{"s":"\\ud800x"}',
        b'{"n":123456789012345678901234567890}',
        b'{"n":-9223372036854775809,"m":18446744073709551615}',
        b'{"f":1.5e-7,"g":-0.0,"k":"\\u00e9"}',
        b'{"dup":1,"dup":2}',
        '{"utf16":"x"}'.encode("utf-16"),
    ],
)
def test_lines_decode_exactly_as_the_stdlib_decodes_them(text):
    want = json.loads(text)
    got = record.loads(text)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    for key in want:
        if isinstance(want[key], float) and math.isnan(want[key]):
            continue
        assert type(got[key]) is type(want[key]), key


@pytest.mark.parametrize("text", [b'{"a":', b'{"a":1,}', b"\xff\xfe{", b'{"a":"\xc3"}'])
def test_invalid_json_still_raises_what_json_loads_raises(text):
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        record.loads(text)


def test_a_damaged_body_is_still_a_damaged_record():
    line = record.encode(_body({"x": 1}))
    with pytest.raises(DamagedRecordError):
        record.decode(line.replace(b'"x":1', b'"x":2'))


@pytest.mark.parametrize(
    "data",
    [
        {"messages": [{"role": "user", "content": "héllo ✓ 😀"}]},
        {"n": 2**70, "x": 1.5e-7},
        {"nested": [[{"a": None, "b": True}]], "s": 'quote " and \\ and \n'},
    ],
)
def test_stdlib_codec_writes_records_that_decode_to_the_same_body(data):
    """`quill push` encodes with the stdlib (``fast=False``); the record must read back exactly
    as the msgspec-encoded one does."""
    body = _body(data)
    fast, plain = record.encode(body), record.encode(body, fast=False)
    assert record.decode(plain) == record.decode(fast) == body


def test_producer_batch_ids_are_version_4_uuids(tmp_path):
    import uuid

    from quill.spool import Spool

    with Spool(tmp_path / "spool", fast_codec=False) as spool:
        ids = {spool.append("session.create", {"session_id": f"s{i}"}).batch_id for i in range(50)}
    assert len(ids) == 50
    assert all(
        uuid.UUID(i).version == 4
        and uuid.UUID(i).variant == uuid.RFC_4122
        and str(uuid.UUID(i)) == i
        for i in ids
    )


def test_a_handle_used_on_both_sides_of_a_fork_never_repeats_a_batch_id(tmp_path):
    """Batch ids come from random bytes a handle draws ahead (``envelope.RandomIds``): a forked
    child holding the parent's handle must not take the bytes its parent takes next, or two
    records would share a batch id and the store would apply only one."""
    import os

    from quill.spool import Spool, SpoolReader
    from quill.spool.segments import START

    with Spool(tmp_path / "spool") as spool:
        spool.append("session.create", {"session_id": "before"})  # the parent draws ahead
        pid = os.fork()
        if pid == 0:
            try:
                for i in range(40):
                    spool.append("session.create", {"session_id": f"child{i}"})
            finally:
                os._exit(0)
        for i in range(40):
            spool.append("session.create", {"session_id": f"parent{i}"})
        assert os.waitpid(pid, 0)[1] == 0
    entries = list(SpoolReader(tmp_path / "spool").read(START, max_bytes=1 << 30))
    assert len(entries) == 81
    assert len({e.record["batch"] for e in entries}) == 81


# -- plain_json: the bodies whose msgspec round trip encode() does not re-check ------------------

_PLAIN = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(exclude_categories=("Cs",))),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=8), inner, max_size=5
        ),
    ),
    max_leaves=25,
)


def _has_wide_int(value) -> bool:
    if isinstance(value, dict):
        return any(map(_has_wide_int, value.values()))
    if isinstance(value, list):
        return any(map(_has_wide_int, value))
    return type(value) is int and not -(2**63) <= value < 2**64


@settings(max_examples=500, deadline=None)
@given(_PLAIN)
def test_a_plain_value_is_recognised_and_round_trips_through_msgspec_exactly(value):
    assert record.plain_json(value)
    assert record._msgspec()[1].decode(record._msgspec()[0].encode(value)) == value
    dumps, options = record._orjson()  # what encode() writes a plain body with
    try:
        written = dumps(value, option=options)
    except TypeError:  # orjson refuses an int past 64 bits; encode() goes on to msgspec
        assert _has_wide_int(value)
    else:
        assert record._msgspec()[1].decode(written) == value
    assert record.decode(record.encode(_body({"x": value})))["data"] == {"x": value}


class _Str(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        float("nan"),
        float("inf"),
        -float("inf"),
        {1: "int key"},
        {None: 1},
        {"ok": [1, {"deep": (1,)}]},
        _Str("s"),
        {"k": _Str("v")},
        [object()],
        [1, [2, [3, [float("nan")]]]],
        1j,
    ],
)
def test_anything_else_is_not_plain_and_keeps_the_round_trip_check(value):
    assert not record.plain_json(value)
