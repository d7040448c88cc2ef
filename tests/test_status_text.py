"""``quill status`` prints text from settings, the store and job errors verbatim: square
brackets in it (a TOML section name, a path or a list in an error message) are text, never
console markup that is dropped or that makes the command fail."""

from __future__ import annotations

import time

from conftest import QuillCLI
from harness import drain, make_home

from quill.spool import Spool
from quill.store.sqlite.connection import open_writer, transaction


def _home(home):
    make_home(home, watch={"enabled": False})
    with Spool(home / "spool") as sp:
        msgs = [{"role": "user", "content": "hi"}]
        sp.append("messages.append", {"session_id": "s", "messages": msgs})
    drain(home)


def test_status_names_the_setting_that_turned_live_capture_off(quill, home):
    _home(home)
    out = quill.run("status").stdout
    assert "watch    off ([watch] enabled = false)" in out


def test_status_prints_a_job_error_and_the_data_dir_with_brackets_verbatim(tmp_path):
    home = tmp_path / "agents [/prod] home"
    quill = QuillCLI(home)
    _home(home)
    error = "OSError: [Errno 28] no space left writing [/var/tmp/snap] (tried [bold] twice)"
    now = time.time()
    conn = open_writer(home / "state.db")
    try:
        with transaction(conn):
            conn.execute(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                "VALUES ('snapshot', ?, ?, 'error', '{}', ?)",
                (now, now, error),
            )
    finally:
        conn.close()
    proc = quill.run("status", check=False)
    assert proc.returncode == 0, proc.stderr
    assert error in proc.stdout
    assert str(home) in proc.stdout


def test_status_names_each_recent_job_once_with_its_latest_run(quill, home):
    """Five WAL checkpoints in a row (one after each large import chunk) were five identical
    ``job wal_checkpoint`` lines that pushed every other job off the status."""
    _home(home)
    now = time.time()
    conn = open_writer(home / "state.db")
    try:
        with transaction(conn):
            for i, job in enumerate(["snapshot", *["wal_checkpoint"] * 5]):
                conn.execute(
                    "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                    "VALUES (?, ?, ?, 'ok', '{}', NULL)",
                    (job, now + i, now + i),
                )
    finally:
        conn.close()
    lines = [ln for ln in quill.run("status").stdout.splitlines() if ln.startswith("job ")]
    assert [ln.split()[1] for ln in lines] == ["wal_checkpoint", "snapshot"], lines
    # how many of the recent runs were this job's, not read as how many had its outcome
    assert "(ran 5 times in the last 6 job runs)" in lines[0] and lines[1] == lines[1].rstrip()
