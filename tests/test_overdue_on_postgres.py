"""``quill status`` / ``quill doctor`` "overdue" on a data dir switched from SQLite to a shared
PostgreSQL store: the schedules checked are those the scheduler fires (the store's), never the
``schedule.db`` the data dir kept from its SQLite days. A new user who followed the README's
switch saw ``overdue wal_checkpoint: never succeeded`` forever — a job PostgreSQL does not
have — while the cluster's own schedules were never checked. Real data dir, real CLI, real
PostgreSQL."""

from __future__ import annotations

import time

import psycopg
from conftest import QuillCLI, pg_data_dir


def test_overdue_reads_the_clusters_schedules_not_a_left_over_schedule_db(tmp_path, pg_store_url):
    home = tmp_path / "laptop"
    quill = QuillCLI(home)
    quill.run("schedule", "list")  # SQLite days: schedule.db with wal_checkpoint every 5 min
    assert (home / "schedule.db").exists()

    pg_data_dir(tmp_path / "gateway", pg_store_url, 1)  # the shared store exists
    (home / "config.toml").write_text(f'[store]\nurl = "{pg_store_url}"\n')
    schedules = {
        s["id"] for s in quill.json("schedule", "list")["schedules"]
    }  # the cluster's defaults
    assert "orphan_sweep" in schedules and "wal_checkpoint" not in schedules

    now = time.time()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute(  # runs recorded for a day; the 10-minute orphan_sweep last ok 1 h ago
            "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures) VALUES "
            "('orphan_sweep', %s, %s, 'ok', '{}'), ('orphan_sweep', %s, %s, 'ok', '{}')",
            (now - 86400, now - 86400, now - 3600, now - 3600),
        )
    overdue = {o["job"]: o for o in quill.status()["overdue"]}
    assert "wal_checkpoint" not in overdue, overdue
    assert overdue["orphan_sweep"]["last_ok"] is not None, overdue
    checks = {c["check"]: c for c in quill.json("doctor", check=False)}
    detail = checks["overdue jobs"]["detail"]
    assert "orphan_sweep" in detail and "wal_checkpoint" not in detail
