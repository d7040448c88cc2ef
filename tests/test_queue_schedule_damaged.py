"""A damaged ``queue.db`` or ``schedule.db`` (pages overwritten: SQLITE_CORRUPT) is reported,
never a traceback: status and doctor answer and say which file and what to do; the writer
drains without the queue and takes jobs again once the file is moved aside."""

from __future__ import annotations

import os
import time

from harness import InProcessWriter

from quill.home import WriterStatus
from quill.jobs.queues import build_for
from quill.ops.status import health
from quill.ops.status.doctor import run_checks
from quill.workers.schedules import edit_schedules


def _damage(path) -> None:
    """Overwrite the start of every page after the first: the schema stays readable, the
    tables are not."""
    data = bytearray(path.read_bytes())
    for off in range(4096, len(data), 4096):
        data[off : off + 64] = os.urandom(64)
    path.write_bytes(bytes(data))


def test_a_damaged_queue_db_is_reported_and_the_drain_goes_on(tmp_path):
    w = InProcessWriter(tmp_path / "home")
    try:
        queue = build_for(w.cfg)
        queue.enqueue("wal_checkpoint")
        _damage(w.cfg.queue_db)
        for i in range(5):
            w.say("s", f"m{i}")
        w.until_idle()
        status = WriterStatus.from_json(w.status())
        assert status.queue_down_since is not None and "damaged" in status.queue_error
        doc = health.collect(w.cfg)
        assert doc["queue"]["unavailable_since"] is not None
        assert "damaged" in doc["queue"]["error"] and "move it aside" in doc["queue"]["error"]
        assert doc["store"]["messages"] == 5
        check = next(c for c in run_checks(w.cfg) if c["check"] == "job queue")
        assert check["status"] == "warn" and "damaged" in check["detail"], check
        os.rename(w.cfg.queue_db, w.cfg.queue_db.with_name("queue.db.damaged"))
        build_for(w.cfg).enqueue("wal_checkpoint")  # a new file
        for _ in range(100):
            w.turn(1.0)
            if w.events("writer.queue_back"):
                break
            time.sleep(0.2)
        assert w.events("writer.queue_back")
    finally:
        w.close()


def test_a_damaged_schedule_db_is_reported_by_status_and_doctor(tmp_path):
    w = InProcessWriter(tmp_path / "home")
    try:
        with edit_schedules(w.cfg):
            pass  # the default schedules, in schedule.db
        _damage(w.cfg.schedule_db)
        doc = health.collect(w.cfg)
        assert doc["schedule"]["readable"] is False
        assert "schedule.db" in doc["schedule"]["error"], doc["schedule"]
        check = next(c for c in run_checks(w.cfg) if c["check"] == "schedule store")
        assert check["status"] == "fail" and "cannot be read" in check["detail"], check
    finally:
        w.close()
