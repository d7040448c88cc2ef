"""The producer's reused encode buffer (``Spool._encode_buffer``, ``record.encode_into``):
records of any size in any order are written exactly as ``record.encode`` writes them, a
buffer a failed append left exported is replaced instead of failing the next append, and a
huge record's buffer is not kept by the handle."""

from __future__ import annotations

import os

import pytest

from quill.spool import Position, Spool, SpoolError, SpoolReader, record
from quill.spool.producer import _KEEP_BUFFER_BYTES


def _op(n: int, size: int) -> tuple[str, dict, str]:
    message = {"role": "user", "id": f"m{n}", "content": f"{n}:" + "é" * size}
    return "messages.append", {"session_id": "s", "messages": [message]}, f"b{n}"


def _lines(spool_dir) -> list[bytes]:
    return (spool_dir / "00000001.jsonl").read_bytes().splitlines(keepends=True)


def test_records_of_mixed_sizes_through_one_buffer_read_back_exactly(tmp_path):
    sizes = [50_000, 10, 3_000, 0, 70_000, 5, 20_000]
    with Spool(tmp_path, producer_id="p") as spool:
        for n, size in enumerate(sizes[:4]):
            spool.append(*_op(n, size)[:2], batch_id=_op(n, size)[2])
        spool.append_many([_op(n, size) for n, size in enumerate(sizes) if n >= 4])
    lines = _lines(tmp_path)
    assert len(lines) == len(sizes)
    for n, (size, line) in enumerate(zip(sizes, lines)):
        body = record.decode(line)
        assert body["batch"] == f"b{n}" and body["seq"] == n + 1
        assert body["data"] == _op(n, size)[1]
        assert line == record.encode({k: v for k, v in body.items()}), "same bytes as encode"
    entries = list(SpoolReader(tmp_path).read(Position(1, 0), max_bytes=1 << 24))
    assert [e.record["batch"] for e in entries] == [f"b{n}" for n in range(len(sizes))]


def test_encode_into_writes_at_its_offset_and_cuts_what_followed():
    body = {"v": 1, "op": "session.create", "batch": "b", "data": {"x": [1, 2.5, "é"]}}
    buf = bytearray(b"#" * 500)
    end = record.encode_into(buf, 3, body)
    assert bytes(buf[:3]) == b"###" and bytes(buf[3:]) == record.encode(body) and end == len(buf)
    # Not plain (a tuple): the stdlib path, written at the same place.
    odd = dict(body, data={"t": (1, 2)})
    end2 = record.encode_into(buf, end, odd)
    assert bytes(buf[end:end2]) == record.encode(odd)
    assert record.decode(bytes(buf[end:end2]))["data"] == {"t": [1, 2]}


def test_a_buffer_left_exported_by_a_failed_append_is_replaced(tmp_path):
    spool = Spool(tmp_path, producer_id="p")
    spool.append(*_op(0, 100)[:2])
    # A descriptor that cannot be written: the append fails inside ``os.write``, and the
    # exception's traceback keeps the frame holding the record's memoryview slice alive
    # (``append_many`` slices the buffer per record; ``append`` writes its released view).
    good = spool._fd
    spool._fd = os.open(tmp_path / "00000001.jsonl", os.O_RDONLY)
    with pytest.raises(SpoolError) as failed:
        spool.append_many([_op(1, 100)])
    kept = failed.value  # noqa: F841 - holds the traceback, so the buffer stays exported
    with pytest.raises(BufferError):
        spool._buf.append(0)
    os.close(spool._fd)
    spool._fd = good
    ack = spool.append(*_op(2, 100)[:2])
    spool.close()
    lines = _lines(tmp_path)
    assert len(lines) == 2 and ack.position.offset == len(lines[0])
    assert record.decode(lines[1])["data"] == _op(2, 100)[1]


def test_a_huge_records_buffer_is_not_kept(tmp_path):
    with Spool(tmp_path, max_record_bytes=8 << 20) as spool:
        spool.append(*_op(0, 100)[:2])
        small = spool._buf
        assert len(small) > 0, "a small record's buffer is kept for the next append"
        spool.append(*_op(1, _KEEP_BUFFER_BYTES)[:2])
        assert len(spool._buf) == 0
    assert record.decode(_lines(tmp_path)[1])["data"] == _op(1, _KEEP_BUFFER_BYTES)[1]


def test_the_record_crc_is_zlibs_crc32():
    """The CRC-32 the spool writes and checks (zlib-ng) has ``zlib.crc32``'s values, for any
    length and any start inside a buffer: lines written before the change still verify."""
    import zlib

    data = os.urandom(200_000)
    for start, stop in ((0, 0), (0, 1), (3, 17), (1, 4096), (5, 70_001), (0, 200_000)):
        assert record.crc32(memoryview(data)[start:stop]) == zlib.crc32(data[start:stop])
