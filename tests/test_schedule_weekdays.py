"""Schedules stored by older code with numeric days of the week (``--cron`` passed crontab's
field to APScheduler 3 unchanged, which numbers the days from Monday: ``30 4 * * 0`` fired
on Mondays) are stored once, at the next scheduler or edit, with those days *named* as they
have always fired (``workers.schedules.name_weekdays``): same fire times, same next run, the
operator told; new ``--cron`` numbers keep crontab's meaning (tests/test_schedule_words.py)."""

from __future__ import annotations

import datetime as dt
import pickle
import sqlite3

from apscheduler.triggers.cron import CronTrigger

from quill import home as config
from quill.jobs import schedule as schedule_db
from quill.workers import FIRE_REF
from quill.workers.schedules import edit_schedules

#: What the old ``--cron`` stored (``CronTrigger.from_crontab``, UTC), by schedule id.
OLD = {"weekly": "30 4 * * 0", "weekdays": "0 9 * * 1-5", "every-other": "15 3 * * */2"}


def _fire_times(trigger, weeks: int = 4) -> list[dt.datetime]:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    out, prev = [], None
    while True:
        nxt = trigger.get_next_fire_time(prev, prev + dt.timedelta(seconds=1) if prev else now)
        if nxt is None or nxt > now + dt.timedelta(weeks=weeks):
            return out
        out.append(nxt)
        prev = nxt


def _store_old(home) -> dict[str, tuple]:
    """Add the ``OLD`` schedules, then rewrite their rows as the old code stored them (the
    numeric field unchanged); returns ``{id: (next run time, fire times)}``."""
    cfg = config.load(home)
    with edit_schedules(cfg) as sched:
        for sid in OLD:
            sched.add_job(
                trigger="interval", hours=1, id=sid, name="snapshot",
                **schedule_db.fire_args("snapshot", FIRE_REF),
            )  # fmt: skip
    conn = sqlite3.connect(str(home / "schedule.db"))
    out = {}
    with conn:
        for sid, expr in OLD.items():
            (blob,) = conn.execute(
                "SELECT job_state FROM apscheduler_jobs WHERE id = ?", (sid,)
            ).fetchone()
            state = pickle.loads(blob)
            trigger = CronTrigger.from_crontab(expr, timezone="UTC")
            state.update(trigger=trigger, next_run_time=_fire_times(trigger)[0])
            conn.execute(
                "UPDATE apscheduler_jobs SET job_state = ? WHERE id = ?",
                (pickle.dumps(state, pickle.HIGHEST_PROTOCOL), sid),
            )
            out[sid] = (state["next_run_time"], _fire_times(trigger))
    conn.close()
    return out


def test_old_numeric_weekdays_are_named_once_and_fire_as_before(home):
    before = _store_old(home)
    # the old "0" fired on Mondays (APScheduler's numbering), not on crontab's Sunday
    assert {t.strftime("%a") for t in before["weekly"][1]} == {"Mon"}
    cfg = config.load(home)
    with edit_schedules(cfg) as sched:
        named = {r["id"]: r for r in sched.weekdays_named}
        jobs = {j.id: j for j in sched.get_jobs()}
    assert set(named) == set(OLD)  # told, schedule by schedule; catalog defaults untouched
    assert named["weekly"]["now"] == "cron 30 4 * * mon"
    assert "day_of_week='0'" in named["weekly"]["stored"]
    assert named["weekdays"]["now"] == "cron 0 9 * * tue,wed,thu,fri,sat"
    assert named["every-other"]["now"] == "cron 15 3 * * mon,wed,fri,sun"
    for sid, (next_run, times) in before.items():
        stored = str(jobs[sid].trigger.fields[4])
        assert not any(c.isdigit() for c in stored), stored
        assert _fire_times(jobs[sid].trigger) == times  # the same instants as before
        assert jobs[sid].next_run_time == next_run  # no run skipped or added
    # once: nothing is left to rename, and the rows stay as they are
    raw = sqlite3.connect(str(home / "schedule.db"))
    rows = raw.execute("SELECT id, job_state FROM apscheduler_jobs ORDER BY id").fetchall()
    raw.close()
    with edit_schedules(cfg) as sched:
        assert sched.weekdays_named == []
    raw = sqlite3.connect(str(home / "schedule.db"))
    assert raw.execute("SELECT id, job_state FROM apscheduler_jobs ORDER BY id").fetchall() == rows
    raw.close()


def test_quill_schedule_names_them_and_tells_the_operator(quill, home):
    _store_old(home)
    result = quill.run("schedule", "list")
    assert "schedule weekly: stored" in result.stderr and "cron 30 4 * * mon" in result.stderr
    assert "cron 30 4 * * mon" in result.stdout
    again = quill.run("schedule", "list")
    assert "stored" not in again.stderr
