"""``quill recover`` with a snapshot damaged on disk since it was taken.

Found by the attack helper: with the only snapshot's pages flipped (or the file cut short)
and ``state.db`` lost, ``quill recover`` failed with a bare "database disk image is
malformed" (no hint, no file named), left a 14 MB ``state.db.recovering-*`` copy behind at
every try, and status kept naming ``quill recover`` as the next step: a loop, although the
spool still held every record. A snapshot's name proves it was verified when taken, not that
it is sound now: recover checks each candidate, newest first, moves a damaged one to
``evidence/`` (nothing trusts it again), and rebuilds from the next sound one, or from the
spool alone when it holds the whole history; when it cannot, it says which snapshot was
damaged. A failed rebuild leaves no half-built copy.
"""

from __future__ import annotations

import json
from pathlib import Path

from quill.spool import Spool
from quill.spool.segments import list_segments, segment_name


def _append(home: Path, start: int, n: int, segment_bytes: int | None = None) -> None:
    kw = {"segment_bytes": segment_bytes} if segment_bytes else {}
    with Spool(home / "spool", **kw) as sp:
        for i in range(start, start + n):
            sp.append(
                "messages.append",
                {"session_id": "s", "messages": [{"role": "user", "content": f"message {i}"}]},
            )


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 4096):
        data[i] ^= 0x5A
    data[:100] = bytes(b ^ 0x5A for b in data[:100])  # the header too: unreadable at once
    path.write_bytes(bytes(data))


def _lose_store(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home / f"state.db{suffix}").unlink(missing_ok=True)


def _snapshots(home: Path) -> list[Path]:
    return sorted((home / "snapshots").glob("snapshot-*.db"))


def test_a_damaged_newest_snapshot_is_set_aside_and_an_older_one_used(quill, home):
    quill.run("status")
    _append(home, 0, 10)
    quill.drain()
    quill.run("snapshot")
    _append(home, 10, 10)
    quill.drain()
    quill.run("snapshot")
    older, newest = _snapshots(home)
    _append(home, 20, 5)  # after both snapshots: replayed from the spool
    quill.drain()
    _damage(newest)
    _lose_store(home)
    proc = quill.run("recover", "--json", check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["snapshot"] == str(older)
    assert len(report["damaged_snapshots"]) == 1 and newest.name in report["damaged_snapshots"][0]
    assert _snapshots(home) == [older]  # nothing trusts the damaged one any more
    assert list((home / "evidence").glob(f"snapshots-damaged-*/{newest.name}"))
    shown = quill.json("sessions", "show", "s")
    assert [m["content"] for m in shown["messages"]] == [f"message {i}" for i in range(25)]
    assert not list(home.glob("state.db.recovering-*"))


def test_the_only_snapshot_damaged_with_the_whole_history_in_the_spool(quill, home):
    quill.run("status")
    _append(home, 0, 12)
    quill.drain()
    quill.run("snapshot")
    (snap,) = _snapshots(home)
    _damage(snap)
    _lose_store(home)
    proc = quill.run("recover", check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "damaged snapshot" in proc.stderr and snap.name in proc.stderr, proc.stderr
    assert quill.json("sessions", "show", "s")["session"]["message_count"] == 12
    assert quill.run("status", check=False).returncode == 0


def test_a_damaged_snapshot_the_history_needs_is_named_and_nothing_is_left_behind(quill, home):
    quill.run("status")
    _append(home, 0, 30, segment_bytes=1024)
    quill.drain()
    quill.run("snapshot")
    (snap,) = _snapshots(home)
    first = list_segments(home / "spool")[0]
    (home / "spool" / segment_name(first)).unlink()  # collected: only the snapshot holds it
    _damage(snap)
    _lose_store(home)
    proc = quill.run("recover", check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert snap.name in proc.stderr and "damaged" in proc.stderr, proc.stderr
    assert not list(home.glob("state.db.recovering-*"))


def test_spool_gc_deletes_nothing_only_a_damaged_snapshot_covers(quill, home):
    """Spool GC deletes the segments the newest snapshot covers: with that snapshot damaged,
    the deleted records would live only in the live store. It checks the snapshot first,
    sets a damaged one aside and deletes nothing it alone covered."""
    from quill.jobs.worker_jobs import spool_gc

    quill.run("status")
    _append(home, 0, 30, segment_bytes=1024)
    quill.drain()
    quill.run("snapshot")
    (snap,) = _snapshots(home)
    _damage(snap)
    before = list_segments(home / "spool")
    args = (str(home / "spool"), str(home / "state.db"), str(home / "snapshots"))
    out = spool_gc(*args, retention_s=0)
    assert out["deleted"] == [] and list_segments(home / "spool") == before, out
    assert snap.name in out["damaged_snapshots"][0]
    assert _snapshots(home) == []
    quill.run("snapshot")  # a sound one: now the covered segments go
    out = spool_gc(*args, retention_s=0)
    assert out["deleted"] and "damaged_snapshots" not in out, out
