"""Schedules store intent (job name + trigger), never config values or paths: a config edit
changes scheduled runs, a copied data dir runs its jobs against itself, and a schedule.db
written by the old code (frozen kwargs, old callable path) is migrated, not dropped."""

from __future__ import annotations

import datetime as dt
import pickle
import shutil
import sqlite3

from apscheduler.triggers.interval import IntervalTrigger

from quill import home as config
from quill.jobs import schedule as schedule_db
from quill.jobs.queues import build
from quill.jobs.triggers import describe
from quill.store import Reader
from quill.workers import FIRE_REF
from quill.workers.schedules import edit_schedules


def _runs(home, job):
    with Reader(home / "state.db") as r:
        return r.job_runs(job=job, limit=100)


def _make_due(home, job_id: str, every_s: int = 3600) -> None:
    """Persist schedule ``job_id`` as due a minute ago (within the misfire grace time)."""
    with edit_schedules(config.load(home)) as sched:
        now = dt.datetime.now(dt.UTC)
        sched.modify_job(
            job_id,
            trigger=IntervalTrigger(seconds=every_s, start_date=now - dt.timedelta(seconds=60)),
            next_run_time=now - dt.timedelta(seconds=60),
        )


def _rows(home) -> dict[str, dict]:
    conn = sqlite3.connect(str(home / "schedule.db"))
    try:
        return {
            i: pickle.loads(b)
            for i, b in conn.execute("SELECT id, job_state FROM apscheduler_jobs")
        }
    finally:
        conn.close()


def test_a_config_edit_changes_the_next_scheduled_run(quill, home):
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hello"}')
    quill.run("run", "--until-idle", "--timeout", "120")  # schedules installed with keep = 5
    for _ in range(3):
        quill.run("snapshot")
    assert len(list((home / "snapshots").glob("snapshot-*.db"))) == 3
    (home / "config.toml").write_text("[snapshots]\nkeep = 1\n")
    _make_due(home, "snapshot")
    quill.run("run", "--until-idle", "--timeout", "120")
    run = [r for r in _runs(home, "snapshot") if r["outcome"] == "ok"][0]
    assert len(run["figures"]["removed"]) == 3  # the scheduled run used keep = 1
    assert len(list((home / "snapshots").glob("snapshot-*.db"))) == 1
    row = _rows(home)["snapshot"]
    assert (row["func"], row["args"], row["kwargs"]) == (FIRE_REF, ("snapshot",), {})


def test_a_copied_data_dir_runs_its_jobs_against_itself(quill, home, tmp_path):
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hello"}')
    quill.run("run", "--until-idle", "--timeout", "120")
    copy = tmp_path / "copied home"
    shutil.copytree(home, copy)
    before = sorted(p.name for p in (home / "snapshots").iterdir())
    _make_due(copy, "snapshot")
    type(quill)(copy).run("run", "--until-idle", "--timeout", "120")
    assert [r["outcome"] for r in _runs(copy, "snapshot")] == ["ok"]
    assert len(list((copy / "snapshots").glob("snapshot-*.db"))) == 1
    assert (
        sorted(p.name for p in (home / "snapshots").iterdir()) == before
    )  # the original is untouched
    assert build(home / "queue.db").pending() == {"store": 0, "worker": 0}
    assert _runs(home, "snapshot") == []


def _write_legacy(home) -> dict[str, dict]:
    """Rewrite schedule.db rows exactly as the old code stored them: callable
    ``jobs.schedule:fire``, no args, kwargs ``{queue_db, job, params}`` with absolute paths."""
    cfg = config.load(home)
    with edit_schedules(cfg) as sched:
        sched.add_job(
            trigger="cron",
            hour=2,
            id="nightly-snap",
            name="snapshot",
            **schedule_db.fire_args("snapshot", FIRE_REF),
        )
        sched.pause_job("quick_check")
    conn = sqlite3.connect(str(home / "schedule.db"))
    legacy = {}
    with conn:
        for job_id, blob in conn.execute("SELECT id, job_state FROM apscheduler_jobs").fetchall():
            state = pickle.loads(blob)
            job = state["args"][0]
            state.update(
                func="jobs.schedule:fire",
                args=(),
                misfire_grace_time=3600,
                kwargs={
                    "queue_db": str(cfg.queue_db),
                    "job": job,
                    "params": {
                        "db_path": str(cfg.state_db),
                        "snapshots_dir": str(cfg.snapshots_dir),
                        "keep": 5,
                    }
                    if job == "snapshot"
                    else {},
                },
            )
            conn.execute(
                "UPDATE apscheduler_jobs SET job_state = ? WHERE id = ?",
                (pickle.dumps(state, pickle.HIGHEST_PROTOCOL), job_id),
            )
            legacy[job_id] = state
    conn.close()
    return legacy


def test_an_old_format_schedule_db_is_migrated_keeping_triggers_and_pauses(quill, home):
    legacy = _write_legacy(home)
    assert {r["func"] for r in _rows(home).values()} == {"jobs.schedule:fire"}
    listed = {r["id"]: r for r in quill.json("schedule", "list")["schedules"]}
    assert set(listed) == set(legacy)  # nothing dropped
    rows = _rows(home)
    for job_id, old in legacy.items():
        new = rows[job_id]
        assert (new["func"], new["args"], new["kwargs"]) == (FIRE_REF, (old["kwargs"]["job"],), {})
        assert (str(new["trigger"]), new["next_run_time"]) == (
            str(old["trigger"]),
            old["next_run_time"],
        )
        assert (new["coalesce"], new["misfire_grace_time"]) == (
            True,
            None,
        )  # missed windows run once
    assert listed["quick_check"]["next_run"] is None  # still paused
    assert listed["nightly-snap"]["trigger"] == describe(legacy["nightly-snap"]["trigger"])


def test_a_migrated_schedule_fires_with_current_paths(quill, home):
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hello"}')
    quill.run("run", "--until-idle", "--timeout", "120")
    _write_legacy(home)
    moved = home.parent / "moved home"
    shutil.move(home, moved)
    _make_due(moved, "snapshot")  # migrates, then makes it due
    type(quill)(moved).run("run", "--until-idle", "--timeout", "120")
    assert [r["outcome"] for r in _runs(moved, "snapshot")] == ["ok"]
    assert not home.exists()  # nothing recreated at the old path
