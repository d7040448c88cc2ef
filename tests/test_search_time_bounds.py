"""A search's ``since``/``until`` must be finite epoch seconds within 64 bits, refused alike on
both backends (the HTTP API refuses them already; the Python API reaches the store). Before,
``until=nan`` found nothing on SQLite (NaN binds as NULL) and every message on PostgreSQL
(NaN sorts above every number), and ``until=2**70`` overflowed SQLite's binding only."""

from __future__ import annotations

import math

import pytest
from semantics_helpers import Store


@pytest.mark.parametrize("bound", [math.nan, math.inf, -math.inf, 2**70, -(2**70)])
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_non_finite_time_bound_is_refused_on_both_backends(tmp_path, backend, name, bound):
    store = Store(tmp_path, backend)
    msgs = [{"role": "user", "content": "alpha", "timestamp": "2026-01-01T00:00:00Z"}]
    store.apply("messages.append", {"session_id": "s", "messages": msgs})
    try:
        with store.reader() as r:
            assert len(r.search("alpha", **{name: 1e9 if name == "since" else 2e9})) == 1
            with pytest.raises(ValueError, match=f"search {name} must be finite"):
                r.search("alpha", **{name: bound})
    finally:
        store.backend.close()
