"""One content rule per op kind, in one place (``store.apply.checks.CHECKS``): what the writer
would quarantine for an op's content, a producer refuses before acknowledging, with the same
reason.

``BAD`` holds, for every op kind, fields the writer refuses whatever the store holds. Each
one is (a) refused by ``store.apply.precheck`` with its reason and (b) appended raw to a real spool
(as an old producer or a hand-written line would) and quarantined by the writer's drain with
the same reason, on SQLite and on PostgreSQL; the ``quill.Client`` raises
``InvalidInputError`` with that reason and the HTTP API answers 422 with it, appending
nothing. A new op kind fails ``test_every_op_kind_has_one_shared_check`` until it has a check
its applier runs and rows in ``BAD``.
"""

from __future__ import annotations

import inspect

import httpx
import pytest
from conftest import QuillCLI
from op_check_cases import _USER, BAD, CASES, S
from semantics_helpers import Store
from service_helpers import served

from quill import Client
from quill.ops.client.errors import InvalidInputError
from quill.spool.record import OP_KINDS
from quill.store.apply.checks import CHECKS
from quill.store.apply.precheck import precheck
from quill.store.apply.sessions import APPLIERS
from quill.store.errors import InvalidOpError

_SETUP = [
    ("session.create", {"session_id": S, "source": "cli"}),
    (
        "messages.append",
        {
            "session_id": S,
            "messages": [
                {"role": "user", "content": "one", "id": "m1"},
                {"role": "assistant", "content": "two", "id": "m2"},
            ],
        },
    ),
]


def test_every_op_kind_has_one_shared_check():
    """Every op kind has a check in ``CHECKS``, its applier calls that very function first
    thing, and ``BAD`` has rows for it."""
    assert set(CHECKS) == set(OP_KINDS)
    assert set(BAD) == set(OP_KINDS)
    for op, check in CHECKS.items():
        applier = inspect.unwrap(APPLIERS[op])
        body = inspect.getsource(applier).split('"""', 2)[2]  # the code after the docstring
        first = next(line.strip() for line in body.splitlines() if line.strip())
        assert f"{check.__name__}(data" in first, (op, check.__name__, first)


@pytest.mark.parametrize(
    "op, data, reason", CASES, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)]
)
def test_precheck_refuses_with_the_reason(op, data, reason):
    with pytest.raises(InvalidOpError) as refused:
        precheck(op, data)
    assert refused.value.reason == reason, refused.value


def test_the_writer_quarantines_each_with_the_same_reason(backend, tmp_path):
    """All of ``BAD`` appended raw to one real spool after a session with two messages, then
    one drain: every bad op is quarantined with the precheck's reason, the good ones apply."""
    store = Store(tmp_path, backend)
    try:
        for op, data in _SETUP:
            store.spool.append(op, data)
        expected = {}
        for op, data, reason in CASES:
            expected[str(store.spool.append(op, data).position)] = (op, data, reason)
        store.spool.append("messages.append", {"session_id": "after", "messages": [_USER]})
        store.drain()
        got = {pos: reason for reason, _, pos in store.last_rejects}
        wrong = [
            (op, data, want, got.get(pos))
            for pos, (op, data, want) in expected.items()
            if got.get(pos) != want
        ]
        assert not wrong, wrong
        assert store.last_result.applied == len(_SETUP) + 1
        with store.reader() as r:
            assert [m["content"] for m in r.get_messages(S, "audit")] == ["one", "two"]
            assert r.get_session(S)["title"] is None and r.get_session(S)["ended_at"] is None
    finally:
        store.close()


