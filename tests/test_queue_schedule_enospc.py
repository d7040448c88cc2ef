"""A full disk under ``queue.db`` (huey) or ``schedule.db`` (APScheduler): the fleet stays up,
reports it boundedly, loses nothing, status and doctor say why, and everything resumes when
space returns. The disk is really full: a small tmpfs holds the one file (the data dir links
to it; SQLite follows the link, so its journal is on the full disk too) and is filled up (root
only; skipped where mounting is refused)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

from apscheduler.triggers.interval import IntervalTrigger
from conftest import QuillCLI, small_tmpfs
from harness import InProcessWriter, make_home
from test_bookkeeping_enospc import _events, _fill, _worker

from quill.home import RunDir, WriterStatus
from quill.jobs import schedule as schedule_db
from quill.jobs.queues import build_for
from quill.ops.status import health
from quill.ops.status.doctor import run_checks
from quill.workers import FIRE_REF
from quill.workers.schedules import edit_schedules

#: As documented (jobs.jobstore.REPORT_EVERY_S): an unwritable schedule is logged at most
#: every 5 s, with the count left out.
REPORT_EVERY_S = 5.0


def _tick(cfg, job: str = "quick_check") -> None:
    """Schedule ``job`` every second (id ``tick``), so runs fire while the disk is full."""
    with edit_schedules(cfg) as sched:
        sched.add_job(
            trigger=IntervalTrigger(seconds=1),
            id="tick",
            name=job,
            replace_existing=True,
            **schedule_db.fire_args(job, FIRE_REF),
        )


def _onto(path: Path, mnt: Path) -> None:
    """Move the file ``path`` onto the filesystem at ``mnt``; ``path`` becomes a link to it."""
    shutil.move(path, mnt / path.name)
    os.symlink(mnt / path.name, path)


def _until(check, timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None:
            assert proc.poll() is None, f"exited {proc.returncode}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _stop(proc) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def test_scheduler_fires_on_time_on_a_full_schedule_db_and_writes_it_back(tmp_path):
    """APScheduler writes a run's next time to schedule.db after firing it, on its own thread:
    the write used to raise out of that thread, so the process stayed up and never fired
    again, even once the disk had room."""
    cfg = make_home(tmp_path / "home")
    _tick(cfg)
    queue = build_for(cfg)
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        _onto(cfg.schedule_db, mnt)
        filler = _fill(mnt)
        proc = _worker(cfg.home, "scheduler")
        try:
            log = cfg.logs_dir / "scheduler.log"
            _until(lambda: _events(log, "scheduler.schedule_unwritable"), 90, "a report", proc)
            fired = queue.pending()["worker"]
            watched = 3 * REPORT_EVERY_S + 1
            time.sleep(watched)
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            # One run a second went on being queued: nothing skipped, nothing doubled.
            assert watched - 3 <= queue.pending()["worker"] - fired <= watched + 2
            reports = _events(log, "scheduler.schedule_unwritable")
            assert len(reports) <= watched / REPORT_EVERY_S + 2, reports
            assert sum(r["suppressed"] for r in reports) >= 5, reports
            assert all("full" in r["error"] for r in reports), reports
            status = RunDir(cfg.home).live("scheduler")
            assert status["schedule_held"] == ["tick"] and status["schedule_error"], status
            check = next(c for c in run_checks(cfg) if c["check"] == "schedule store")
            assert check["status"] == "warn" and "tick" in check["detail"], check
            human = QuillCLI(cfg.home).run("status", check=False).stdout
            assert "SCHEDULE UNWRITABLE" in human and "tick" in human, human
            filler.unlink()  # space returns: the held next run time is written
            space_back = time.time()
            _until(lambda: _events(log, "scheduler.schedule_writable_again"), 30, "the write", proc)
            _until(
                lambda: RunDir(cfg.home).live("scheduler")["schedule_held"] == [],
                10,
                "the status to clear",
                proc,
            )
            conn = sqlite3.connect(cfg.schedule_db)
            try:
                (next_run,) = conn.execute(
                    "SELECT next_run_time FROM apscheduler_jobs WHERE id = 'tick'"
                ).fetchone()
            finally:
                conn.close()
            assert next_run >= space_back - 2, (next_run, space_back)
            before = queue.pending()["worker"]
            time.sleep(3)
            assert queue.pending()["worker"] >= before + 2  # still firing
            assert proc.poll() is None
        finally:
            _stop(proc)


def test_a_full_queue_db_holds_runs_the_drain_goes_on_and_status_says_why(tmp_path):
    """Reads of queue.db still answer on a full disk, so status asking the queue itself used
    to call it reachable while the writer and the scheduler could put nothing in it."""
    w = InProcessWriter(tmp_path / "home")
    cfg = w.cfg
    proc = None
    try:
        _tick(cfg)
        queue = build_for(cfg)
        for _ in range(3):
            queue.enqueue("wal_checkpoint")  # store jobs the writer takes once it can
        with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
            _onto(cfg.queue_db, mnt)
            filler = _fill(mnt)
            proc = _worker(cfg.home, "scheduler")
            log = cfg.logs_dir / "scheduler.log"
            _until(lambda: _events(log, "scheduler.queue_unavailable"), 90, "the outage", proc)
            for i in range(20):  # the drain never waits for the queue
                w.say("s", f"during {i}")
                w.turn()
            w.until_idle()
            status = WriterStatus.from_json(w.status())
            assert status.queue_down_since is not None, w.status()
            assert queue.pending()["store"] == 3  # nothing taken, nothing lost
            time.sleep(3)
            sched = RunDir(cfg.home).live("scheduler")
            assert sched["unfired"] == ["quick_check"] and sched["queue_error"], sched
            doc = health.collect(cfg)
            assert doc["queue"]["unavailable_since"] is not None, doc["queue"]
            assert set(doc["queue"]["reported_by"]) >= {"scheduler"}, doc["queue"]
            check = next(c for c in run_checks(cfg) if c["check"] == "job queue")
            assert check["status"] == "warn" and "unreachable" in check["detail"], check
            human = QuillCLI(cfg.home).run("status", check=False).stdout
            assert "QUEUE UNREACHABLE" in human, human
            assert len(_events(log, "scheduler.queue_unavailable")) == 1
            assert len(w.events("writer.queue_unavailable")) == 1
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            filler.unlink()  # space returns
            _until(
                lambda: not RunDir(cfg.home).live("scheduler")["unfired"],
                30,
                "the held run to be queued",
                proc,
            )
            deadline = time.monotonic() + 30
            ran = []
            while len(ran) < 3 and time.monotonic() < deadline:
                w.turn(1.0)
                time.sleep(0.2)
                ran = [e for e in w.events("writer.job") if e["job"] == "wal_checkpoint"]
            assert len(ran) == 3, ran  # the writer took the jobs queued before, each once
            assert w.events("writer.queue_back")
            _until(
                lambda: health.collect(cfg)["queue"]["unavailable_since"] is None,
                30,
                "status to clear",
            )
            assert w.events("writer.chunk")
    finally:
        if proc is not None:
            _stop(proc)
        w.close()
