"""A ``queue.db`` damaged under a running job worker (huey consumer) and then moved aside is
left behind by itself: the consumer reports the damage, stays up, opens the file the path now
names and takes jobs from it, without a restart. In-process, every queue handle does the same
(a file moved aside, deleted or replaced under an open connection)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from quill import home as data_dir
from quill.jobs.errors import QueueDamagedError
from quill.jobs.queues import build_for


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _status(home: Path) -> dict:
    try:
        return json.loads((home / "run" / "consumer.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _ruin(path: Path) -> None:
    """Overwrite every byte of ``path`` in place (the same inode an open connection holds)."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.write(os.urandom(size))


def test_a_queue_handle_follows_queue_db_moved_aside(tmp_path):
    cfg = data_dir.load(tmp_path / "home")
    cfg.ensure_dirs()
    queues = build_for(cfg)
    queues.enqueue("quick_check")
    assert queues.pending()["worker"] == 1
    _ruin(cfg.queue_db)
    try:
        queues.pending()
        raise AssertionError("a ruined queue.db answered")
    except QueueDamagedError:
        pass
    cfg.queue_db.rename(cfg.queue_db.with_name("queue.db.damaged"))
    assert queues.pending() == {"store": 0, "worker": 0}  # the new, empty file
    queues.enqueue("quick_check")
    assert build_for(cfg).pending()["worker"] == 1  # written where the path points
    cfg.queue_db.unlink()  # deleted under an open connection: nothing written to a ghost
    queues.enqueue("snapshot")
    assert build_for(cfg).pending()["worker"] == 1


def test_the_consumer_reopens_a_damaged_queue_db_moved_aside(tmp_path):
    cfg = data_dir.load(tmp_path / "home")
    cfg.ensure_dirs()
    build_for(cfg).pending()  # queue.db exists before the consumer opens it
    proc = subprocess.Popen(
        [sys.executable, "-m", "quill.ops.worker_main", "consumer", "--home", str(cfg.home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _until(lambda: "in_flight" in _status(cfg.home), 60, "the consumer's first status")
        _ruin(cfg.queue_db)
        _until(
            lambda: "damaged" in (_status(cfg.home).get("queue_error") or ""),
            60,
            "the consumer to report the damaged queue",
        )
        cfg.queue_db.rename(cfg.queue_db.with_name("queue.db.damaged"))
        build_for(cfg).enqueue("quick_check")  # on the new file
        _until(
            lambda: _status(cfg.home).get("last") == "quick_check",
            60,
            "the consumer to take the job from the new queue.db",
        )
        assert proc.poll() is None, proc.stderr.read().decode()
    finally:
        proc.terminate()
        proc.wait(30)
