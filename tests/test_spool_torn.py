"""A producer killed mid-append leaves a torn, never-acknowledged write, not damage.

Real processes and real ``kill -9``: a producer appending large records is killed while its
``write()`` is under way (the segment's last byte is not ``\\n``), the next producer terminates
the fragment with a lone ``\\n`` (append protocol step 3). The line is quarantined with its bytes
as ``torn-write``; ``spool verify`` exits 0 and ``doctor`` does not warn for it. A bit flip in
an acknowledged record is still damage (exit 1). The byte-level rule is ``spool.torn``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, quill_env

from quill.spool import TORN_WRITE, Quarantine, Spool, SpoolReader
from quill.spool.record import encode
from quill.spool.segments import START, list_segments, segment_name
from quill.spool.torn import is_record_prefix
from quill.store import Reader

#: A producer that appends large records for ever and logs each batch id once acknowledged.
_PRODUCER = r"""
import sys
from quill.spool import Spool
home, acks, tag, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with Spool(home) as sp, open(acks, "a", encoding="utf-8") as out:
    n = 0
    while True:
        mid = f"{tag}-{n}"
        ack = sp.append("messages.append", {"session_id": "big", "messages": [
            {"role": "user", "id": mid, "content": mid + " " + "x" * size}]})
        out.write(ack.batch_id + " " + mid + "\n")
        out.flush()
        n += 1
