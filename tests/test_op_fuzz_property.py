"""Bad input gets a clear error and loses nothing else (property test, every op kind).

Each example starts from a valid payload of one op kind and replaces one field — a top-level
op field, a message field, a nested tool call, content part, extra or usage field — with an
arbitrary JSON value. Then:

* ``store.apply.precheck.precheck`` (what ``quill push`` runs before acknowledging) returns or
  raises ``InvalidOpError``, never another exception;
* appended to a real spool between two valid records and applied by the writer's routine on
  a real SQLite store, the record is applied or quarantined with an op rule's reason — never
  ``invalid-data`` carrying a Python exception name — and the valid records around it are
  applied;
* precheck and the writer agree (``store.apply.checks``): a record precheck refused is
  quarantined by the writer with the same reason, and one precheck accepted is quarantined
  only for a reason that needs the store's state (``STATE_REASONS``);
* the reads (model/display/audit messages, session listing, search, every export format)
  then still answer.

``QUILL_FUZZ_N`` sets the examples per op kind (default 25, a few seconds in all).

The one-example cases this property must cover are in tests/test_op_fuzz_cases.py.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from fuzz_helpers import JSON_VALUES, RAW_ERROR, paths, replaced
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from semantics_helpers import Store

from quill.ops.transfer import export, export_render
from quill.spool.record import OP_KINDS
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

N = int(os.environ.get("QUILL_FUZZ_N", "25"))

_CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
_USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "prompt_tokens_details": {"cached_tokens": 10},
    "completion_tokens_details": {"reasoning_tokens": 5},
}


def _messages(prefix: str) -> list[dict[str, Any]]:
    """A user turn, an assistant tool call with usage, its tool result, an assistant answer
    with parts and extras: every message field the normaliser reads."""
    return [
        {"role": "user", "content": "hello world", "id": f"{prefix}1", "timestamp": 1717000000},
        {
            "role": "assistant",
            "content": None,
            "id": f"{prefix}2",
            "tool_calls": [{**copy.deepcopy(_CALL), "id": f"c{prefix}"}],
            "usage": copy.deepcopy(_USAGE),
            "response_id": f"r-{prefix}",
            "model": "gpt-4o",
            "provider": "openai",
            "task": "turn",
            "reasoning": "think",
            "finish_reason": "tool_calls",
        },
        {
            "role": "tool",
            "tool_call_id": f"c{prefix}",
            "name": "bash",
            "content": [{"type": "text", "text": "a.txt"}],
            "id": f"{prefix}3",
        },
        {
            "role": "assistant",
            "id": f"{prefix}4",
            "timestamp": "2024-05-29T16:26:40Z",
            "content": [
                {"type": "text", "text": "done"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
            "extra": {"usage": {"input_tokens": 5, "output_tokens": 1}, "k": [1, {"a": "b"}]},
        },
    ]


#: One valid payload per op kind, with every field it reads (the target session ``s1`` is set
#: up first with ``_SETUP``).
VALID: dict[str, dict[str, Any]] = {
    "session.create": {
        "session_id": "s1",
        "source": "cli",
        "model": "gpt-4o",
        "title": "Fix login",
        "cwd": "/repo",
        "key": "telegram:chat:42",
        "parent_id": "s0",
        "parent_kind": "compression",
        "started_at": 1717000000,
        "meta": {"k": "v", "n": [1, 2]},
        "owner": {"pid": 123, "host": "h", "create_time": 1717000000.5},
        "system_prompt": "You are helpful.",
        "tools": [
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
        ],
    },
    "session.end": {
        "session_id": "s1",
        "reason": "user_exit",
        "ended_at": 1717000999,
        "actor": "user:alice",
        "only_if": {
            "open": True,
            "unpinned": True,
            "inactive_before": 4102444800,
            "owner_pid": 123,
            "owner_started": 1717000000.5,
        },
    },
    "session.title": {"session_id": "s1", "title": "A title"},
    "session.flags": {"session_id": "s1", "archived": True, "pinned": False, "hidden": False},
    "session.read": {"session_id": "s1", "message_id": 2},
    "messages.append": {"session_id": "s1", "source": "cli", "messages": _messages("n")},
    "messages.compact": {
        "session_id": "s1",
        "watermark_ext_id": "m4",
        "tail_count": 1,
        "messages": [
            {"role": "user", "content": "[summary] it went well"},
            {
                "role": "assistant",
                "id": "m4",
                "timestamp": "2024-05-29T16:26:40Z",
                "content": [
                    {"type": "text", "text": "done"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
                "extra": {"usage": {"input_tokens": 5, "output_tokens": 1}, "k": [1, {"a": "b"}]},
            },
        ],
    },
    "messages.rewind": {"session_id": "s1", "ext_id": "m1", "expect_head_id": 4},
    "messages.replace": {
        "session_id": "s1",
        "from_ext_id": "m4",
        "source": "cli",
        "messages": _messages("e"),
    },
    "sessions.delete": {
        "session_ids": ["s1", "s9"],
        "reason": "user_request",
        "actor": "user:alice",
        "only_if": {
            "ended_before": 4102444800,
            "inactive_before": 4102444800,
            "unpinned": True,
            "empty": False,
            "open": True,
            "owner_pid": 123,
            "owner_started": 1.5,
        },
        "purge": False,
    },
    "usage.record": {
        "session_id": "s1",
        "source": "telegram",
        "task": "title",
        "model": "gpt-4o-mini",
        "provider": "openai",
        "response_id": "chatcmpl-9x",
        "ts": 1717000123,
        "message_ext_id": "m2",
        "usage": {
            "input_tokens": 812,
            "output_tokens": 9,
            "cache_read_tokens": 100,
            "cache_write_tokens": 10,
            "reasoning_tokens": 2,
            "input_tokens_details": {"cached_tokens": 100},
            "cached_input_tokens": 100,
            "output_tokens_details": {"reasoning_tokens": 2},
            "reasoning_output_tokens": 2,
            "cache_creation_input_tokens": 10,
            "cache_read_input_tokens": 100,
        },
    },
    "messages.restore": {
        "session_id": "r1",
        "offset": 0,
        "source": "cli",
        "started_at": 1717000000,
        "rows": [
            {"message": _messages("x")[0], "state": "compacted", "origin": None},
            {"message": _messages("x")[0], "state": "live", "origin": 0},
            {"message": _messages("x")[3], "state": "rewound", "origin": None},
        ],
    },
    "usage.reprice": {
        "price_version": "genai-prices==0.0.40",
        "rows": [[1, None, 0.00425]],
        "actor": "user:alice",
    },
}
_SETUP = [
    ("session.create", {"session_id": "s1", "source": "cli", "model": "gpt-4o"}),
    ("messages.append", {"session_id": "s1", "messages": _messages("m")}),
]
#: Reasons that need the store's state (which precheck cannot see): the only ones the writer
#: may give for a record precheck accepted.
STATE_REASONS = frozenset(
    {
        "unknown-session",
        "unknown-message",
        "not-a-user-message",
        "not-live",
        "no-such-turn",
        "stale-head",
        "duplicate-title",
        "duplicate-tool-result",
        "tail-mismatch",
        "nothing-to-compact",
        "restore-out-of-order",
        "missing-blob",
    }
)


def test_every_op_kind_has_a_valid_payload():
    assert set(VALID) == set(OP_KINDS)


@st.composite
def mutations(draw, op: str) -> tuple[tuple, dict[str, Any]]:
    data = VALID[op]
    path = draw(st.sampled_from(paths(data)))
    return path, replaced(data, path, draw(JSON_VALUES))


def _at(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def check_precheck(op: str, data: Any) -> str | None:
    """None when precheck accepts ``data``, else its reason; fails the test on any error but
    ``InvalidOpError``."""
    try:
        precheck(op, data)
    except InvalidOpError as exc:
        assert exc.reason and not RAW_ERROR.search(f"{exc.reason} {exc.detail}"), (
            exc.reason,
            exc.detail,
        )
        return exc.reason
    return None


def check_reads(store: Store) -> None:
    with store.reader() as r:
        sids = [s["id"] for s in r.list_sessions(limit=100, include_hidden=True)]
        for sid in sids:
            for projection in ("model", "display", "audit"):
                r.get_messages(sid, projection)
            r.get_session(sid)
            r.context(sid)
            list(export.quill_ops(r, sid))
            export_render.markdown(r, sid)
            json.dumps(export_render.openai_chat(r, sid))
            json.dumps(export_render.sharegpt(r, sid))
        r.search("hello")
        r.search("done", session_id="s1")
        r.usage_totals(by=("session", "model", "task", "day"))
    store.index()
    with store.reader() as r:
        r.search("hello")


@pytest.mark.parametrize("op", sorted(OP_KINDS))
def test_one_bad_field_is_refused_alone_with_an_op_rule_reason(op, tmp_path_factory):
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
    @given(mutations(op))
    def run(mutation):
        path, data = mutation
        note(f"path={path!r} value={json.dumps(_at(data, path), default=repr)[:300]}")
        refused = check_precheck(op, data)
        store = Store(tmp_path_factory.mktemp("fuzz"))
        try:
            for setup_op, setup_data in _SETUP:
                store.spool.append(setup_op, setup_data)
            # What a producer without the precheck would append (an old client, a hand-written
            # line).
            store.spool.append(op, data)
            store.spool.append(
                "messages.append",
                {"session_id": "after", "messages": [{"role": "user", "content": "z"}]},
            )
            store.drain()
            for reason, detail, _ in store.last_rejects:
                assert reason != "invalid-data" or not RAW_ERROR.search(detail), (
                    path,
                    reason,
                    detail,
                )
                assert not RAW_ERROR.search(detail), (path, reason, detail)
            assert store.last_result.applied + store.last_result.rejected == 4
            assert store.last_result.rejected <= 1, store.last_rejects
            reasons = [reason for reason, _, _ in store.last_rejects]
            if refused is not None:
                assert reasons == [refused], (path, refused, store.last_rejects)
            else:
                assert set(reasons) <= STATE_REASONS, (path, store.last_rejects)
            with store.reader() as r:
                assert r.get_messages("after", "model")
                assert r.get_session("s1") is not None or op == "sessions.delete"
            check_reads(store)
        finally:
            store.close()

    run()


@pytest.mark.parametrize("op", sorted(OP_KINDS))
def test_every_valid_payload_applies(op, tmp_path):
    store = Store(tmp_path)
    try:
        for setup_op, setup_data in _SETUP:
            store.spool.append(setup_op, setup_data)
        precheck(op, VALID[op])
        store.spool.append(op, VALID[op])
        store.drain()
        assert store.last_rejects == [] and store.last_result.applied == 3
        check_reads(store)
    finally:
        store.close()
