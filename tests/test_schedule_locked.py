"""A *locked* (not damaged) ``schedule.db``: another process holds its lock past the busy
timeout (a ``sqlite3`` shell or a Python connection in ``BEGIN EXCLUSIVE``). The fleet's
scheduler stays up whether the lock is there when it starts or comes while it runs: it
waits with backoff, says so in its status (and status, doctor and ``/metrics`` say so), logs
it boundedly, and resumes firing by itself once the lock is released."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apscheduler.triggers.interval import IntervalTrigger
from test_bookkeeping_enospc import _events as events

from quill import home as data_dir
from quill.home import RunDir
from quill.jobs import schedule as schedule_db
from quill.jobs.queues import build_for
from quill.ops import logs
from quill.ops.service import metrics, views
from quill.ops.status import health
from quill.ops.status.doctor import run_checks
from quill.workers import FIRE_REF, scheduler
from quill.workers.schedules import edit_schedules

_PYTHON_HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@contextlib.contextmanager
def held_lock(path: Path, holder: str) -> Iterator[subprocess.Popen]:
    """Another process holds an exclusive lock on ``path`` until the block ends: the
    ``sqlite3`` shell in a transaction, or a Python connection in ``BEGIN EXCLUSIVE``."""
    if holder == "sqlite3-shell":
        argv = [shutil.which("sqlite3") or "sqlite3", str(path)]
    else:
        argv = [sys.executable, "-c", _PYTHON_HOLDER, str(path)]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        if holder == "sqlite3-shell":
            proc.stdin.write("BEGIN EXCLUSIVE;\nSELECT 'locked';\n")
            proc.stdin.flush()
        assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            # The shell ends (rolling its transaction back) at end of input; ours commits.
            proc.stdin.write("\n" if holder == "python" else "COMMIT;\n")
            proc.stdin.close()
            proc.wait(10)


HOLDERS = [
    pytest.param(
        "sqlite3-shell",
        marks=pytest.mark.skipif(not shutil.which("sqlite3"), reason="no sqlite3 shell here"),
    ),
    "python",
]


@pytest.fixture
def cfg(tmp_path):
    cfg = data_dir.load(tmp_path / "home")
    cfg.ensure_dirs()
    with edit_schedules(cfg) as sched:  # the defaults, plus a schedule that fires every second
        sched.add_job(
            trigger=IntervalTrigger(seconds=1),
            id="tick",
            name="quick_check",
            replace_existing=True,
            **schedule_db.fire_args("quick_check", FIRE_REF),
        )
    return cfg


def _wait(cond, timeout: float = 45.0):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@contextlib.contextmanager
def running_scheduler(cfg) -> Iterator[list[BaseException]]:
    """The fleet's scheduler (``scheduler.run``) on a thread; yields the errors that ended it
    (the old scheduler ended on a locked file; the fleet restarted it)."""
    log = logs.configure(cfg.logs_dir, "scheduler")
    stop, ended = threading.Event(), []

    def main() -> None:
        try:
            scheduler.run(cfg, log, stop)
        except BaseException as exc:
            ended.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        yield ended
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and not ended, ended


def _status(cfg) -> dict:
    return RunDir(cfg.home).last("scheduler") or {}


def _locked(cfg, ended) -> dict:
    st = _status(cfg)
    assert not ended, ended
    return st if st.get("schedule_locked") else {}


def _metric(text: str, name: str) -> float | None:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def _assert_reported_locked(cfg) -> None:
    """Status, doctor and /metrics say the schedule is locked and how long it has waited."""
    doc = health.collect(cfg)
    assert doc["schedule"]["state"] == "locked", doc["schedule"]
    assert doc["schedule"]["waiting_s"] > 0, doc["schedule"]
    check = next(c for c in run_checks(cfg) if c["check"] == "schedule store")
    assert check["status"] == "fail" and "locked" in check["detail"], check
    text = metrics.render(cfg).decode()
    assert _metric(text, 'quill_schedule_state{state="locked"}') == 1.0, text
    assert _metric(text, 'quill_schedule_state{state="ok"}') == 0.0, text
    assert _metric(text, "quill_scheduler_waiting_seconds") > 0, text


def _assert_reported_ok(cfg) -> None:
    doc = health.collect(cfg)
    assert doc["schedule"]["state"] == "ok" and doc["schedule"]["waiting_s"] == 0, doc
    text = metrics.render(cfg).decode()
    assert _metric(text, 'quill_schedule_state{state="ok"}') == 1.0, text
    assert _metric(text, "quill_scheduler_waiting_seconds") == 0.0, text


def _log(cfg, name: str) -> list[dict]:
    return events(cfg.logs_dir / "scheduler.log", name)


def _queued(cfg) -> int:
    return sum(build_for(cfg).pending().values())


@pytest.mark.parametrize("holder", HOLDERS)
def test_a_scheduler_started_on_a_locked_schedule_waits_and_resumes(cfg, holder, capsys):
    lock = held_lock(cfg.schedule_db, holder)
    lock.__enter__()  # held before the scheduler starts, released while it runs
    try:
        with running_scheduler(cfg) as ended:
            st = _wait(lambda: _locked(cfg, ended))
            assert st["ready"] is False and st["jobs"] == [] and st["schedule_unavailable_since"]
            assert "locked" in st["schedule_unavailable"] and st["schedule_retry_s"] >= 1
            _assert_reported_locked(cfg)
            from quill.ops.cli import cli
            from quill.ops.cli.base import run

            assert run(cli, ["--home", str(cfg.home), "status"]) == 0
            text = capsys.readouterr().out
            assert "SCHEDULE LOCKED" in text and "the scheduler has waited" in text, text
            assert "move schedule.db aside" not in text, text
            rows = views.jobs(cfg)  # the dashboard's /jobs and GET /api/v1/jobs
            assert rows and all(
                r["schedules"] is None and "locked" in r["schedule_error"] for r in rows
            ), rows
            assert not _log(cfg, "scheduler.started")  # fired nothing from memory
            assert 1 <= len(_log(cfg, "scheduler.schedule_unavailable")) <= 2  # bounded
            lock.__exit__(None, None, None)
            lock = None
            _wait(lambda: _log(cfg, "scheduler.started"))
            _wait(lambda: not ended and not _status(cfg).get("schedule_unavailable"))
            assert {j["id"] for j in _status(cfg)["jobs"]} >= {"tick", "quick_check", "snapshot"}
            assert _log(cfg, "scheduler.schedule_available_again")
            before = _queued(cfg)
            _wait(lambda: _queued(cfg) > before)  # firing
            _assert_reported_ok(cfg)
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


@pytest.mark.parametrize("holder", HOLDERS)
def test_a_running_scheduler_rides_out_a_lock_and_keeps_firing(cfg, holder):
    with running_scheduler(cfg) as ended:
        _wait(lambda: _status(cfg).get("jobs"))
        before = _queued(cfg)
        _wait(lambda: _queued(cfg) > before)  # the tick fires
        with held_lock(cfg.schedule_db, holder):
            st = _wait(lambda: _locked(cfg, ended))
            assert st["ready"] is False and st["schedule_unavailable_since"]
            # the schedules last read stay in the status: what would fire is still known
            assert {j["id"] for j in st["jobs"]} >= {"tick", "snapshot"}
            _assert_reported_locked(cfg)
            time.sleep(3.0)
            assert not ended
        released = time.time()
        _wait(lambda: not ended and not _status(cfg).get("schedule_unavailable"))
        assert len(_log(cfg, "scheduler.started")) == 1  # the same scheduler, not restarted
        assert _log(cfg, "scheduler.schedule_available_again")
        before = _queued(cfg)
        _wait(lambda: _queued(cfg) > before)  # its thread fires again after the lock

        # the status the scheduler publishes next (every second) shows the tick rescheduled
        # past the lock; one read right after the fire may still be the previous publication
        def _tick_after_lock():
            tick = next(j for j in _status(cfg)["jobs"] if j["id"] == "tick")
            return tick["next_run"] and _epoch(tick["next_run"]) > released

        _wait(_tick_after_lock)
        _assert_reported_ok(cfg)


def _epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def test_schedule_commands_say_the_file_is_locked(cfg, capsys):
    from quill.ops.cli import cli
    from quill.ops.cli.base import run

    with held_lock(cfg.schedule_db, "python"):
        for argv in (["schedule", "list"], ["schedule", "pause", "snapshot"]):
            code = run(cli, ["--home", str(cfg.home), *argv, "--json"])
            out = capsys.readouterr()
            assert code == 1 and "Traceback" not in out.err + out.out, (argv, out)
            error = json.loads(out.out)["error"]
            assert error["kind"] == "schedule_unreadable" and "locked" in error["message"]
            assert "lock" in error["hint"] and "move schedule.db aside" not in error["hint"]
