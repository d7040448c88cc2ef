"""CLI commands that touch ``queue.db`` while another process holds its lock past the busy
timeout (a busy fleet, or a ``sqlite3`` shell left in a transaction). Opening the queues
touches no file (``jobs.queues._Reopening``), so a lock never stops ``quill snapshot`` or
``quill doctor --check`` from doing their work; what needs the queue (a job run's records,
``quill jobs run``'s enqueue) is tried again with ``QueueOutage``'s backoff within a bound
(``jobs.outage.persist``), and a command that gives up says so: a warning naming the lock for a
snapshot taken but not in history, the one error format (with a note on how long it tried and
a hint naming the lock) for a job not queued. The lock is real: a second process in
``BEGIN EXCLUSIVE`` on ``queue.db``; the production writer applies the records."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest
from harness import InProcessWriter
from test_schedule_locked import held_lock

from quill.jobs import outage
from quill.jobs import queues as job_queues
from quill.jobs.queues import build_for
from quill.ops.cli.base import run
from quill.ops.cli.root import cli
from quill.store.sqlite.connection import open_reader


@pytest.fixture
def w(tmp_path, monkeypatch):
    # Each try waits 0.2 s for the lock instead of 10 s, and the CLI tries for 2 s, not 30 s.
    monkeypatch.setattr(job_queues, "QUEUE_BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(outage, "LOCK_WAIT_S", 2.0, raising=False)
    h = InProcessWriter(tmp_path / "home")
    h.append("session.create", {"session_id": "s1", "source": "cli"})
    h.until_idle()
    build_for(h.cfg).pending()  # queue.db exists, with its tables, before it is locked
    monkeypatch.setenv("QUILL_HOME", str(h.cfg.home))
    yield h
    h.close()


def _runs(w) -> list[tuple]:
    while w.writer.jobs.run_one(w.writer.store, idle=True):  # the store queue's records
        pass
    conn = open_reader(w.cfg.state_db)
    try:
        return conn.execute("SELECT job, outcome FROM job_runs ORDER BY started_at").fetchall()
    finally:
        conn.close()


def _snapshots(w) -> list[str]:
    return sorted(p.name for p in w.cfg.snapshots_dir.glob("snapshot-*.db"))


@contextlib.contextmanager
def _lock_released_after(w, seconds: float):
    """``queue.db`` locked by another process, released ``seconds`` into the block."""
    locks = contextlib.ExitStack()
    locks.enter_context(held_lock(w.cfg.queue_db, "python"))
    timer = threading.Timer(seconds, locks.close)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        locks.close()


def test_a_snapshot_is_taken_while_queue_db_stays_locked_and_says_it_is_not_in_history(w, capsys):
    with held_lock(w.cfg.queue_db, "python"):
        code = run(cli, ["snapshot"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert len(_snapshots(w)) == 1
    warning = [ln for ln in out.err.splitlines() if ln.startswith("quill: warning: ")]
    assert len(warning) == 1, out.err
    assert "the snapshot was taken, but it is not in `quill jobs history`" in warning[0]
    assert "database is locked" in warning[0] and "stayed locked" in warning[0], warning
    assert ("snapshot", "ok") not in _runs(w)  # said, not pretended


def test_a_snapshot_waits_for_a_lock_that_ends_and_is_recorded(w, capsys):
    with _lock_released_after(w, 0.5):
        code = run(cli, ["snapshot", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "unrecorded" not in json.loads(out.out)
    assert "warning" not in out.err
    assert ("snapshot", "ok") in _runs(w)


def test_jobs_run_gives_up_on_a_lock_that_stays_in_the_one_error_format(w, capsys):
    with held_lock(w.cfg.queue_db, "python"):
        human = run(cli, ["jobs", "run", "fts_merge"])
        err = capsys.readouterr().err
        as_json = run(cli, ["jobs", "run", "fts_merge", "--json"])
        error = json.loads(capsys.readouterr().out)["error"]
    assert human == as_json == 8
    lines = err.splitlines()
    assert lines[0].startswith("quill: error: the job queue at ") and "locked" in lines[0]
    assert lines[1].startswith("quill: note: ") and "stayed locked" in lines[1], err
    assert lines[2].startswith("quill: hint: another process holds the lock of "), err
    assert error["kind"] == "queue_unavailable" and "fuser" in error["hint"]
    assert any("stayed locked" in n for n in error["notes"]), error
    assert build_for(w.cfg).pending()["store"] == 0  # nothing was queued


def test_jobs_run_waits_for_a_lock_that_ends_and_queues_the_job(w, capsys):
    with _lock_released_after(w, 0.5):
        code = run(cli, ["jobs", "run", "fts_merge"])
    assert code == 0, capsys.readouterr().err
    assert build_for(w.cfg).pending()["store"] == 1


def test_doctor_check_runs_the_damage_check_while_queue_db_stays_locked(w, capsys):
    with held_lock(w.cfg.queue_db, "python"):
        code = run(cli, ["doctor", "--check", "--json"])
    out = capsys.readouterr()
    check = [c for c in json.loads(out.out) if c["check"] == "damage check"]
    assert len(check) == 1 and check[0]["status"] == "ok", (code, out)
    assert "not in `quill jobs history`" in check[0]["detail"], check
