"""Schedules in people's terms: ``--cron`` means what crontab means (day 0 and 7 are Sunday;
APScheduler 3 alone reads 0 as Monday), and every listing words a trigger one way ("every 5
minutes", "cron 30 4 * * sun") instead of APScheduler's ``interval[0:05:00]`` /
``cron[hour='3', minute='30']`` and microsecond ISO times."""

from __future__ import annotations

import datetime as dt

import pytest
from harness import make_home

from quill.jobs.schedule import read_schedules
from quill.workers import FIRE_REF


@pytest.mark.parametrize("expr", ["30 4 * * 0", "30 4 * * 7", "30 4 * * sun"])
def test_a_crontab_sunday_fires_on_sunday(quill, home, expr):
    make_home(home, watch={"enabled": False})
    added = quill.json("schedule", "add", "vacuum", "--cron", expr)
    when = dt.datetime.fromisoformat(added["next_run"])
    assert when.strftime("%A %H:%M") == "Sunday 04:30", added
    assert added["trigger"] == "cron 30 4 * * sun" and added["cron"] == "30 4 * * sun"


def test_crontab_weekday_ranges_and_steps_keep_their_meaning(quill, home):
    make_home(home, watch={"enabled": False})
    weekdays = quill.json("schedule", "add", "snapshot", "--cron", "0 9 * * 1-5", "--id", "wd")
    assert weekdays["cron"] == "0 9 * * mon,tue,wed,thu,fri"
    bad = quill.run("schedule", "add", "snapshot", "--cron", "0 9 * * 8", check=False)
    assert bad.returncode == 2 and "0-7" in bad.stderr


def test_listings_word_triggers_and_times_for_people(quill, home):
    make_home(home, watch={"enabled": False})
    quill.run("schedule", "add", "snapshot", "--every", "90m")
    text = quill.run("schedule", "list").stdout + quill.run("jobs", "list").stdout
    for raw in ("interval[", "cron[", "+00:00", "hour=3"):
        assert raw not in text, text
    assert "every 90 minutes" in text and "every 5 minutes" in text
    assert "cron 30 3 * * *" in text  # fts_optimize's default, in both listings
    quill.run("schedule", "add", "spool_gc", "--every", "2h", "--id", "gc2")
    added = quill.run("schedule", "add", "spool_gc", "--every", "3h", "--id", "gc2")
    assert "replaces the schedule every 2 hours" in added.stderr
    assert added.stdout.startswith("gc2: every 3 hours; next run ")
    rows = {r["id"]: r for r in quill.json("schedule", "list")["schedules"]}
    assert rows["wal_checkpoint"]["trigger"] == "every 5 minutes"
    assert rows["wal_checkpoint"]["every_s"] == 300
    assert rows["fts_optimize"]["cron"] == "30 3 * * *"
    # The dashboard's jobs page reads schedule.db this way when no scheduler published.
    read = {r["id"]: r for r in read_schedules(home / "schedule.db", FIRE_REF)}
    assert read["snapshot"]["trigger"] == "every 90 minutes"