def test_a_producer_id_with_nul_names_the_message_as_stored(backend, tmp_path):
    """Message ids lose NULs when stored (``normalize.scrub``); lookups by producer id
    (rewind, compact and replace targets, ``usage.record``'s ``message_ext_id``) scrub the same
    way, so they find the message — and never send PostgreSQL a NUL, which its writer could
    not even quarantine (a psycopg ``DataError`` with no SQLSTATE: now ``BadDataError``)."""
    store = Store(tmp_path, backend)
    try:
        assert (
            store.apply(
                "messages.append",
                {
                    "session_id": "n",
                    "messages": [
                        {"role": "user", "content": "a", "id": "u\x001"},
                        {"role": "assistant", "content": "b", "id": "a\x001"},
                        {"role": "user", "content": "c", "id": "u\x002"},
                    ],
                },
            )
            == []
        )
        assert (
            store.apply(
                "usage.record",
                {
                    "session_id": "n",
                    "usage": {"input_tokens": 3},
                    "message_ext_id": "a\x001",
                    "response_id": "r1",
                },
            )
            == []
        )
        assert store.apply("messages.rewind", {"session_id": "n", "ext_id": "u\x002"}) == []
        assert store.apply("messages.rewind", {"session_id": "n", "ext_ids": ["a\x001"]}) == []
        assert [
            s
            for (s,) in store.conn.execute(
                "SELECT state FROM messages WHERE session_id = 'n' ORDER BY id"
            )
        ] == ["live", "rewound", "rewound"]
        assert store.conn.execute(
            "SELECT m.ext_id FROM usage u JOIN messages m ON m.id = u.message_id"
        ).fetchall() == [("a1",)]
    finally:
        store.close()


def test_a_value_psycopg_refuses_is_bad_data_not_a_store_failure():
    import psycopg

    from quill.store.contract import BadDataError
    from quill.store.postgres.errors import classify

    with pytest.raises(psycopg.DataError) as refused:  # psycopg's own refusal, before any server
        psycopg.adapt.Transformer().get_dumper("a\x00b", psycopg.adapt.PyFormat.TEXT).dump("a\x00b")
    assert refused.value.sqlstate is None and classify(refused.value) is BadDataError


def _spool_bytes(home) -> int:
    return sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl"))


def test_client_raises_invalid_input_with_the_reason_and_appends_nothing(tmp_path):
    client = Client(tmp_path)
    client.submit("session.create", {"session_id": S})
    before = _spool_bytes(tmp_path)
    for op, data, reason in CASES:
        with pytest.raises(InvalidInputError) as refused:
            client.submit(op, data)
        assert refused.value.reason == reason, (op, data, refused.value)
    # the typed methods too: arguments of the wrong type reach the same checks
    for call, reason in [
        (lambda: client.end(S, reason=7), "invalid-field"),
        (lambda: client.end(S, ended_at="now"), "invalid-field"),
        (lambda: client.title(S, "t" * 201), "title-too-long"),
        (lambda: client.title(S, 5), "invalid-field"),
        (lambda: client.flags(S, pinned="yes"), "invalid-field"),
        (lambda: client.mark_read(S, "3"), "invalid-field"),
        (lambda: client.rewind(S, user_turn=0), "no-such-turn"),
        (lambda: client.rewind(S, ext_id=["m1"]), "invalid-field"),
        (lambda: client.compact(S, [_USER], tail_count=3), "invalid-field"),
        (lambda: client.replace(S, [_USER], from_message_id="1"), "invalid-field"),
        (lambda: client.record_usage(S, {"input_tokens": 1}, task="a b"), "invalid-field"),
        (lambda: client.record_usage(S, {"input_tokens": 1}, model=["m"]), "invalid-field"),
    ]:
        with pytest.raises(InvalidInputError) as refused:
            call()
        assert refused.value.reason == reason, refused.value
    assert _spool_bytes(tmp_path) == before


def test_http_api_answers_422_with_the_reason_and_appends_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    quill = QuillCLI(home)
    with served(quill) as base:
        ok = httpx.post(
            f"{base}/api/v1/ops",
            json={"ops": [{"op": "session.create", "data": {"session_id": S}}]},
        )
        assert ok.status_code == 202, ok.text
        before = _spool_bytes(home)
        with httpx.Client(base_url=base, timeout=30) as http:
            for op, data, reason in CASES:
                # a good op first: a refused request appends nothing, not even its valid ops
                r = http.post(
                    "/api/v1/ops",
                    json={
                        "ops": [
                            {"op": "session.title", "data": {"session_id": S, "title": "x"}},
                            {"op": op, "data": data},
                        ]
                    },
                )
                assert r.status_code == 422, (op, data, r.status_code, r.text)
                err = r.json()["error"]
                assert err["reason"] == reason and err["op_index"] == 1, (op, data, err)
            r = http.post(
                f"/api/v1/sessions/{S}/messages",
                json={"messages": [{**_USER, "usage": {"input_tokens": -1}}]},
            )
            assert r.status_code == 422 and r.json()["error"]["reason"] == "invalid-usage", r.text
        assert _spool_bytes(home) == before