"""
RECORD_BYTES = 16 << 20


def _last_byte(spool_dir: Path) -> tuple[int, int, bytes]:
    """(newest segment, its size, its last byte)."""
    seg = list_segments(spool_dir)[-1]
    with open(spool_dir / segment_name(seg), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return seg, size, os.pread(f.fileno(), 1, size - 1) if size else b""


def _acked(acks: Path, producer: str) -> int:
    """How many records the producer tagged ``producer`` has logged as acknowledged."""
    if not acks.exists():
        return 0
    return sum(
        1 for line in acks.read_text().splitlines() if line.split()[1].startswith(f"{producer}-")
    )


def _kill_mid_append(home: Path, acks: Path, tag: str) -> None:
    """Run a producer until it has one acknowledged record, then SIGKILL it while its next
    record is half written. Retries (a new producer) until a kill lands mid-write."""
    spool_dir = home / "spool"
    for attempt in range(20):
        producer = f"{tag}{attempt}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _PRODUCER, str(home), str(acks), producer, str(RECORD_BYTES)],
            env=quill_env(home),
            cwd=REPO,
        )
        try:
            deadline = time.monotonic() + 120
            while not _acked(acks, producer):
                assert proc.poll() is None and time.monotonic() < deadline, (
                    "producer made no progress"
                )
                time.sleep(0.01)
            while True:  # wait for a write in progress: the segment does not end in "\n"
                assert proc.poll() is None and time.monotonic() < deadline, (
                    "no write in progress seen"
                )
                _, size, last = _last_byte(spool_dir)
                if size and last != b"\n":
                    os.kill(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.0005)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        if _last_byte(spool_dir)[2] != b"\n":
            return  # torn: the write was cut
    pytest.fail("no kill landed mid-write in 20 tries")


def test_producer_killed_mid_append_of_large_records_is_a_torn_write_not_damage(
    quill, home, tmp_path
):
    quill.run("push", "--session", "before", input='{"role": "user", "content": "before"}')
    acks = tmp_path / "acks"
    _kill_mid_append(home, acks, "a")
    _kill_mid_append(home, acks, "b")  # its first write repairs a's torn tail with a lone "\n"
    quill.run("push", "--session", "after", input='{"role": "user", "content": "after"}')

    replayed = quill.json("spool", "replay", check=False)  # the writer's drain, into the live store
    torn = [e for e in Quarantine(home / "spool").entries()]
    assert len(torn) == replayed["rejected"] >= 2
    assert {e["reason"] for e in torn} == {TORN_WRITE}
    for e in torn:  # bytes kept: a strict prefix of one of the producers' records
        assert e["raw_bytes"] > 0 and e["raw"].startswith('{"v":1,"op":"messages.append"')
    acked = [line.split() for line in acks.read_text().splitlines()]
    with Reader(home / "state.db") as r:
        ext_ids = {
            x for (x,) in r.conn.execute("SELECT ext_id FROM messages WHERE session_id = 'big'")
        }
        batches = {b for (b,) in r.conn.execute("SELECT batch_id FROM applied_batches")}
        assert {s["id"] for s in r.list_sessions()} >= {"before", "after", "big"}
    assert {b for b, _ in acked} <= batches and {
        m for _, m in acked
    } <= ext_ids  # every ack applied

    verify = quill.run("spool", "verify")  # exit 0: torn writes are not damage
    assert "0 damaged" in verify.stdout and "every other record is intact" in verify.stdout
    report = quill.json("spool", "verify")
    assert report["damaged"] == [] and len(report["torn_writes"]) == len(torn)
    doctor = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert doctor["quarantine"]["status"] == "ok", doctor["quarantine"]
    assert doctor["spool integrity"]["status"] == "ok", doctor["spool integrity"]
    assert "every other record is intact" in doctor["spool integrity"]["detail"]
    status = quill.json("spool", "status")
    assert (status["quarantined"], status["torn_writes"]) == (len(torn), len(torn))

    # A bit flip inside an acknowledged record is still damage: verify exits 1.
    seg = home / "spool" / segment_name(1)
    data = bytearray(seg.read_bytes())
    data[data.index(b'"content":"before"') + 12] ^= 0x01
    seg.write_bytes(bytes(data))
    proc = quill.run("spool", "verify", check=False)
    assert proc.returncode == 1 and "1:0: checksum" in proc.stdout


def _line(session: str, pad: int = 300) -> bytes:
    return encode(
        {
            "v": 1,
            "op": "session.create",
            "batch": session,
            "producer": "h:1:x",
            "seq": 1,
            "ts": 1.0,
            "data": {"session_id": session, "pad": "y" * pad},
        }
    )


def test_every_cut_of_a_record_is_a_torn_write_and_no_bit_flip_is(tmp_path):
    """The byte rule on every prefix and every single-bit flip of one record."""
    line = _line("s", pad=40)
    crc_at = line.index(b',"crc"')
    for i in range(len(b'{"v":1,"op":"'), crc_at + 1):
        assert is_record_prefix(line[:i]), line[:i]
    for i in range(crc_at + 2, len(line)):
        assert not is_record_prefix(line[:i]), line[:i]  # reaches the crc member: not proven torn
    for i in range(len(line) - 1):
        for bit in range(8):
            flipped = bytearray(line[:-1])
            flipped[i] ^= 1 << bit
            assert not is_record_prefix(bytes(flipped).split(b"\n")[0]), (i, bit)


def test_a_newline_flipped_into_an_acknowledged_record_stays_damage(tmp_path):
    """A bit flip that turns a byte into "\\n" splits a record: its head looks like a torn
    prefix, but what follows is the record's rest, not a repair: both lines are damage."""
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "a", "pad": "*" * 100})
        sp.append("session.create", {"session_id": "b"})
    seg = tmp_path / segment_name(1)
    data = bytearray(seg.read_bytes())
    data[data.index(b"*")] = ord("\n")  # 0x2a -> 0x0a: one bit
    seg.write_bytes(bytes(data))
    reasons = [e.damage.reason if e.damage else "ok" for e in SpoolReader(tmp_path).read(START)]
    assert reasons == ["checksum", "checksum", "ok"]


def test_a_fragment_that_is_no_record_prefix_stays_damage(tmp_path):
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "a"})
    with open(tmp_path / segment_name(1), "ab") as f:
        f.write(b'{"v":1,"op":"session.create","batch":"x","data":{}}garbage')
    with Spool(tmp_path) as sp:
        sp.append("session.create", {"session_id": "b"})
    reasons = [e.damage.reason if e.damage else "ok" for e in SpoolReader(tmp_path).read(START)]
    assert reasons == ["ok", "checksum", "ok"]
