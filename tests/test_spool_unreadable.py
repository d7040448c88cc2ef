"""Records the writer cannot read must be refused before the ack or quarantined after it,
never crash it: data nested deeper than the readers' recursion allows, and
a checksummed line whose ``op`` is not a string. Real spool, real `quill` subprocesses."""

from __future__ import annotations

import json
import zlib

import pytest
from conftest import QuillCLI

from quill import Client
from quill.ops.client.errors import InvalidInputError
from quill.spool import Spool
from quill.spool.errors import DamagedRecordError, InvalidOpError
from quill.spool.record import MAX_NESTING, VERSION, decode, encode, nesting_ok


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_is_measured_without_recursion():
    assert nesting_ok(_nested(MAX_NESTING)) and not nesting_ok(_nested(MAX_NESTING + 1))
    assert nesting_ok({"a": [1, {"b": "x"}]}, 3) and not nesting_ok({"a": [1, {"b": []}]}, 3)
    assert not nesting_ok(_nested(100_000))  # no RecursionError at any depth


def _line(body: bytes) -> bytes:
    """A checksummed spool line around ``body`` (spool-format.md), written as any producer could."""
    return body[:-1] + b',"crc":"%08x"}\n' % (zlib.crc32(body) & 0xFFFFFFFF)


def _deep_line(depth: int, op: str = "messages.append") -> bytes:
    return _line(
        b'{"v":1,"op":"%s","batch":"b-deep","producer":"other","seq":1,"ts":1.0,'
        b'"data":{"session_id":'
        b'"deep","messages":[{"role":"user","content":"x","meta":%s%s}]}}'
        % (op.encode(), b"[" * depth, b"]" * depth)
    )


def test_decode_refuses_what_it_cannot_read_as_a_record():
    deep = _deep_line(5000)
    with pytest.raises(DamagedRecordError) as err:
        decode(deep)
    assert err.value.reason == "too-deep"
    listed = encode({"v": VERSION, "op": ["messages.append"], "batch": "b", "data": {}}, fast=False)
    with pytest.raises(DamagedRecordError) as err:
        decode(listed)
    assert err.value.reason == "shape"


def test_producers_refuse_and_the_writer_quarantines_instead_of_crash_looping(tmp_path):
    home = tmp_path / "home"
    quill = QuillCLI(home)
    q = Client(home)
    deep = [{"role": "user", "content": "x", "meta": _nested(985)}]
    with pytest.raises(InvalidInputError) as err:  # what was acked and then crash-looped the writer
        q.append("deep", deep)
    assert err.value.reason == "invalid-field"
    pushed = quill.run(
        "push", input=json.dumps({"op": ["messages.append"], "data": {}}) + "\n", check=False
    )
    assert (
        pushed.returncode == 2
        and "Traceback" not in pushed.stderr
        and "unknown-op" in pushed.stderr
    )
    # A producer that bypasses the checks (another language, a raw Spool): acked, then quarantined.
    with Spool(home / "spool") as sp:
        sp.append("session.create", {"session_id": "before"})
        with pytest.raises(
            InvalidOpError
        ):  # a list op: refused like any unknown op, not a TypeError
            sp.append(["messages.append"], {})
        with pytest.raises(
            InvalidOpError
        ):  # deeper than this stack can encode: refused, not a RecursionError
            sp.append(
                "messages.append",
                {"session_id": "deep", "messages": [{"role": "user", "meta": _nested(5000)}]},
            )
        with open(sp.dir / "00000001.jsonl", "ab") as fh:
            fh.write(_deep_line(985))
            fh.write(
                encode(
                    {
                        "v": VERSION,
                        "op": ["messages.append"],
                        "batch": "b-list",
                        "producer": "other",
                        "seq": 1,
                        "ts": 1.0,
                        "data": {},
                    },
                    fast=False,
                )
            )
        sp.append(
            "messages.append",
            {"session_id": "after", "messages": [{"role": "user", "content": "still here"}]},
        )
    ran = quill.run("run", "--until-idle", "--timeout", "120", check=False)
    assert ran.returncode == 1, ran.stderr[-2000:]  # records quarantined: exit 1, not "all well"
    status = quill.status()
    assert status["spool"]["quarantined"] == 2
    reasons = sorted(e["reason"] for e in quill.json("spool", "quarantine", "list")["entries"])
    assert reasons == ["shape", "too-deep"]
    assert [m["content"] for m in q.messages("after")] == ["still here"]
