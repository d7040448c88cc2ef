"""Jobs are never silently lost or misreported, and the WAL is visible and
bounded — with real fleets, real kill -9s and a real reader holding a snapshot."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import stop_fleet, worker_pids

from quill.jobs.queues import build
from quill.store import Reader
from quill.store.sqlite.connection import open_reader, open_writer, transaction
from quill.store.sqlite.store import TRUNCATE_WAL_BYTES


def _wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _status_file(home, role) -> dict:
    try:
        return json.loads((home / "run" / f"{role}.json").read_text())
    except (OSError, ValueError):
        return {}


def _runs(home, job):
    with Reader(home / "state.db") as r:
        return r.job_runs(job=job, limit=100)


def _ballast(home, mb: int) -> None:
    """Grow the store by ``mb`` MiB of incompressible rows, so VACUUM and integrity_check take
    a while (fleet stopped; a test-only table)."""
    conn = open_writer(home / "state.db")
    try:
        with transaction(conn):
            conn.execute("CREATE TABLE IF NOT EXISTS ballast(x BLOB)")
            for _ in range(mb):
                conn.execute("INSERT INTO ballast VALUES (randomblob(1048576))")
        conn.wal_checkpoint(mode=3)  # TRUNCATE: start from an empty WAL
    finally:
        conn.close()


def _seed(quill, home, mb: int = 0) -> None:
    quill.run("push", "--session", "s", input='{"role": "user", "content": "hello"}')
    quill.run("run", "--until-idle", "--timeout", "120")  # installs the schedules
    if mb:
        _ballast(home, mb)


def test_writer_killed_during_vacuum_leaves_an_interrupted_run_and_a_truncated_wal(quill, home):
    _seed(quill, home, mb=120)
    fleet = quill.start_fleet()
    try:
        first = worker_pids(home)[0]
        build(home / "queue.db").enqueue("vacuum", min_free_ratio=0.0)
        _wait_for(
            lambda: _status_file(home, "writer").get("job") == "vacuum", what="vacuum to start"
        )
        time.sleep(0.3)
        os.kill(first, signal.SIGKILL)
        _wait_for(
            lambda: (
                (w := _status_file(home, "writer")).get("pid") not in (None, first)
                and w.get("idle")
            ),
            what="a new idle writer",
        )
        run = _runs(home, "vacuum")[0]
        assert run["outcome"] == "interrupted" and run["figures"]["runner"] == "writer"
        assert (
            os.path.getsize(str(home / "state.db") + "-wal") < 1 << 20
        )  # truncated after the attempt
        history = quill.json("jobs", "history", "--job", "vacuum")["runs"]
        assert history[0]["outcome"] == "interrupted"
    finally:
        assert stop_fleet(fleet) == 0


@pytest.mark.skipif(
    os.environ.get("QUILL_TORTURE") != "1",
    reason=(
        "torture run (QUILL_TORTURE=1): timed out waiting for the interrupted row in 2 of about 6 "
        "clean-clone CI runs with two test workers on 2 cores, cause not yet found"
    ),
)
def test_consumer_killed_during_integrity_check_leaves_an_interrupted_run(quill, home):
    _seed(quill, home, mb=120)
    fleet = quill.start_fleet()
    try:
        consumer = worker_pids(home)[2]
        build(home / "queue.db").enqueue("integrity_check")
        _wait_for(
            lambda: (
                (c := _status_file(home, "consumer")).get("in_flight")
                and c.get("last") == "integrity_check"
            ),
            what="integrity_check to start",
        )

        # Let the check run in short slices; after each, keep it frozen while the writer (not
        # frozen) gets seconds to apply the start row — so even on a loaded machine the row is
        # in the store long before the check itself could finish. Then kill it mid-run.
        def running():
            return [r for r in _runs(home, "integrity_check") if r["outcome"] == "running"]

        for _ in range(60):
            os.kill(consumer, signal.SIGCONT)
            time.sleep(0.02)
            os.kill(consumer, signal.SIGSTOP)
            frozen_until = time.monotonic() + 3
            while not running() and time.monotonic() < frozen_until:
                time.sleep(0.05)
            if running():
                break
        assert running(), "no start row for the running check"
        assert not [r for r in _runs(home, "integrity_check") if r["outcome"] == "ok"]
        os.kill(consumer, signal.SIGKILL)
        # The supervisor restarts the consumer with backoff, the new one queues the close of
        # interrupted runs and the writer applies it: on a loaded CI machine that can take
        # longer than a minute (seen once with two test workers).
        run = _wait_for(
            lambda: [r for r in _runs(home, "integrity_check") if r["outcome"] == "interrupted"],
            timeout=240,
            what="the interrupted run",
        )[0]
        assert run["figures"]["runner"] == "consumer" and run["ended_at"] is not None
    finally:
        assert stop_fleet(fleet) == 0


def test_jobs_run_wait_without_a_fleet_says_so_at_once_and_keeps_the_job(quill, home):
    _seed(quill, home)
    proc = quill.run("jobs", "run", "snapshot", "--wait", "600", check=False, timeout=60)
    assert proc.returncode == 4 and "no fleet is running" in proc.stderr
    assert build(home / "queue.db").pending()["worker"] == 1  # still queued
    quill.run("run", "--until-idle", "--timeout", "120")
    assert [r["outcome"] for r in _runs(home, "snapshot")] == ["ok"]


def test_quill_snapshot_is_in_history_and_declare_corrupt_is_not_offered(quill, home):
    _seed(quill, home)
    quill.run("snapshot")
    quill.run("run", "--until-idle", "--timeout", "120")  # the writer applies the record
    runs = quill.json("jobs", "history", "--job", "snapshot")["runs"]
    assert [(r["outcome"], r["figures"]["runner"]) for r in runs] == [("ok", "cli")]
    assert "declare_corrupt" not in {j["name"] for j in quill.json("jobs", "list")["jobs"]}
    proc = quill.run("jobs", "run", "declare_corrupt", check=False)
    assert proc.returncode == 2 and "unknown job" in proc.stderr
    assert (
        quill.run("schedule", "add", "declare_corrupt", "--every", "1h", check=False).returncode
        == 2
    )


def test_status_and_doctor_list_overdue_jobs(quill, home):
    _seed(quill, home)
    day = 86400
    now = time.time()
    conn = open_writer(home / "state.db")
    try:
        with transaction(conn):
            conn.execute("DELETE FROM job_runs")
            conn.executemany(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures) "
                "VALUES (?, ?, ?, ?, '{}')",
                [
                    (
                        "wal_checkpoint",
                        now - 20 * day,
                        now - 20 * day,
                        "ok",
                    ),  # runs recorded for 20 days
                    ("wal_checkpoint", now - 60, now - 60, "ok"),
                    ("quick_check", now - 3 * day, now - 3 * day, "ok"),
                ],
            )  # daily, 3 days ago
    finally:
        conn.close()
    st = quill.status()
    overdue = {o["job"]: o for o in st["overdue"]}
    assert overdue["quick_check"]["last_ok"] is not None
    assert overdue["integrity_check"]["last_ok"] is None  # weekly, never in 20 days
    assert "wal_checkpoint" not in overdue
    assert "overdue  quick_check" in quill.run("status").stdout
    checks = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert (
        checks["overdue jobs"]["status"] == "warn"
        and "quick_check" in checks["overdue jobs"]["detail"]
    )


def test_a_reader_holding_a_snapshot_never_stalls_the_drain_and_the_wal_is_visible_then_truncated(
    quill, home
):
    _seed(quill, home)
    fleet = quill.start_fleet()
    reader = None
    try:
        worker_pids(home)
        reader = open_reader(home / "state.db")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()  # holds a snapshot
        blob = "x" * 8000
        lines = "\n".join(
            json.dumps({"role": "user", "content": f"{i} {blob} {os.urandom(2000).hex()}"})
            for i in range(1500)
        )
        quill.run(
            "push", "--session", "big", "--wait", "120", input=lines
        )  # applied despite the reader
        _wait_for(
            lambda: quill.status()["wal"]["blocked_by_reader_since"],
            timeout=60,
            what="a blocked checkpoint",
        )
        st = quill.status()
        assert st["wal"]["high"] and st["wal"]["bytes"] > st["wal"]["store_bytes"]
        assert "blocked by a reader" in quill.run("status").stdout
        checks = {c["check"]: c for c in quill.json("doctor", check=False)}
        assert (
            checks["WAL size"]["status"] == "warn"
            and "blocked by a reader" in checks["WAL size"]["detail"]
        )
        reader.execute("COMMIT")
        reader.close()
        reader = None
        # Truncated once the reader is gone; small writes after it (job-run rows) may regrow the
        # WAL, but never past the idle-truncate threshold.
        _wait_for(
            lambda: os.path.getsize(str(home / "state.db") + "-wal") < TRUNCATE_WAL_BYTES,
            timeout=120,
            what="an idle TRUNCATE",
        )
        # the writer publishes the cleared state with its next status, not with the TRUNCATE
        _wait_for(
            lambda: quill.status()["wal"]["blocked_by_reader_since"] is None,
            timeout=60,
            what="the blocked-checkpoint report cleared",
        )
        log = (home / "logs" / "writer.log").read_text()
        assert "writer.checkpoint_blocked" in log and "database is locked" not in log
        quill.run(
            "push", "--session", "big", "--wait", "60", input='{"role": "user", "content": "more"}'
        )
        # The checkpoint never waits for a reader: one reading at that instant (`jobs run
        # --wait` polls the store itself) makes it report blocked_by_reader; asked again, it
        # truncates.
        for _ in range(5):
            run = quill.json("jobs", "run", "wal_checkpoint", "--mode", "truncate", "--wait", "60")
            if not run["run"]["figures"]["blocked_by_reader"]:
                break
        figures = run["run"]["figures"]
        assert figures["mode"] == "TRUNCATE" and not figures["blocked_by_reader"]
        assert figures["wal_bytes_after"] == 0
    finally:
        if reader is not None:
            reader.close()
        assert stop_fleet(fleet) == 0
