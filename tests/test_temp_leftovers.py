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
