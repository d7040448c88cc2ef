"""Jobs and schedules on a real fleet: run now with a recorded outcome, schedules persisted
across restarts, missed runs coalesced into one, runs later than the grace time skipped and
logged, snapshots verified and stamped."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from quill import home as config
from quill.store import Reader
from quill.workers.schedules import edit_schedules


def _runs(home, job):
    with Reader(home / "state.db") as r:
        return r.job_runs(job=job, limit=100)


def _log_tails(home, lines: int = 40) -> str:
    """The last ``lines`` lines of each fleet log (``logs/*.log``), for a failure message."""
    return "".join(
        f"\n--- {log.name} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in sorted((home / "logs").glob("*.log"))
    )


def _backdate(home, job_id: str, seconds_ago: float, every_s: int = 60) -> None:
    """Persist schedule ``job_id`` as if the fleet had been down for ``seconds_ago``."""
    with edit_schedules(config.load(home)) as sched:
        now = dt.datetime.now(dt.UTC)
        sched.modify_job(
            job_id,
            trigger=IntervalTrigger(
                seconds=every_s, start_date=now - dt.timedelta(seconds=seconds_ago)
            ),
            next_run_time=now - dt.timedelta(seconds=seconds_ago),
        )


def test_jobs_run_records_outcome_and_figures(quill, home, fleet):
    quill.run("push", "--session", "j", input='{"role": "user", "content": "hello"}')
    quill.wait_idle()
    out = quill.json("jobs", "run", "snapshot", "--wait", "60")
    run = out["run"]
    assert run["outcome"] == "ok" and run["figures"]["position"] != "1:0"
    snaps = list((home / "snapshots").glob("snapshot-*.db"))
    assert len(snaps) == 1 and snaps[0].name.endswith(
        run["figures"]["position"].replace(":", "-") + ".db"
    )
    cp = quill.json("jobs", "run", "wal_checkpoint", "--wait", "60")["run"]
    assert cp["outcome"] == "ok" and {"wal_bytes_before", "wal_bytes_after"} <= set(cp["figures"])
    assert {"snapshot", "wal_checkpoint"} <= {
        r["job"] for r in quill.json("jobs", "history")["runs"]
    }


def test_unknown_job_is_a_usage_error(quill):
    proc = quill.run("jobs", "run", "defrag", check=False)
    assert proc.returncode == 2 and "known jobs" in proc.stderr


@pytest.mark.parametrize("job", ["pg_analyze", "pg_integrity_check"])
def test_a_postgres_job_on_the_sqlite_store_is_refused_before_queueing(quill, home, job):
    # It used to be queued and fail in the consumer with "AttributeError: 'NoneType' object
    # has no attribute 'encode'" (no store url), and a schedule of it failed every period.
    for args in (("jobs", "run", job, "--wait", "5"), ("schedule", "add", job, "--every", "1h")):
        proc = quill.run(*args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "maintains a PostgreSQL store" in proc.stderr and "Traceback" not in proc.stderr
        error = json.loads(quill.run(*args, "--json", check=False).stdout)["error"]
        assert error["kind"] == "usage" and "SQLite store" in error["message"]
    assert not (home / "queue.db").exists()  # refused before the queue is opened
    assert job not in {s["id"] for s in quill.json("schedule", "list")["schedules"]}


def test_runnable_matches_the_job_to_the_store_kind():
    from quill.jobs import catalog

    assert catalog.runnable("pg_analyze", "postgresql://x/y").name == "pg_analyze"
    assert (
        catalog.runnable("auto_prune", None).name
        == catalog.runnable("auto_prune", "postgresql://x/y").name
    )
    with pytest.raises(catalog.WrongStoreError):
        catalog.runnable("vacuum", "postgresql://x/y")
    with pytest.raises(catalog.WrongStoreError):
        catalog.runnable("pg_analyze", None)
    with pytest.raises(KeyError):
        catalog.runnable("declare_corrupt", None)


def test_an_unknown_job_lists_only_the_jobs_this_store_kind_runs():
    from quill.jobs import catalog

    with pytest.raises(KeyError) as sqlite:
        catalog.runnable("nosuchjob", None)
    assert "vacuum" in str(sqlite.value) and "pg_" not in str(sqlite.value)
    with pytest.raises(KeyError) as pg:
        catalog.runnable("nosuchjob", "postgresql://x/y")
    assert "pg_analyze" in str(pg.value) and "vacuum" not in str(pg.value)
    assert "auto_prune" in str(pg.value)  # a job for either kind is listed for both


def test_schedule_changes_survive_a_fleet_restart(quill, home):
    quill.run("schedule", "add", "snapshot", "--every", "2h")
    quill.run("schedule", "pause", "quick_check")
    quill.run("run", "--until-idle", "--timeout", "60")
    quill.run("run", "--until-idle", "--timeout", "60")
    rows = {r["id"]: r for r in quill.json("schedule", "list")["schedules"]}
    assert rows["snapshot"]["trigger"] == "every 2 hours" and rows["snapshot"]["every_s"] == 7200
    assert rows["quick_check"]["next_run"] is None  # still paused
    quill.run("schedule", "resume", "quick_check")
    listed = {r["id"]: r for r in quill.json("schedule", "list")["schedules"]}
    assert listed["quick_check"]["next_run"] is not None
    proc = quill.run("schedule", "pause", "nope", check=False)
    assert proc.returncode == 3 and "no schedule 'nope'" in proc.stderr
    removed = quill.run("schedule", "remove", "snapshot")
    assert "pausing it instead" in removed.stderr
    assert {r["id"]: r for r in quill.json("schedule", "list")["schedules"]}["snapshot"][
        "next_run"
    ] is None
    assert quill.run("schedule", "add", "snapshot", "--every", "0s", check=False).returncode == 2


def test_missed_runs_are_coalesced_into_one(quill, home):
    _backdate(home, "wal_checkpoint", seconds_ago=600, every_s=60)  # ten missed runs
    quill.run("run", "--until-idle", "--timeout", "60")
    assert len(_runs(home, "wal_checkpoint")) == 1


def test_a_window_missed_days_ago_runs_once_at_the_next_start(quill, home):
    """A host asleep through a nightly window runs the job once when it is back."""
    _backdate(home, "quick_check", seconds_ago=3 * 86400, every_s=86400)  # three missed nights
    quill.run("push", "--session", "m", input='{"role": "user", "content": "hello"}')
    quill.run("run", "--until-idle", "--timeout", "120")
    runs = _runs(home, "quick_check")
    assert [r["outcome"] for r in runs] == ["ok"], runs


def test_a_failing_job_is_recorded_and_visible_in_status(quill, home, fleet):
    quill.run("push", "--session", "j", input='{"role": "user", "content": "hello"}')
    quill.wait_idle()
    (home / "snapshots").rmdir()
    (home / "snapshots").write_text("not a directory")  # the snapshot job cannot write its copy
    out = quill.run("jobs", "run", "snapshot", "--wait", "60", "--json", check=False)
    # Seen twice under load without a cause: a failure carries the fleet's logs with it.
    assert out.returncode == 1, f"{out.stdout}{out.stderr}{_log_tails(home)}"
    run = json.loads(out.stdout)["run"]
    assert run["outcome"] == "error" and "snapshots" in run["error"]
    # Status lists the newest runs; a later one (the failed snapshot's retry 30 s on, a
    # scheduled job) may come first, so the run is found by its id.
    [listed] = [j for j in quill.status()["jobs"] if j["id"] == run["id"]]
    assert (listed["job"], listed["outcome"]) == ("snapshot", "error")
