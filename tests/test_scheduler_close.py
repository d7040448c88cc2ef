"""The scheduler's clean-up keeps the error that ended its run (a real APScheduler on a real
schedule.db)."""

from __future__ import annotations

from quill import home as data_dir
from quill.workers import scheduler, schedules


def test_closing_a_scheduler_whose_start_failed_raises_nothing(tmp_path):
    cfg = data_dir.load(tmp_path)
    cfg.ensure_dirs()
    sched = schedules.make_scheduler(cfg)
    scheduler.close(sched)  # never started: APScheduler's shutdown would raise here
    sched.start(paused=True)
    assert sched.running
    scheduler.close(sched)
    assert not sched.running
