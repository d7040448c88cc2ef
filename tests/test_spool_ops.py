"""Spool operations: retention rules, `quill spool status|verify|replay`, read-your-writes
timeout."""

from __future__ import annotations

import os
import time

import pytest

from quill import home as config
from quill.ops.client.wait import wait_applied
from quill.spool import Position, Spool, WaitTimeoutError
from quill.spool.retention import collect, collectable

DAY = 86400.0


def _segments(tmp_path, n=4):
    with Spool(tmp_path, segment_bytes=200) as sp:
        for i in range(n):
            sp.append("session.create", {"session_id": f"s{i}", "meta": {"pad": "x" * 200}})
    return sorted(tmp_path.glob("*.jsonl"))


def test_retention_needs_applied_and_snapshot_covered_and_old(tmp_path):
    segs = _segments(tmp_path)
    assert len(segs) == 4
    old = time.time() - 8 * DAY
    for p in segs:
        os.utime(p, (old, old))
    everything = Position(4, 10**9)
    # not applied / not snapshot-covered / too young: nothing goes
    assert collectable(tmp_path, None, everything) == []
    assert collectable(tmp_path, everything, None) == []
    assert collectable(tmp_path, everything, everything, retention_s=9 * DAY) == []
    # covered only up to the end of segment 2 by the snapshot
    size2 = segs[1].stat().st_size
    assert [s["segment"] for s in collectable(tmp_path, everything, Position(2, size2))] == [1, 2]
    assert [s["segment"] for s in collectable(tmp_path, everything, Position(2, size2 - 1))] == [1]
    # the newest segment is never deleted, whatever the positions say
    result = collect(tmp_path, everything, everything)
    assert result["deleted"] == [1, 2, 3] and sorted(p.name for p in tmp_path.glob("*.jsonl")) == [
        "00000004.jsonl"
    ]
    assert result["bytes_freed"] > 0


def test_spool_verify_exits_1_on_damage_and_names_the_position(quill, home):
    quill.run(
        "push",
        "--session",
        "v",
        input='{"role": "user", "content": "one"}\n{"role": "user", "content": "two"}',
    )
    quill.run("push", "--session", "v", input='{"role": "user", "content": "three"}')
    ok = quill.json("spool", "verify")
    assert ok["records"] == 2 and ok["damaged"] == []
    seg = home / "spool" / "00000001.jsonl"
    data = bytearray(seg.read_bytes())
    data[40] ^= 0x01
    seg.write_bytes(bytes(data))
    proc = quill.run("spool", "verify", check=False)
    assert proc.returncode == 1 and "1:0: checksum" in proc.stdout


def test_spool_replay_into_a_new_file_is_idempotent(quill, home, tmp_path):
    quill.run(
        "push",
        "--session",
        "r",
        input="\n".join(f'{{"role": "user", "content": "m{i}"}}' for i in range(30)),
    )
    target = tmp_path / "fresh.db"
    first = quill.json("spool", "replay", "--into", str(target))
    assert (first["applied"], first["rows"]) == (1, 30)
    again = quill.json("spool", "replay", "--into", str(target), "--from", "1:0")
    assert (again["applied"], again["duplicates"], again["rows"]) == (0, 1, 0)
    status = quill.json("spool", "status")
    assert (
        status["records_pending"] == 1 and status["cursor"] is None
    )  # the live store was not touched


def test_spool_replay_into_the_live_store_refuses_while_the_fleet_runs(quill, fleet, home):
    deadline = time.monotonic() + 30
    while not (home / "run" / "writer.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc = quill.run("spool", "replay", check=False)
    assert proc.returncode == 1 and "stop `quill run` first" in proc.stderr


def test_wait_applied_times_out_without_a_writer(tmp_path):
    with Spool(tmp_path / "spool") as sp:
        ack = sp.append("session.create", {"session_id": "s"})
    with pytest.raises(WaitTimeoutError) as info:
        wait_applied(config.load(tmp_path), ack.position, timeout=0.3)
    assert "quill run" in str(info.value)


def test_replay_never_applies_a_batch_that_was_refused(tmp_path):
    """A batch refused for its data is decided: replaying over a later state (or a snapshot
    that covers it) must not apply it now that it would fit."""
    from quill.ops.recover.replay import replay
    from quill.store import Reader

    spool_dir, db = tmp_path / "spool", tmp_path / "state.db"
    with Spool(spool_dir) as sp:
        sp.append("session.create", {"session_id": "a", "title": "Fix login"})
        sp.append("session.create", {"session_id": "b"})
        sp.append("session.title", {"session_id": "b", "title": "Fix login"})  # refused: taken
        sp.append("session.title", {"session_id": "a", "title": "Something else"})
    first = replay(spool_dir, db, None)
    assert (first["applied"], first["rejected"]) == (3, 1)
    again = replay(spool_dir, db, Position(1, 0))  # now "Fix login" is free again
    assert (again["applied"], again["rejected"], again["duplicates"]) == (0, 0, 4)
    with Reader(db) as r:
        assert r.get_session("b")["title"] is None


def test_a_wait_timeout_says_why_the_writer_has_not_applied_it(quill, home, fleet):
    """With the fleet up and another process holding state.db locked, the
    timeout asked "is `quill run` running?". It now passes on what the writer reports."""
    import apsw

    quill.run(
        "push", "--session", "w", "--wait", "30", input='{"role": "user", "content": "first"}\n'
    )
    blocker = apsw.Connection(str(home / "state.db"))
    blocker.set_busy_timeout(60_000)  # the fleet's writer or a job may hold the lock a moment
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        # the writer waits WRITER_BUSY_MS (5 s) on the lock before it reports the error
        proc = quill.run(
            "push",
            "--session",
            "w",
            "--wait",
            "9",
            input='{"role": "user", "content": "x"}\n',
            check=False,
        )
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert proc.returncode == 4, proc.stderr
    assert "retrying after an error" in proc.stderr and "locked" in proc.stderr, proc.stderr
    assert "is `quill run` running" not in proc.stderr
