"""``quill.Client`` given an arbitrary JSON value for any one argument (property test): every
write and read either answers or raises a ``quill.ops.client.errors`` type — never a raw Python
exception (TypeError from a set lookup or an SQL binding, AttributeError from a string method).

``QUILL_FUZZ_N`` sets the examples per method (default 15).
"""

from __future__ import annotations

import os

import pytest
from fuzz_helpers import JSON_VALUES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from semantics_helpers import Store

from quill.ops.client.client import Client
from quill.ops.client.errors import QuillError

N = int(os.environ.get("QUILL_FUZZ_N", "15"))

_MSGS = [{"role": "user", "content": "hello"}]
#: method name -> valid keyword arguments (positional ones given by name too).
CALLS: dict[str, dict] = {
    "append": {"session_id": "s1", "messages": _MSGS, "source": "cli", "model": "m"},
    "create": {
        "session_id": "s1",
        "source": "cli",
        "model": "m",
        "title": "t",
        "cwd": "/r",
        "parent_id": "s0",
        "parent_kind": "branch",
        "started_at": 1717000000,
        "meta": {"a": 1},
        "key": "k",
    },
    "record_usage": {
        "session_id": "s1",
        "usage": {"input_tokens": 3, "output_tokens": 1},
        "task": "title",
        "model": "m",
        "provider": "p",
        "source": "cli",
        "response_id": "r",
        "ts": 1717000000,
    },
    "end": {"session_id": "s1", "reason": "ended", "ended_at": 1717000000},
    "compact": {"session_id": "s1", "messages": _MSGS, "tail_count": 0, "watermark": 1},
    "rewind": {"session_id": "s1", "user_turn": 1, "expect_head_id": 1},
    "replace": {"session_id": "s1", "messages": _MSGS, "from_message_id": 1, "expect_head_id": 1},
    "title": {"session_id": "s1", "title": "t"},
    "flags": {"session_id": "s1", "archived": True, "pinned": False, "hidden": False},
    "mark_read": {"session_id": "s1", "message_id": 1},
    "transcript": {"session_id": "s1", "view": "display", "latest": 2},
    "session": {"session_id": "s1"},
    "context": {"session_id": "s1"},
    "sessions": {
        "source": "cli",
        "limit": 5,
        "include_hidden": False,
        "title_contains": "t",
        "since": 0,
        "until": 4102444800,
        "archived": False,
        "pinned": False,
        "hidden": False,
        "chains": False,
        "after": None,
    },
    "sessions_page": {"limit": 5, "source": "cli", "after": None},
    "search": {
        "query": "hello",
        "limit": 5,
        "session_id": "s1",
        "role": "user",
        "source": "cli",
        "since": 0,
        "until": 4102444800,
        "substring": False,
        "audit": False,
        "context": True,
        "kinds": ["text"],
        "order": "newest",
        "after": None,
    },
    "resume": {"key": "k"},
    "orphans": {"window_s": 900},
    "usage": {
        "by": ["model"],
        "since": 0,
        "until": 4102444800,
        "session_id": "s1",
        "source": "cli",
        "model": "m",
        "task": "title",
    },
    "delete_sessions": {"session_ids": ["s1"], "reason": "r", "actor": "user:a"},
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A data dir holding one applied session ``s1`` (reads have a store to read)."""
    home = tmp_path_factory.mktemp("client-fuzz")
    q = Client(home)
    q.create("s1", source="cli", key="k")
    q.append(
        "s1",
        [{"role": "user", "content": "hello", "id": "u1"}, {"role": "assistant", "content": "hi"}],
    )
    store = Store(home)
    store.drain()
    assert store.last_rejects == []
    store.close()
    return q


@pytest.mark.parametrize("method", sorted(CALLS))
def test_one_bad_argument_gives_a_quill_error(client, method):
    valid = CALLS[method]

    @settings(
        max_examples=N,
        deadline=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(st.sampled_from(sorted(valid)), JSON_VALUES)
    def run(name, value):
        kwargs = {**valid, name: value}
        try:
            getattr(client, method)(**kwargs)
        except QuillError as exc:
            assert exc.message

    run()


@pytest.mark.parametrize("method", sorted(CALLS))
def test_valid_arguments_answer(client, method):
    getattr(client, method)(**CALLS[method])
