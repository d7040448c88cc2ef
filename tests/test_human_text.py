"""The CLI's human output reads as text, not as Python: counts agree with their noun ("1
session", never "1 sessions"), and a job's figures or a queue's counts are ``key=value`` text,
never a dict's ``repr`` (``{'mode': 'TRUNCATE', 'blocked_by_reader': False}``)."""

from __future__ import annotations

import json
import time

from harness import drain, make_home

from quill.ops import human
from quill.spool import Spool
from quill.store.sqlite.connection import open_writer, transaction


def _one_message(home, text="hello"):
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": text}]}
        )


def test_counts_agree_with_their_noun():
    assert human.count(1, "session") == "1 session"
    assert human.count(0, "session") == "0 sessions"
    assert human.count(3, "batch", "batches") == "3 batches"
    assert human.count(None, "message") == "? messages"
    assert human.store_counts({"sessions": 1, "messages": 2}) == "1 session, 2 messages"


def test_status_doctor_and_recover_say_one_session_and_one_row(quill, home):
    make_home(home, watch={"enabled": False})
    _one_message(home)
    drain(home)
    assert "store    1 session, 1 message; cursor" in quill.run("status").stdout
    doctor = quill.run("doctor", check=False).stdout
    assert "1 session, 1 message, cursor" in doctor
    assert "{'" not in doctor and "None pending" not in doctor
    quill.run("snapshot")
    _one_message(home, "after the snapshot")
    drain(home)
    said = quill.run("recover").stdout
    assert "1 batch replayed, 1 message row;" in said, said


def test_job_history_figures_are_text_not_a_python_dict(quill, home):
    make_home(home, watch={"enabled": False})
    _one_message(home)
    drain(home)
    figures = {"mode": "TRUNCATE", "wal_bytes_before": 2871672, "blocked_by_reader": False}
    now = time.time()
    conn = open_writer(home / "state.db")
    try:
        with transaction(conn):
            conn.execute(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                "VALUES ('wal_checkpoint', ?, ?, 'ok', ?, NULL)",
                (now, now, json.dumps(figures)),
            )
    finally:
        conn.close()
    out = quill.run("jobs", "history", "--job", "wal_checkpoint").stdout
    assert "mode=TRUNCATE, wal_bytes_before=2871672, blocked_by_reader=false" in out, out
    assert "{'" not in out and "False" not in out


def test_jobs_run_wait_prints_the_runs_figures_as_text(quill, home):
    """``quill jobs run NAME --wait`` prints the run it waited for the way ``jobs history``
    does (it printed the figures' Python ``repr``: ``{'mode': 'PASSIVE', ...}``)."""
    from conftest import stop_fleet

    make_home(home, watch={"enabled": False})
    _one_message(home)
    fleet = quill.start_fleet()
    try:
        out = quill.run("jobs", "run", "wal_checkpoint", "--wait", "120").stdout
    finally:
        stop_fleet(fleet)
    assert out.startswith("wal_checkpoint: ok mode=PASSIVE"), out
    assert "{'" not in out and "False" not in out, out
