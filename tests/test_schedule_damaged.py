"""A damaged ``schedule.db`` (pages overwritten: SQLITE_CORRUPT; a foreign file: SQLITE_NOTADB)
is said in Quill's one error format by every reader of it — each ``quill schedule`` command,
status, doctor, the dashboard's and the API's job list — and the fleet's scheduler stays up
without firing, publishes the damage, logs it once and starts again by itself once the file
is moved aside."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_bookkeeping_enospc import _events as events

from quill import home as data_dir
from quill.home import RunDir
from quill.ops import logs
from quill.ops.cli import cli
from quill.ops.cli.base import run
from quill.ops.service import views
from quill.ops.service.app import create_app
from quill.ops.service.tokens import TokenStore
from quill.ops.status import health, overdue
from quill.ops.status.doctor import run_checks
from quill.workers import scheduler
from quill.workers.schedules import edit_schedules


def _overwrite_pages(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for off in range(4096, len(data), 4096):
        data[off : off + 64] = os.urandom(64)
    path.write_bytes(bytes(data))


def _foreign(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


DAMAGE = {"corrupt-pages": _overwrite_pages, "not-a-database": _foreign}


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request, tmp_path):
    cfg = data_dir.load(tmp_path / "home")
    cfg.ensure_dirs()
    with edit_schedules(cfg):
        pass  # the default schedules, in schedule.db
    DAMAGE[request.param](cfg.schedule_db)
    return cfg


COMMANDS = [
    ["schedule", "list"],
    ["schedule", "pause", "snapshot"],
    ["schedule", "resume", "snapshot"],
    ["schedule", "remove", "snapshot"],
    ["schedule", "add", "snapshot", "--every", "2h", "--id", "extra"],
]


def test_every_schedule_command_gives_one_error_and_exit_code(damaged, capsys):
    for argv in COMMANDS:
        code = run(cli, ["--home", str(damaged.home), *argv, "--json"])
        out = capsys.readouterr()
        assert code == 1, (argv, out)
        assert "Traceback" not in out.err + out.out
        error = json.loads(out.out)["error"]
        assert error["kind"] == "schedule_unreadable", (argv, error)
        assert "schedule.db" in error["message"] and "move schedule.db aside" in error["hint"]
        code = run(cli, ["--home", str(damaged.home), *argv])
        out = capsys.readouterr()
        assert code == 1 and "quill: error: the schedule at" in out.err, (argv, out)


def test_status_doctor_and_the_job_list_report_the_state(damaged, capsys):
    assert run(cli, ["--home", str(damaged.home), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schedule"]["readable"] is False and "schedule.db" in doc["schedule"]["error"]
    check = next(c for c in run_checks(damaged) if c["check"] == "schedule store")
    assert check["status"] == "fail"
    rows = views.jobs(damaged)  # the dashboard's /jobs page and GET /api/v1/jobs
    assert rows and all(
        r["schedules"] is None and "schedule.db" in r["schedule_error"] for r in rows
    )
    secret, _row = TokenStore(damaged.tokens_db).create("t", ["read"])
    app = create_app(damaged, logs.configure(None, "web"), anonymous="none")
    auth = {"Authorization": f"Bearer {secret}"}
    with TestClient(app, base_url="http://127.0.0.1") as web:
        page = web.get("/jobs", headers=auth)
        assert page.status_code == 200 and 'id="schedule-unreadable"' in page.text, page.text
        api = web.get("/api/v1/jobs", headers=auth)
        assert api.status_code == 200 and api.json()["jobs"][0]["schedules"] is None, api.text
    assert overdue.overdue_jobs(damaged, None) == []


def _events(cfg, name: str) -> list[dict]:
    return events(cfg.logs_dir / "scheduler.log", name)


def _wait(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_scheduler_waits_out_a_damaged_schedule_and_resumes_by_itself(damaged):
    cfg = damaged
    log = logs.configure(cfg.logs_dir, "scheduler")
    stop, ended = threading.Event(), []

    def main() -> None:
        try:
            scheduler.run(cfg, log, stop)
        except BaseException as exc:  # the old scheduler ended here on every start
            ended.append(exc)
            raise

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        run_dir = RunDir(cfg.home)
        _wait(lambda: (run_dir.last("scheduler") or {}).get("schedule_damaged") or ended)
        assert not ended, ended
        time.sleep(3.0)  # several publish rounds: still up, still waiting, logged once
        assert thread.is_alive() and not ended
        st = run_dir.last("scheduler")
        assert st["ready"] is False and st["jobs"] == [] and st["schedule_damaged_since"]
        assert len(_events(cfg, "scheduler.schedule_damaged")) == 1
        assert not _events(cfg, "scheduler.started")  # fired nothing
        cfg.schedule_db.rename(cfg.schedule_db.with_name("schedule.db.damaged"))
        _wait(lambda: _events(cfg, "scheduler.started"))
        _wait(lambda: (run_dir.last("scheduler") or {}).get("jobs"))
        st = run_dir.last("scheduler")
        assert not st.get("schedule_damaged")
        assert {j["id"] for j in st["jobs"]} >= {"quick_check", "snapshot"}
        assert health.schedule_state(cfg)["readable"] is True
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and not ended
