"""Cases the op fuzz property (tests/test_op_fuzz_property.py) must cover, one example each.

Hand-picked payloads: ``store.apply.precheck.precheck`` and the writer refuse them with the
same op rule reason (``invalid-field``, ``invalid-role``), never a Python error such as the
OverflowError some of them once raised; a restore's message usage is ignored by both; the
exports read content parts and tool calls of any JSON type.
"""

from __future__ import annotations

import json

import pytest
from fuzz_helpers import RAW_ERROR
from semantics_helpers import Store

from quill.ops.transfer import export_render
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError


@pytest.mark.parametrize(
    "op, data, reason",
    [
        ("session.create", {"session_id": "s", "tools": {"a": 1}}, "invalid-field"),
        ("session.create", {"session_id": "s", "owner": [1]}, "invalid-field"),
        (
            "session.create",
            {"session_id": "s", "owner": {"pid": 2**63}},
            "invalid-field",
        ),  # was OverflowError
        ("session.create", {"session_id": "s", "meta": "x"}, "invalid-field"),
        (
            "messages.restore",
            {"session_id": "s", "offset": 0, "rows": [{"state": {}}]},
            "invalid-field",
        ),
        (
            "messages.restore",
            {"session_id": "s", "offset": 0, "rows": [{"state": "live", "message": {"role": 1}}]},
            "invalid-role",
        ),
        (
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": "x", "t": float("nan")}]},
            "invalid-field",
        ),
        (
            "sessions.delete",
            {"session_ids": ["s"], "only_if": {"inactive_before": float("inf")}},
            "invalid-field",
        ),
    ],
)
def test_precheck_refuses_what_the_writer_would_with_its_reason(op, data, reason, tmp_path):
    with pytest.raises(InvalidOpError) as refused:
        precheck(op, data)
    assert refused.value.reason == reason and not RAW_ERROR.search(refused.value.detail)
    text = json.dumps(data)
    if "NaN" in text or "Infinity" in text:
        return  # never reaches a writer: the spool refuses it too
    store = Store(tmp_path)  # the writer refuses it with the same reason
    try:
        assert store.apply(op, data) == [reason]
    finally:
        store.close()


def test_precheck_of_a_restore_ignores_message_usage_as_the_writer_does(tmp_path):
    data = {
        "session_id": "r",
        "offset": 0,
        "rows": [
            {
                "state": "live",
                "message": {"role": "assistant", "content": "x", "usage": {"input_tokens": -5}},
            }
        ],
    }
    precheck("messages.restore", data)
    store = Store(tmp_path)
    try:
        assert store.apply("messages.restore", data) == []
    finally:
        store.close()


def test_exports_read_parts_and_calls_of_any_json_type(tmp_path):
    store = Store(tmp_path)
    try:
        assert (
            store.apply(
                "messages.append",
                {
                    "session_id": "s",
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": None},
                                {"type": "text", "text": {"a": 1}},
                                7,
                                {"type": "text", "text": "kept"},
                            ],
                        },
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": "c", "function": None},
                                {"id": "d", "function": "ls"},
                            ],
                        },
                    ],
                },
            )
            == []
        )
        with store.reader() as r:
            md = export_render.markdown(r, "s")
            assert "kept" in md and "[text]" in md and "tool call · None" in md
            turns = export_render.sharegpt(r, "s")["conversations"]
            assert turns[0]["value"] == "kept"
            assert turns[1]["value"].count("<tool_call>") == 2
    finally:
        store.close()


@pytest.mark.parametrize(
    "op, data",
    [
        (
            "session.create",
            {"session_id": "s", "started_at": 10**400},
        ),  # was OverflowError in float()
        ("session.end", {"session_id": "s", "ended_at": -(10**400)}),
        (
            "session.read",
            {"session_id": "s", "message_id": 2**63},
        ),  # was OverflowError in the binding
        (
            "messages.restore",
            {
                "session_id": "s",
                "offset": 10**400,
                "rows": [{"state": "live", "message": {"role": "user"}}],
            },
        ),
        (
            "usage.reprice",
            {"price_version": "v", "rows": [[1, None, 10**400]]},
        ),  # precheck raised OverflowError
    ],
)
def test_numbers_no_column_can_hold_are_invalid_field_in_precheck_and_writer(op, data, tmp_path):
    """The writer applies what reaches the spool without a precheck too (older producers,
    hand-written spool lines): both answer ``invalid-field``, never an OverflowError."""
    try:
        precheck(op, data)
    except InvalidOpError as refused:
        assert refused.reason == "invalid-field", refused
    store = Store(tmp_path)
    try:
        assert store.apply(op, data) == ["invalid-field"], store.last_rejects
    finally:
        store.close()
