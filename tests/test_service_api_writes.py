"""The HTTP API's write path against a real `quill serve` process, real spool and store:
appends acked after fsync and applied by a real fleet (then read back over the API, and
/metrics = `quill status --json`), precheck refusals with their reason codes, body and batch
size limits, bad JSON, and wrong-typed or non-standard JSON bodies refused with a 4xx and
nothing appended."""

from __future__ import annotations

import re

import httpx
import pytest
from service_api_helpers import MSG, _shaped, svc  # noqa: F401 (svc: a fixture, used by name)
from service_helpers import served

from quill.spool import Position
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError


def test_append_is_acked_durable_then_applied_by_the_fleet(quill, home):
    with served(quill) as base:
        r = httpx.post(
            f"{base}/api/v1/sessions/h1/messages",
            json={"messages": [MSG, {**MSG, "content": "two"}]},
        )
        assert r.status_code == 202, r.text
        ack = r.json()["acks"][0]
        pos = Position.parse(ack["position"])
        # The ack names a record that is already in the spool file at that offset.
        seg = sorted((home / "spool").glob("*.jsonl"))[pos.segment - 1]
        line = seg.read_bytes()[pos.offset :].split(b"\n", 1)[0]
        assert ack["batch"].encode() in line
        again = httpx.post(
            f"{base}/api/v1/ops",
            json={
                "ops": [
                    {
                        "op": "messages.append",
                        "data": {"session_id": "h1", "messages": [{**MSG, "content": "three"}]},
                        "batch": "retry-1",
                    }
                ]
                * 2
            },
        )
        assert (
            again.status_code == 202
            and [a["batch"] for a in again.json()["acks"]] == ["retry-1"] * 2
        )
        keyed = httpx.post(
            f"{base}/api/v1/ops",
            json={
                "ops": [
                    {"op": "session.create", "data": {"session_id": "k-1", "key": "chat-42"}},
                    {
                        "op": "messages.append",
                        "data": {"session_id": "k-1", "messages": [{**MSG, "content": "keyed"}]},
                    },
                ]
            },
        )
        assert keyed.status_code == 202
        assert quill.run("run", "--until-idle", "--timeout", "120").returncode == 0
        got = httpx.get(f"{base}/api/v1/sessions/h1/messages").json()
        assert [m["content"] for m in got["messages"]] == ["hello from http", "two", "three"]
        by_key = httpx.get(f"{base}/api/v1/resume", params={"key": "chat-42"}).json()
        assert by_key["session_id"] == "k-1" and [m["content"] for m in by_key["messages"]] == [
            "keyed"
        ]
        _shaped(httpx.get(f"{base}/api/v1/resume", params={"key": "nope"}), 404, "not-found")
        _shaped(httpx.get(f"{base}/api/v1/resume"), 422, "invalid-request")
        resumed = httpx.get(f"{base}/api/v1/sessions/h1/resume").json()
        assert [m["content"] for m in resumed["messages"]] == ["hello from http", "two", "three"]
        hits = httpx.get(f"{base}/api/v1/search", params={"q": "three"}).json()["hits"]
        assert [h["session_id"] for h in hits] == ["h1"]
        ranked = httpx.get(
            f"{base}/api/v1/search",
            params={"q": "two OR three", "order": "relevance", "kind": "text", "context": "true"},
        )
        assert ranked.status_code == 200, ranked.text
        assert sorted(h["snippet"] for h in ranked.json()["hits"]) == ["three", "two"]
        assert all("before" in h and "after" in h for h in ranked.json()["hits"])
        _shaped(httpx.get(f"{base}/api/v1/search", params={"q": "two", "order": "oldest"}), 422)
        _shaped(httpx.get(f"{base}/api/v1/search", params={"q": "two", "kind": "images"}), 422)
        _shaped(httpx.get(f"{base}/api/v1/sessions/nope"), 404, "not-found")
        text = httpx.get(f"{base}/metrics").text
    # /metrics exports exactly the figures of `quill status --json` (one function computes both).
    status = quill.status()["metrics"]
    values = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(quill_\w+(?:\{[^}]*\})?) (\S+)$", text, re.M)
    }
    assert values["quill_rows_applied_total"] == status["rows_applied_total"] == 4
    assert values["quill_ops_applied_total"] == status["ops_applied_total"] == 4
    assert values["quill_ops_duplicate_total"] == status["ops_duplicate_total"] == 1
    assert (
        values["quill_chunk_commit_seconds_count"] == status["chunk_commit_seconds"]["count"] >= 1
    )
    assert values["quill_spool_pending_bytes"] == status["spool_pending_bytes"] == 0
    assert values["quill_writer_halted"] == status["writer_halted"] == 0
    assert values["quill_disk_free_bytes"] > 0 and status["disk_free_bytes"] > 0
    assert (
        values['quill_worker_restarts_total{role="writer"}']
        == status["worker_restarts"]["writer"]
        == 0
    )
    for name in (
        "quill_fts_pending_rows",
        "quill_quarantined_records",
        "quill_spool_lag_seconds",
        "quill_jobs_overdue",
    ):
        assert values[name] == status[name.removeprefix("quill_")]


