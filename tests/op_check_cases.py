"""The ops the writer refuses for their content alone, for every op kind (``BAD``: op kind →
(data, reason) pairs; ``CASES`` flattened), used by tests/test_op_checks.py.
"""

from __future__ import annotations

from quill.store.apply.checks import TITLE_MAX_CHARS

S = "s1"
_USER = {"role": "user", "content": "hi"}
_MSGS = [_USER]

#: For every op kind: (data, reason) pairs the writer refuses for their content alone.
BAD: dict[str, list[tuple[dict, str]]] = {
    "session.create": [
        ({"session_id": S, "model": 4}, "invalid-field"),
        ({"session_id": S, "parent_id": "p"}, "invalid-field"),
        ({"session_id": S, "parent_id": S, "parent_kind": "branch"}, "self-parent"),
        ({"session_id": S, "title": "t" * (TITLE_MAX_CHARS + 1)}, "title-too-long"),
        ({"session_id": " s"}, "invalid-session-id"),
        # PostgreSQL text cannot hold NUL: one rule for both backends (its writer crashed on them)
        ({"session_id": S, "source": "c\x00li"}, "invalid-field"),
        ({"session_id": S, "model": "m\x00"}, "invalid-field"),
        ({"session_id": S, "cwd": "/\x00"}, "invalid-field"),
        ({"session_id": S, "parent_id": "p\x00", "parent_kind": "branch"}, "invalid-field"),
        ({"session_id": S, "owner": {"host": "h\x00", "pid": 1}}, "invalid-field"),
        ({"session_id": S, "owner": {"host": 7, "pid": 1}}, "invalid-field"),  # was dropped
    ],
    "session.end": [
        ({"session_id": S, "reason": 7}, "invalid-field"),
        ({"session_id": S, "reason": "x" * 65}, "invalid-field"),
        ({"session_id": S, "reason": "bye\nnow"}, "invalid-field"),
        ({"session_id": S, "ended_at": "yesterday"}, "invalid-field"),
        ({"session_id": S, "ended_at": True}, "invalid-field"),
        ({"session_id": S, "ended_at": 10**400}, "invalid-field"),
        ({"session_id": S, "actor": ["job"]}, "invalid-field"),
        ({"session_id": S, "only_if": {"open": "yes"}}, "invalid-field"),
        ({"session_id": S, "only_if": {"colour": 1}}, "invalid-field"),
        ({"session_id": S, "only_if": []}, "invalid-field"),
        ({"session_id": 5}, "invalid-session-id"),
    ],
    "session.title": [
        ({"session_id": S}, "invalid-field"),
        ({"session_id": S, "title": 12}, "invalid-field"),
        ({"session_id": S, "title": {"text": "x"}}, "invalid-field"),
        ({"session_id": S, "title": "t" * (TITLE_MAX_CHARS + 1)}, "title-too-long"),
    ],
    "session.flags": [
        ({"session_id": S}, "invalid-field"),
        ({"session_id": S, "pinned": "true"}, "invalid-field"),
        ({"session_id": S, "archived": True, "hidden": 1}, "invalid-field"),
        ({"session_id": S, "hidden": None}, "invalid-field"),
    ],
    "session.read": [
        ({"session_id": S, "message_id": "1"}, "invalid-field"),
        ({"session_id": S, "message_id": 1.0}, "invalid-field"),
        ({"session_id": S, "message_id": 2**63}, "invalid-field"),
        ({"session_id": S, "message_id": False}, "invalid-field"),
    ],
    "messages.append": [
        ({"session_id": S, "messages": "hi"}, "invalid-field"),
        ({"session_id": S, "messages": [{"content": "no role"}]}, "invalid-role"),
        ({"session_id": S, "messages": ["hi"]}, "invalid-message"),
        ({"session_id": S, "messages": _MSGS, "source": 3}, "invalid-field"),
        # tool_calls that are neither empty nor calls: refused, never stored as "no calls"
        *(
            ({"session_id": S, "messages": [{**_USER, "tool_calls": calls}]}, "invalid-field")
            for calls in ("notalist", "not json {", [1, 2], 7, '"text"')
        ),
        # an unknown field given at the top level and in extra, differently: one would be lost
        (
            {"session_id": S, "messages": [{**_USER, "cwd": "/a", "extra": {"cwd": "/b"}}]},
            "invalid-field",
        ),
        (
            {"session_id": S, "messages": [{**_USER, "usage": {"input_tokens": -1}}]},
            "invalid-usage",
        ),
        (
            {"session_id": S, "messages": [{**_USER, "usage": {"input_tokens": 1}, "model": []}]},
            "invalid-field",
        ),
        (
            {"session_id": S, "messages": [{**_USER, "usage": {"input_tokens": 1}, "task": "a b"}]},
            "invalid-field",
        ),
        (
            {
                "session_id": S,
                "messages": [{**_USER, "extra": {"usage": {"input_tokens": 1}, "provider": []}}],
            },
            "invalid-field",
        ),
        ({"session_id": S, "messages": _MSGS, "source": "\x00"}, "invalid-field"),
        (
            {
                "session_id": S,
                "messages": [{**_USER, "usage": {"input_tokens": 1}, "provider": "p\x00"}],
            },
            "invalid-field",
        ),
    ],
    "messages.compact": [
        ({"session_id": S, "messages": []}, "invalid-field"),
        ({"session_id": S, "messages": {"role": "user"}}, "invalid-field"),
        ({"session_id": S, "messages": [{"role": "robot"}]}, "invalid-role"),
        ({"session_id": S, "messages": _MSGS, "tail_count": 2}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "tail_count": -1}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "tail_count": "1"}, "invalid-field"),
        (
            {"session_id": S, "messages": _MSGS, "watermark": 1, "watermark_ext_id": "m1"},
            "invalid-field",
        ),
        ({"session_id": S, "messages": _MSGS, "watermark": "1"}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "watermark_ext_id": 1.5}, "invalid-field"),
    ],
    "messages.rewind": [
        ({"session_id": S}, "invalid-field"),
        ({"session_id": S, "message_id": 1, "user_turn": 1}, "invalid-field"),
        ({"session_id": S, "message_id": 1, "ext_id": "m1"}, "invalid-field"),
        ({"session_id": S, "message_id": "1"}, "invalid-field"),
        ({"session_id": S, "ext_id": [1]}, "invalid-field"),
        ({"session_id": S, "user_turn": True}, "invalid-field"),
        ({"session_id": S, "user_turn": 0}, "no-such-turn"),
        ({"session_id": S, "user_turn": 1, "expect_head_id": "9"}, "invalid-field"),
        ({"session_id": S, "ext_ids": []}, "invalid-field"),
        ({"session_id": S, "ext_ids": "m1"}, "invalid-field"),
        ({"session_id": S, "ext_ids": [True]}, "invalid-field"),
        ({"session_id": S, "ext_ids": ["m1"], "user_turn": 1}, "invalid-field"),
        ({"session_id": S, "ext_ids": ["m1"], "expect_head_id": 1.5}, "invalid-field"),
        ({"session_id": S, "user_turn": 1, "expect_head_ext_id": [1]}, "invalid-field"),
        (
            {"session_id": S, "user_turn": 1, "expect_head_id": 1, "expect_head_ext_id": "m1"},
            "invalid-field",
        ),
    ],
    "messages.replace": [
        ({"session_id": S}, "invalid-field"),
        ({"session_id": S, "messages": [{"role": "user", "name": 3}]}, "invalid-field"),
        (
            {"session_id": S, "messages": _MSGS, "from_message_id": 1, "from_ext_id": "m1"},
            "invalid-field",
        ),
        ({"session_id": S, "messages": _MSGS, "from_message_id": "1"}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "expect_head_id": "1"}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "expect_head_ext_id": 1.5}, "invalid-field"),
        (
            {"session_id": S, "messages": _MSGS, "expect_head_id": 1, "expect_head_ext_id": "m"},
            "invalid-field",
        ),
        ({"session_id": S, "messages": _MSGS, "source": {}}, "invalid-field"),
        ({"session_id": S, "messages": _MSGS, "source": "s\x00"}, "invalid-field"),
        ({"session_id": S, "messages": [{**_USER, "usage": "lots"}]}, "invalid-usage"),
        (
            {
                "session_id": S,
                "messages": [{**_USER, "usage": {"input_tokens": 1}, "response_id": "r" * 513}],
            },
            "invalid-field",
        ),
    ],
    "messages.restore": [
        (
            {"session_id": "r1", "offset": -1, "rows": [{"message": _USER, "state": "live"}]},
            "invalid-field",
        ),
        (
            {"session_id": "r1", "offset": 0, "rows": [{"message": _USER, "state": "gone"}]},
            "invalid-field",
        ),
        (
            {
                "session_id": "r1",
                "offset": 0,
                "rows": [{"message": _USER, "state": "live", "origin": 0}],
            },
            "invalid-field",
        ),
        (
            {"session_id": "r1", "offset": 0, "rows": [{"message": {"role": 1}, "state": "live"}]},
            "invalid-role",
        ),
        (
            {
                "session_id": "r1",
                "offset": 0,
                "source": 1,
                "rows": [{"message": _USER, "state": "live"}],
            },
            "invalid-field",
        ),
        (
            {
                "session_id": "r1",
                "offset": 0,
                "started_at": "2024",
                "rows": [{"message": _USER, "state": "live"}],
            },
            "invalid-field",
        ),
        (
            {
                "session_id": "r1",
                "offset": 0,
                "source": "\x00",
                "rows": [{"message": _USER, "state": "live"}],
            },
            "invalid-field",
        ),
        # content first: this chunk is also out of order (s1 holds rows), the bad message wins
        (
            {"session_id": S, "offset": 0, "rows": [{"message": {"role": "x"}, "state": "live"}]},
            "invalid-role",
        ),
    ],
    "sessions.delete": [
        ({"session_ids": []}, "invalid-field"),
        ({"session_ids": [S], "reason": "a\nb"}, "invalid-field"),
        ({"session_ids": [S], "purge": "yes"}, "invalid-field"),
        ({"session_ids": [S], "only_if": {"empty": 1}}, "invalid-field"),
    ],
    "usage.record": [
        ({"session_id": S}, "invalid-usage"),
        ({"session_id": S, "usage": None}, "invalid-usage"),
        ({"session_id": S, "usage": {"input_tokens": 5, "cache_read_tokens": 9}}, "invalid-usage"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "model": {}}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "provider": ""}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "response_id": False}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "task": "not a task!"}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "task": "t" * 65}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "source": 1}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "message_ext_id": 7}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "model": "m\x00"}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "response_id": "r\x00"}, "invalid-field"),
        ({"session_id": S, "usage": {"input_tokens": 5}, "source": "s\x00"}, "invalid-field"),
        # the attributes are checked before the tokens, in precheck as in the writer
        ({"session_id": S, "usage": {"input_tokens": -5}, "model": [4]}, "invalid-field"),
    ],
    "usage.reprice": [
        ({"price_version": "", "rows": [[1, None, 0.1]]}, "invalid-field"),
        ({"price_version": "v", "rows": [[1, None, -1]]}, "invalid-field"),
        ({"price_version": "v", "rows": [[0, None, 1]]}, "invalid-field"),
        ({"price_version": "v\x00", "rows": [[1, None, 1]]}, "invalid-field"),
        ({"price_version": "v", "rows": [[1, "o\x00", 1]]}, "invalid-field"),
    ],
}
CASES = [(op, data, reason) for op in sorted(BAD) for data, reason in BAD[op]]
