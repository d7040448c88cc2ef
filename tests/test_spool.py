"""The spool on real files and real processes: order, checksums, torn tails, rotation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_processes, spool_producer

from quill.spool import START, InvalidOpError, Position, Quarantine, Spool, SpoolReader
from quill.spool.record import decode, encode


def _records(spool_dir: Path) -> list:
    return list(SpoolReader(spool_dir).read(START, max_bytes=1 << 40))


def test_append_returns_positions_in_read_order(tmp_path):
    with Spool(tmp_path) as sp:
        acks = [
            sp.append(
                "messages.append",
                {"session_id": "s", "messages": [{"role": "user", "content": str(i)}]},
            )
            for i in range(50)
        ]
    entries = _records(tmp_path)
    assert [e.position for e in entries] == [a.position for a in acks]
    assert [e.record["data"]["messages"][0]["content"] for e in entries] == [
        str(i) for i in range(50)
    ]
    assert [e.record["seq"] for e in entries] == list(range(1, 51))


def test_unknown_op_and_non_object_data_are_refused(tmp_path):
    sp = Spool(tmp_path)
    with pytest.raises(InvalidOpError):
        sp.append("messages.delete", {})
    with pytest.raises(InvalidOpError):
        sp.append("messages.append", ["not", "a", "dict"])
    assert _records(tmp_path) == []


def test_checksum_detects_a_flipped_byte():
    line = encode({"v": 1, "op": "session.end", "batch": "b", "data": {"session_id": "abc"}})
    assert decode(line)["data"] == {"session_id": "abc"}
    damaged = line.replace(b"abc", b"abd")
    with pytest.raises(Exception) as info:
        decode(damaged)
    assert info.value.reason == "checksum"


def test_damaged_line_in_the_middle_hides_nothing_after_it(tmp_path):
    with Spool(tmp_path) as sp:
        for i in range(3):
            sp.append("session.create", {"session_id": f"s{i}"})
    seg = tmp_path / "00000001.jsonl"
    lines = seg.read_bytes().splitlines(keepends=True)
    lines[1] = b"\x00" * (len(lines[1]) - 1) + b"\n"  # a zeroed block, as after a crash
    seg.write_bytes(b"".join(lines))
    entries = _records(tmp_path)
    assert [e.record["data"]["session_id"] if e.record else None for e in entries] == [
        "s0",
        None,
        "s2",
    ]
    assert entries[1].damage.reason == "nul-bytes"


def test_torn_tail_is_isolated_from_the_next_append(tmp_path):
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "before"})
    seg = tmp_path / "00000001.jsonl"
    with open(seg, "ab") as f:  # a producer killed mid-record: a prefix without its newline
        f.write(
            encode({"v": 1, "op": "session.create", "batch": "x", "data": {"session_id": "torn"}})[
                :30
            ]
        )
    reader = SpoolReader(tmp_path)
    assert [e.record["data"]["session_id"] for e in _records(tmp_path)] == [
        "before"
    ]  # tail not yet a record
    with Spool(tmp_path) as other:
        other.append("session.create", {"session_id": "after"})
    entries = _records(tmp_path)
    assert [e.record["data"]["session_id"] if e.record else "DAMAGED" for e in entries] == [
        "before",
        "DAMAGED",
        "after",
    ]
    assert reader.end() == entries[-1].next


def test_seal_torn_tail_when_no_producer_holds_the_segment(tmp_path):
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "a"})
    with open(tmp_path / "00000001.jsonl", "ab") as f:
        f.write(b'{"v":1,"op":"sess')
    reader = SpoolReader(tmp_path)
    assert reader.seal_torn_tail(1) is True
    assert reader.seal_torn_tail(1) is False  # already sealed
    entries = _records(tmp_path)
    assert entries[-1].record is None and entries[-1].damage.reason == "torn-write"


def test_a_torn_tail_in_a_full_segment_does_not_hide_the_next_segment(tmp_path):
    """Size-based rotation: a producer killed mid-write at the end of a full segment leaves a
    torn tail; the producer that rotates terminates it first (a sealed segment ends in a
    newline), so it is a proven ``torn-write`` and the reader reads on. A sealed segment that
    ends without a newline was cut short afterwards: the reader yields its tail as it stands
    as a damaged ``torn-tail`` and reads on; ``seal_torn_tail`` leaves a sealed segment alone
    (that would move its end past a cursor already there)."""
    with Spool(tmp_path, segment_bytes=200) as sp:
        sp.append("session.create", {"session_id": "before", "source": "cli", "pad": "x" * 150})
    with open(tmp_path / "00000001.jsonl", "ab") as f:
        f.write(b'{"v":1,"op":"sess')
    with Spool(tmp_path, segment_bytes=200) as sp:
        assert sp.append("session.create", {"session_id": "after"}).position.segment == 2
    size = (tmp_path / "00000001.jsonl").stat().st_size
    reader = SpoolReader(tmp_path)
    assert reader.seal_torn_tail(1) is False
    entries = _records(tmp_path)
    assert [e.record["data"]["session_id"] if e.record else e.damage.reason for e in entries] == [
        "before",
        "torn-write",
        "after",
    ]
    assert entries[1].next == Position(1, size) and entries[1].raw == b'{"v":1,"op":"sess\n'
    with open(tmp_path / "00000001.jsonl", "r+b") as f:  # cut short after it was sealed
        f.truncate(size - 1)
    entries = _records(tmp_path)
    assert [e.record["data"]["session_id"] if e.record else e.damage.reason for e in entries] == [
        "before",
        "torn-tail",
        "after",
    ]


def test_rotation_keeps_order_across_segments(tmp_path):
    with Spool(tmp_path, segment_bytes=1000) as sp:
        for i in range(40):
            sp.append("session.create", {"session_id": f"s{i:03d}", "meta": {"pad": "x" * 100}})
    segments = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert len(segments) > 5
    assert [e.record["data"]["session_id"] for e in _records(tmp_path)] == [
        f"s{i:03d}" for i in range(40)
    ]
    assert oct(os.stat(tmp_path / segments[0]).st_mode & 0o777) == "0o600"


def test_read_respects_the_byte_budget_and_resumes(tmp_path):
    with Spool(tmp_path) as sp:
        for i in range(20):
            sp.append("session.create", {"session_id": f"s{i}"})
    reader = SpoolReader(tmp_path)
    first = list(reader.read(START, max_bytes=500))
    assert 0 < len(first) < 20
    rest = list(reader.read(first[-1].next, max_bytes=1 << 30))
    assert len(first) + len(rest) == 20


def test_concurrent_producers_never_interleave(tmp_path):
    """8 processes × 150 batches, some of 100 KB: every line decodes, every batch present,
    each producer's order kept."""
    run_processes(spool_producer, [(str(tmp_path), p, 150, True) for p in range(8)], timeout=60)
    entries = _records(tmp_path)
    assert all(e.record is not None for e in entries), [e.damage for e in entries if e.damage]
    seen: dict[str, list[int]] = {}
    for e in entries:
        msg = e.record["data"]["messages"][0]
        producer, n = msg["id"].split("-")
        seen.setdefault(producer, []).append(int(n))
    assert {k: v for k, v in seen.items()} == {str(p): list(range(150)) for p in range(8)}