REFUSED = [
    ("messages.append", {"session_id": "x", "messages": [{"role": "wizard", "content": "hi"}]}),
    ("messages.append", {"session_id": "x", "messages": "not a list"}),
    ("messages.append", {"messages": [MSG]}),
    ("no.such.op", {"session_id": "x"}),
    (
        "session.create",
        {"session_id": "x", "started_at": 10**400},
    ),  # a REAL column holds up to ~1.8e308
]


def test_refused_ops_carry_the_precheck_reason_and_append_nothing(svc):
    base, home = svc["base"], svc["home"]
    good = {"op": "messages.append", "data": {"session_id": "ok", "messages": [MSG]}}
    for op, data in REFUSED:
        with pytest.raises(InvalidOpError) as expected:
            precheck(op, data)
        before = sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl"))
        r = httpx.post(f"{base}/api/v1/ops", json={"ops": [good, {"op": op, "data": data}]})
        err = _shaped(r, 422, expected.value.reason)
        assert err["op_index"] == 1
        assert sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl")) == before


def test_body_and_batch_limits_and_bad_json(svc):
    base, home = svc["base"], svc["home"]
    if True:
        big = {"messages": [{"role": "user", "content": "x" * 30000}]}
        _shaped(httpx.post(f"{base}/api/v1/sessions/s/messages", json=big), 413, "body-too-large")
        many = {"messages": [MSG] * 11}
        _shaped(httpx.post(f"{base}/api/v1/sessions/s/messages", json=many), 413, "batch-too-large")
        _shaped(
            httpx.post(
                f"{base}/api/v1/ops",
                content=b'{"ops": [',
                headers={"content-type": "application/json"},
            ),
            422,
            "invalid-json",
        )
        _shaped(httpx.post(f"{base}/api/v1/ops", json={"ops": []}), 422, "invalid-request")
        # Streamed without a Content-Length: the limit still holds.
        chunks = (b"x" * 5000 for _ in range(10))
        _shaped(
            httpx.post(
                f"{base}/api/v1/ops", content=chunks, headers={"content-type": "application/json"}
            ),
            413,
            "body-too-large",
        )
        assert (
            httpx.post(
                f"{base}/api/v1/sessions/s/messages", json={"messages": [MSG] * 10}
            ).status_code
            == 202
        )
    assert not list((home / "spool").glob("quarantine/*"))


#: Bodies whose nested fields have the wrong JSON type, or JSON's non-standard literals.
WRONG_TYPED = [
    {
        "ops": [
            {
                "op": "messages.append",
                "data": {"session_id": "w", "messages": [{"role": {"a": 1}, "content": "x"}]},
            }
        ]
    },
    {
        "ops": [
            {
                "op": "messages.append",
                "data": {
                    "session_id": "w",
                    "messages": [
                        {
                            "role": "assistant",
                            "content": [{"type": ["text"], "text": None}],
                            "usage": "lots",
                        }
                    ],
                },
            }
        ]
    },
    {
        "ops": [
            {"op": "usage.record", "data": {"session_id": "w", "usage": {"input_tokens": {"n": 1}}}}
        ]
    },
    {
        "ops": [
            {"op": "session.create", "data": {"session_id": "w", "tools": {"a": 1}, "owner": [1]}}
        ]
    },
    {"ops": [{"op": "sessions.delete", "data": {"session_ids": [{"x": 1}], "only_if": [1]}}]},
    {
        "ops": [
            {
                "op": "messages.restore",
                "data": {"session_id": "w", "offset": 0, "rows": [{"state": {}}]},
            }
        ]
    },
    {"ops": [{"op": "usage.reprice", "data": {"price_version": 1, "rows": [["x", {}, None]]}}]},
    {"ops": [{"op": "session.end", "data": {"session_id": ["w"]}}]},
]
#: Raw bodies: Python's JSON reader takes NaN/Infinity, which the spool cannot hold.
WRONG_RAW = [
    b'{"ops": [{"op": "messages.append", "data": {"session_id": "w", "messages": '
    b'[{"role": "user", "content": "x", "timestamp": NaN}]}}]}',
    b'{"ops": [{"op": "session.create", "data": {"session_id": "w", "meta": {"x": Infinity}}}]}',
    b'{"messages": [{"role": "user", "content": "x", "k": -Infinity}]}',
]


def test_wrong_typed_nested_fields_are_4xx_not_5xx(svc):
    base, home = svc["base"], svc["home"]
    before = sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl"))
    for body in WRONG_TYPED:
        r = httpx.post(f"{base}/api/v1/ops", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
        _shaped(r, 422)
    for raw in WRONG_RAW:
        route = "/api/v1/ops" if raw.startswith(b'{"ops"') else "/api/v1/sessions/w/messages"
        r = httpx.post(f"{base}{route}", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw, r.status_code, r.text)
        _shaped(r, 422)
    assert sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl")) == before
