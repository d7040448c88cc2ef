"""``store.apply.normalize.timestamp``'s shortcut for numbers already in epoch seconds gives
what its full rules give: a number is read exactly as its decimal text is (the text takes the
full path: units by magnitude, the 2000-01-01 floor, at most a day ahead), value and refusal
alike, around every bound."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from quill.store.apply.normalize import _MAX_FUTURE_S, _MIN_TS, timestamp
from quill.store.errors import InvalidOpError

NOW = 1_764_412_345.5
_BOUNDS = [_MIN_TS, NOW + _MAX_FUTURE_S, 1e11, 1e14, 1e17, 1e20, 0.0]


def _read(value):
    try:
        return ("ok", timestamp(value, NOW))
    except InvalidOpError as exc:
        return ("refused", exc.reason)


def _near_bounds():
    near = []
    for bound in _BOUNDS:
        for x in (bound, math.nextafter(bound, -math.inf), math.nextafter(bound, math.inf)):
            near += [x, -x]
    return near


@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=_MIN_TS - 10, max_value=NOW + _MAX_FUTURE_S + 10),
        st.integers(min_value=-(10**21), max_value=10**21),
        st.integers(min_value=int(_MIN_TS) - 10, max_value=int(NOW + _MAX_FUTURE_S) + 10),
        st.sampled_from(_near_bounds()),
    )
)
def test_a_number_reads_as_its_text_reads(value):
    assert _read(value) == _read(repr(value))


def test_the_shortcut_returns_a_float_of_the_same_value():
    assert timestamp(1_700_000_000, NOW) == 1_700_000_000.0
    assert type(timestamp(1_700_000_000, NOW)) is float
    assert _read(True)[0] == "refused"  # a bool is not a time, whatever its int value
