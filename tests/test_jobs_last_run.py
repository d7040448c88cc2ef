"""``quill jobs list`` and ``GET /api/v1/jobs`` show each job's last run however old: it is
read per job (``Reader.last_job_runs``), on both backends. Before, it was looked for among the
newest 500 runs of all jobs, so a job whose last run came before 500 runs of others showed
none."""

from __future__ import annotations

import json
import time

import httpx
from conftest import QuillCLI
from harness import Home
from service_helpers import served

from quill.jobs import catalog
from quill.jobs.queues import build_for
from quill.ops.cli.base import run
from quill.ops.cli.root import cli


def test_a_job_run_before_many_runs_of_others_is_still_its_last_run(tmp_path, backend, capsys):
    home = Home(tmp_path / "h", backend, watch={"enabled": False})
    try:
        record = build_for(home.cfg).tasks[catalog.RECORD_RUN]
        t = time.time() - 100_000
        record(job="delete_empty", started_at=t - 50, ended_at=t - 49, outcome="error", figures={})
        record(job="delete_empty", started_at=t, ended_at=t + 1, outcome="ok", figures={"n": 1})
        for i in range(520):  # more than the 500 newest runs the old code looked through
            s = t + 10 + i
            record(job="orphan_sweep", started_at=s, ended_at=s + 1, outcome="ok", figures={})
        home.drain()

        capsys.readouterr()
        assert run(cli, ["--home", str(home.root), "jobs", "list", "--json"]) == 0
        listed = {j["name"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
        assert listed["delete_empty"]["last_outcome"] == "ok"
        assert listed["delete_empty"]["last_started_at"] == t
        assert listed["orphan_sweep"]["last_started_at"] == t + 10 + 519
        assert listed["auto_prune"]["last_outcome"] is None  # never run: no last run

        with served(QuillCLI(home.root)) as base:
            got = httpx.get(f"{base}/api/v1/jobs", timeout=60)
        assert got.status_code == 200, got.text
        served_jobs = {j["name"]: j for j in got.json()["jobs"]}
        last = served_jobs["delete_empty"]["last_run"]
        assert last is not None and last["started_at"] == t and last["figures"] == {"n": 1}
        assert served_jobs["auto_prune"]["last_run"] is None
    finally:
        home.close()
