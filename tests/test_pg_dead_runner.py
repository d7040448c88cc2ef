"""A PostgreSQL writer killed (``kill -9``) in the middle of a store job left the run
``running`` for ever: several hosts' writers share ``job_runs``, and a run's tag said only
"writer", so no writer could tell a dead one's run from a live one's. Each run now names its
process (host, boot id, pid, start ticks) and its spool claim; the next writer of that spool
id closes it as ``interrupted``, as the SQLite writer does, and any writer closes one whose
claim expired, while a live writer's run — on this host or another — is left alone."""

from __future__ import annotations

import json
import os
import signal
import time

import psycopg
from harness import make_home
from test_bookkeeping_enospc import _worker

from quill.home import RunDir, process_identity
from quill.jobs.queues import build_for
from quill.spool import Spool


def _runs(url: str, job: str | None = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT id, job, outcome, figures, error FROM job_runs "
            + ("WHERE job = %s " if job else "")
            + "ORDER BY id",
            (job,) if job else (),
        ).fetchall()


def _until(check, timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None:
            assert proc.poll() is None, f"exited {proc.returncode}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _fake_run(url: str, holder: dict, claim: tuple[str, str] | None = None) -> int:
    """A ``running`` writer run tagged with ``holder`` (another host's writer, say), and the
    live spool claim ``(spool id, token)`` when given; returns the run's id."""
    with psycopg.connect(url, autocommit=True) as conn:
        if claim is not None:
            conn.execute(
                "INSERT INTO spool_claims (spool_id, holder, host, path, pid, claimed_at, "
                "deadline) VALUES (%s, %s, 'other-host', '/elsewhere', 1, "
                "extract(epoch from now()), extract(epoch from now()) + 600)",
                claim,
            )
        figures = json.dumps({"runner": "writer", "holder": holder})
        return conn.execute(
            "INSERT INTO job_runs (job, started_at, outcome, figures) "
            "VALUES ('auto_prune', %s, 'running', %s) RETURNING id",
            (time.time(), figures),
        ).fetchone()[0]


def test_a_killed_pg_writers_running_job_is_closed_by_the_next_writer(tmp_path, pg_store_url):
    cfg = make_home(tmp_path / "home", pg_store_url)
    with Spool(cfg.spool_dir) as sp:
        sp.append("session.create", {"session_id": "s"})
    writer = _worker(cfg.home, "writer")
    locker = None
    try:
        _until(lambda: (RunDir(cfg.home).live("writer") or {}).get("idle"), 90, "idle", writer)
        # Hold the sessions table so the next store job blocks mid-run, after its start row.
        locker = psycopg.connect(pg_store_url)
        locker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
        build_for(cfg).enqueue("auto_prune")
        _until(
            lambda: any(r[2] == "running" for r in _runs(pg_store_url, "auto_prune")),
            60,
            "the job's start row",
            writer,
        )
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if locker is not None:
            locker.rollback()
            locker.close()
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    [killed] = _runs(pg_store_url, "auto_prune")
    assert killed[2] == "running"
    holder = json.loads(killed[3])["holder"]
    assert holder["pid"] == writer.pid and holder["start_ticks"] and holder["boot_id"]
    assert holder["host"] == os.uname().nodename and holder["spool_id"] and holder["claim"]

    # Runs of other writers: another host's, with a live claim (alive: left alone); another
    # host's whose claim is gone (closed); one of a live process on this host (left alone).
    other_live = _fake_run(
        pg_store_url,
        {
            "host": "other-host",
            "boot_id": "b",
            "pid": 1,
            "start_ticks": 1,
            "spool_id": "B",
            "claim": "tok-b",
        },
        claim=("B", "tok-b"),
    )
    other_gone = _fake_run(
        pg_store_url,
        {
            "host": "other-host",
            "boot_id": "b",
            "pid": 2,
            "start_ticks": 2,
            "spool_id": "C",
            "claim": "tok-c",
        },
    )
    me = process_identity()  # this test process: alive, on this host
    here = {"host": os.uname().nodename, **me, "spool_id": "D", "claim": None}
    here_live = _fake_run(pg_store_url, here)

    writer = _worker(cfg.home, "writer")  # the next writer of this spool id
    try:
        _until(lambda: (RunDir(cfg.home).live("writer") or {}).get("idle"), 90, "idle", writer)
    finally:
        writer.terminate()
        writer.wait(timeout=30)
    outcome = {r[0]: (r[2], r[4]) for r in _runs(pg_store_url)}
    assert outcome[killed[0]] == (
        "interrupted",
        "the process running it died before it finished",
    ), outcome
    assert outcome[other_gone][0] == "interrupted", outcome
    assert outcome[other_live] == ("running", None), outcome
    assert outcome[here_live] == ("running", None), outcome
