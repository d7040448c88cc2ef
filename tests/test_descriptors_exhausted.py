"""With no file descriptor left, every place Quill opens a file or a socket on a request
path or in a worker loop says so as one classified error (``quill.home.descriptors``), never
"no store yet", a server outage, a bad token or a crash: the SQLite writer's open, a
PostgreSQL connect, ``tokens.db``, the job queue, a spool append; HTTP answers 503
``overloaded`` with Retry-After on reads, appends and job runs; the writer backs off and
carries on by itself once descriptors are free.

A real process (``tests/exhaustion_probe.py``) under ``prlimit``, its descriptors taken by
opening ``/dev/null`` until EMFILE, against a real store, spool, queue and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, quill_env
from harness import drain, make_home

from quill.ops.client.client import Client
from quill.ops.service.tokens import TokenStore


def _probe(home, nofile: int, *args: str) -> dict:
    """``tests/exhaustion_probe.py args`` under ``prlimit --nofile``: what it printed."""
    argv = ["prlimit", f"--nofile={nofile}:{nofile}", "--", sys.executable]
    run = subprocess.run(
        [*argv, str(REPO / "tests/exhaustion_probe.py"), *args],
        env=quill_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_open_meets_exhaustion_as_overloaded_and_the_writer_retries(tmp_path, pg_url):
    cfg = make_home(tmp_path / "h", spool={"segment_bytes": 4096})
    Client(config_=cfg).append("s1", [{"role": "user", "content": "hello"}])
    drain(cfg.home)
    token, _row = TokenStore(cfg.tokens_db).create("probe", ["read", "write", "admin"])
    Client(config_=cfg).append("s1", [{"role": "user", "content": "pending"}])  # for the writer
    out = _probe(cfg.home, 256, str(cfg.home), token, pg_url)
    assert out["writer_open"] == "DescriptorsExhaustedError", out
    assert out["pg_connect"] == "DescriptorsExhaustedError", out
    assert out["tokens"] == "DescriptorsExhaustedError", out
    assert out["queue"] == "QueueOverloadedError", out
    assert out["client_append"] == "OverloadedError", out
    assert out["writer_spool_pause"] > 0 and "Errno 24" in out["writer_spool_error"], out
    assert out["writer_loop_pause"] > 0 and "DescriptorsExhausted" in out["writer_error"], out
    for name, (status, retry_after, body) in out["http"].items():
        assert status == 503 and retry_after == "1", (name, status, body)
        assert json.loads(body)["error"]["reason"] == "overloaded", (name, body)
    assert out["writer_recovered"] and out["read_after"] == 200, out


@pytest.mark.corpus
def test_the_watcher_does_not_set_a_file_aside_for_want_of_descriptors(tmp_path):
    from conftest import CORPUS
    from watch_helpers import watch_config

    folder = tmp_path / "agent"
    folder.mkdir()
    name = "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl"
    (folder / "session.jsonl").write_bytes((CORPUS / name).read_bytes())
    watch_config(tmp_path / "h", [folder])
    out = _probe(tmp_path / "h", 128, "watch", str(tmp_path / "h"))
    assert out["event"]["imported"] == 0 and out["first"]["imported"] == 0, out
    assert out["unreadable"] == [], out
    assert out["second"]["imported"] == 1 and out["second"]["new_messages"] > 0, out