def test_quarantine_is_idempotent_per_position(tmp_path):
    q = Quarantine(tmp_path)
    q.put(Position(1, 10), "checksum", "crc mismatch", b"garbage\n")
    q.put(Position(1, 10), "checksum", "crc mismatch", b"garbage\n")
    q.put(Position(2, 0), "bad-json", "x", b"{\n")
    entries = list(q.entries())
    assert q.count() == 2 and [e["position"] for e in entries] == ["1:10", "2:0"]
    assert json.loads(json.dumps(entries[0]))["raw"] == "garbage\n"


def test_a_long_lived_handle_never_writes_into_a_collected_segment(tmp_path):
    """A purge seals segment 1 before it is full; a busy producer fills 2 and
    starts 3; spool GC collects 1 and 2. A handle still open on 1 saw no next segment and a
    size under the rotation limit, wrote into the unlinked file and acknowledged a record that
    nothing ever read. It must move to the newest segment instead."""
    from quill.spool import purge, retention

    spool_dir = tmp_path / "spool"
    agent = Spool(spool_dir, segment_bytes=4096)
    agent.append(
        "messages.append",
        {"session_id": "agent", "messages": [{"role": "user", "content": "first"}]},
    )
    assert purge.seal(spool_dir, 1)
    with Spool(spool_dir, segment_bytes=4096) as busy:
        while max(int(p.name.split(".")[0]) for p in spool_dir.glob("*.jsonl")) < 3:
            busy.append(
                "messages.append",
                {"session_id": "busy", "messages": [{"role": "user", "content": "x" * 900}]},
            )
    top = Position(3, 0)
    gone = retention.collect(spool_dir, top, top, retention_s=0)
    assert gone["deleted"] == [1, 2]
    ack = agent.append(
        "messages.append",
        {"session_id": "agent", "messages": [{"role": "user", "content": "second"}]},
    )
    assert ack.position.segment == 3
    read = [
        e.record["data"]["messages"][0]["content"]
        for e in SpoolReader(spool_dir).read(Position(3, 0))
        if e.record and e.record["data"]["session_id"] == "agent"
    ]
    assert read == ["second"]
    agent.close()
