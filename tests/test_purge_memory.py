"""A purge's rewrite of a spool segment streams it: the memory it holds stays within a few
``COPY_BLOCK``s however large the segment is, and the result is the same line-for-line
tombstoning as before (every other byte unchanged, each target a tombstone of its batch)."""

from __future__ import annotations

import os
import tracemalloc

from quill.spool import record
from quill.spool.purge import COPY_BLOCK, is_tombstone, rewrite
from quill.spool.segments import segment_name

LINES = 3_000  # of about 8 KiB: a 24 MiB segment
TEXT = "x" * 8000


def _segment(spool_dir) -> tuple[list[int], list[bytes]]:
    """Segment 1 (sealed: segment 2 exists) of ``LINES`` records; returns the offsets and
    lines."""
    spool_dir.mkdir(parents=True)
    offsets, lines, offset = [], [], 0
    with open(spool_dir / segment_name(1), "wb") as f:
        for i in range(LINES):
            line = record.encode(
                {
                    "v": 1,
                    "op": "messages.append",
                    "batch": f"b{i}",
                    "producer": "p",
                    "seq": i,
                    "ts": 1.0,
                    "data": {"session_id": "s" if i % 2 else "t", "text": TEXT},
                }
            )
            f.write(line)
            offsets.append(offset)
            lines.append(line)
            offset += len(line)
    (spool_dir / segment_name(2)).touch()
    return offsets, lines


def test_a_segment_far_larger_than_the_bound_is_rewritten_in_bounded_memory(tmp_path):
    spool_dir = tmp_path / "spool"
    offsets, lines = _segment(spool_dir)
    size = (spool_dir / segment_name(1)).stat().st_size
    bound = 4 * COPY_BLOCK  # two blocks plus one line and its tombstone, with room to spare
    assert size > 5 * bound
    targets = {o for i, o in enumerate(offsets) if i % 2}
    targets |= {offsets[2] + 5, size + 10}  # not a line start; past the end: both skipped
    tracemalloc.start()
    try:
        result = rewrite(spool_dir, 1, targets, "del-1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["purged"] == LINES // 2
    assert sorted(result["skipped"]) == [offsets[2] + 5, size + 10]
    print(f"peak {peak} bytes for a {size}-byte segment")
    assert peak < bound, f"peak {peak} bytes for a {size}-byte segment"
    data = (spool_dir / segment_name(1)).read_bytes()
    assert len(data) == size
    for i, (o, line) in enumerate(zip(offsets, lines, strict=True)):
        now = data[o : o + len(line)]
        if i % 2 == 0:
            assert now == line
        else:
            rec = record.decode(now)
            assert is_tombstone(rec) and rec["batch"] == f"b{i}" and rec["seq"] == i
    assert not list(spool_dir.glob("*.purge-tmp"))
    assert os.stat(spool_dir / segment_name(1)).st_size == size
