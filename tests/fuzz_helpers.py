"""Shared by the fuzz tests (ops, importers, client): arbitrary JSON values, paths into a
document and one-field replacements, and the pattern of reasons that leak a Python error."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import strategies as st

#: Reasons only a refusal for the data's Python type would give (the bug class under test).
RAW_ERROR = re.compile(
    r"\b(TypeError|KeyError|AttributeError|ValueError|OverflowError|IndexError|"
    r"RecursionError|UnicodeEncodeError|ConstraintError|MismatchError|TooBigError|"
    r"RangeError)\b"
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indexes) into ``value``'s dicts and lists, deepest last."""
    out = []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return out
    for key, child in items:
        out.append(prefix + (key,))
        out.extend(paths(child, prefix + (key,)))
    return out


def replaced(data: Any, path: tuple, value: Any) -> Any:
    """A deep copy of ``data`` with the value at ``path`` replaced by ``value``."""
    out = copy.deepcopy(data)
    holder = out
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return out


_ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "x" * 70_000,
        "\x00",
        "\ud800",
        "é中🚀",
        "\u202e",
        "null",
        "{}",
        "[]",
        "1e999",
        "-1",
        "NaN",
        "2024-13-45T99:99:99",
        "user",
        "s1",
    ]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**30, -(10**30)])
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.5, -0.0, 1e300, -1e300, 5e-324])
    | _ODD_TEXT
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=8) | st.sampled_from(["type", "text", "role", "id"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
