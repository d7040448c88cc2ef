"""Temp files of snapshots and compactions name their writer by pid and the time they were
named; only a live process that had started by then keeps one (it may be a job running now).
A recycled pid (a live process that started later) or a dead one does not: real files, real
processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from quill.jobs.worker_jobs import remove_temp_leftovers


def test_a_temp_is_kept_only_for_the_live_process_that_named_it(tmp_path):
    me = os.getpid()
    started_ns = int(psutil.Process(me).create_time() * 1e9)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    names = {
        "running": f".snapshot-{me}-{time.time_ns()}.tmp",
        "running_wal": f".compact-{me}-{time.time_ns()}.tmp-wal",
        "recycled": f".snapshot-{me}-{started_ns - 3600 * 10**9}.tmp",
        "dead": f".snapshot-{dead.pid}-{time.time_ns()}.tmp",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"pages")
    removed, kept = remove_temp_leftovers(tmp_path)
    assert sorted(kept) == sorted([names["running"], names["running_wal"]])
    assert sorted(removed) == sorted([names["recycled"], names["dead"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def test_a_snapshot_removes_the_temps_of_killed_snapshots_and_keeps_a_running_one(tmp_path):
    """A snapshot job killed mid-copy (kill -9) leaves a store-sized temp that only a purge
    used to remove: every snapshot now removes those of processes that are gone."""
    from quill.jobs.worker_jobs import snapshot
    from quill.store import open_writer

    db = tmp_path / "state.db"
    open_writer(db).close()
    snaps = tmp_path / "snapshots"
    snaps.mkdir()
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    named = time.time_ns()
    killed.kill()  # SIGKILL
    killed.wait(10)
    dead = f".snapshot-{killed.pid}-{named}.tmp"
    running = f".compact-{os.getpid()}-{time.time_ns()}.tmp"
    for name in (dead, dead + "-wal", running):
        (snaps / name).write_bytes(b"pages")
    result = snapshot(str(db), str(snaps))
    assert sorted(result["removed_temps"]) == sorted([dead, dead + "-wal"])
    assert sorted(p.name for p in snaps.glob(".*")) == [running]
