"""Group commit in the producer: concurrent producers share one fdatasync; the
rendezvous file never lets a record be acknowledged on a sync that did not cover it.
Real processes, real spool directories."""

from __future__ import annotations

import os
import struct

from conftest import run_processes

from quill.spool import START, Spool, SpoolReader
from quill.spool.group_commit import SYNC_FILE
from quill.spool.segments import list_segments, segment_name

_SYNCED = struct.Struct(">QQQ")


def _synced(spool_dir) -> tuple[int, int, int]:
    return _SYNCED.unpack((spool_dir / SYNC_FILE).read_bytes()[: _SYNCED.size])


def _producer(spool_dir: str, n: int) -> None:
    with Spool(spool_dir, group_commit=True) as sp:
        for i in range(n):
            sp.append(
                "messages.append",
                {
                    "session_id": f"s{os.getpid()}",
                    "messages": [{"role": "user", "content": f"m{i} " + "x" * (i % 300)}],
                },
            )


def test_concurrent_producers_all_land_and_the_last_sync_covers_every_ack(tmp_path):
    spool = tmp_path / "spool"
    Spool(spool).close()
    run_processes(_producer, [(str(spool), 120) for _ in range(8)], timeout=120)
    entries = list(SpoolReader(spool).read(START, max_bytes=1 << 40))
    assert len(entries) == 8 * 120
    seg = list_segments(spool)[-1]
    path = spool / segment_name(seg)
    segment, inode, size = _synced(spool)
    # Every acknowledged record ends at or below a published synced size of its segment.
    assert (segment, inode, size) == (seg, os.stat(path).st_ino, path.stat().st_size)


def test_a_stale_rendezvous_for_a_recreated_segment_is_not_trusted(tmp_path):
    spool = tmp_path / "spool"
    with Spool(spool, group_commit=True) as sp:
        sp.append("session.end", {"session_id": "a"})
    seg = list_segments(spool)[-1]
    path = spool / segment_name(seg)
    # A segment deleted and created again under the same number (a wiped spool): the old
    # rendezvous claims far more than was ever synced in the new file.
    (spool / SYNC_FILE).write_bytes(_SYNCED.pack(seg, os.stat(path).st_ino + 1, 10**12))
    with Spool(spool, group_commit=True) as sp:
        ack = sp.append("session.end", {"session_id": "b"})
    segment, inode, size = _synced(spool)
    assert (segment, inode) == (ack.position.segment, os.stat(path).st_ino)
    assert size == path.stat().st_size  # it synced itself and published the real size


def test_by_default_every_append_syncs_itself(tmp_path):
    spool = tmp_path / "spool"
    with Spool(spool) as sp:
        sp.append("session.end", {"session_id": "a"})
    assert not (spool / SYNC_FILE).exists()
    assert len(list(SpoolReader(spool).read(START, max_bytes=1 << 40))) == 1
