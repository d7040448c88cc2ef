"""A leading scheduler rides out a PostgreSQL outage in place: the real scheduler worker
(``quill.ops.worker_main scheduler``) runs in a network namespace of its own, joined to the
host by a veth pair, on a PRIVATE PostgreSQL listening on the veth's host address (the shared
server is never touched). Its link is cut: it stops leading (fires nothing), stays up as a
standby whose status says the store cannot be reached, and once the link is back it leads and
fires again — the same process, never restarted.

Needs root (``ip netns``) and PostgreSQL's server binaries; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, QuillCLI
from semantics_helpers import Store
from test_leader_lease import _queued
from test_leader_netns import _namespace, _private_postgres, _run, _until

pytest.importorskip("psycopg")


@pytest.fixture
def net() -> Iterator[tuple[str, str, str, int]]:
    """``(namespace, host-side interface, host address, port)`` (test_leader_netns.py)."""
    with _namespace() as (ns, host_if, host_ip, _ns_ip), _private_postgres(host_ip) as port:
        yield ns, host_if, host_ip, port


def _status(home: Path) -> dict:
    try:
        return json.loads((home / "run" / "scheduler.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow  # ~40 s: a private server, an outage and the lease taken back
def test_a_leader_cut_off_from_the_store_stands_by_and_leads_again_without_a_restart(tmp_path, net):
    ns, host_if, host_ip, port = net
    Store(tmp_path / "store", f"postgresql://postgres@127.0.0.1:{port}/postgres").backend.close()
    home = tmp_path / "a"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[store]\nurl = "postgresql://postgres@{host_ip}:{port}/postgres"\n'
    )
    QuillCLI(home).run("schedule", "add", "pg_analyze", "--every", "1s")
    worker = subprocess.Popen(
        [
            *("ip", "netns", "exec", ns),
            *(sys.executable, "-m", "quill.ops.worker_main", "scheduler", "--home", str(home)),
        ],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(lambda: _status(home).get("role") == "leader" and _queued(home) >= 2, 60, "a leader")
        _run("ip", "link", "set", host_if, "down")
        cut = _until(
            lambda: (s := _status(home)).get("role") == "standby" and s.get("store_error") and s,
            30,
            "the cut leader to stand by",
        )
        assert cut["standby_reason"] == "the store cannot be reached", cut
        assert cut["store_unreachable_since"], cut
        fired = _queued(home)
        time.sleep(3)
        assert _queued(home) == fired, "a scheduler cut off from the store fired"
        assert worker.poll() is None, "the scheduler exited during the outage"
        _run("ip", "link", "set", host_if, "up")
        _until(
            lambda: _status(home).get("role") == "leader" and _queued(home) > fired + 1,
            60,
            "the scheduler to lead and fire again",
        )
        assert worker.poll() is None, "the scheduler was restarted"
        log = (home / "logs" / "scheduler.log").read_text()
        assert "scheduler.crashed" not in log
        assert "scheduler.store_back" in log
    finally:
        worker.terminate()
        try:
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
